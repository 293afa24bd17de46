"""transformers' own hook: :func:`enable` registers accel's verified classes with
``transformers.monkey_patching`` (transformers 5.17+), so models that ``from_pretrained`` / ``from_config``
build have accel's norms, MLPs and attention; :func:`disable` undoes it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from typing import Any

from accel.errors import FeatureUnavailableError

from .families import FAMILIES, OPS
from .guards import dispatch_keys
from .verify import LOCK as _LOCK
from .verify import verdict

__all__ = ["disable", "enable", "enabled"]

#: transformers' patch-mapping keys :func:`enable` registered -> the accel class.
_ENABLED: dict[str, type] = {}


def _monkey_patching() -> Any:
    try:
        return importlib.import_module("transformers.monkey_patching")
    except ImportError as exc:
        installed = importlib.util.find_spec("transformers") is not None
        raise FeatureUnavailableError(
            f"accel.integrations.transformers.enable: transformers.monkey_patching is missing "
            f"({'transformers is installed but has no patch hook' if installed else 'transformers is not installed'}"
            f": {exc}). enable() needs transformers 5.17 or newer (pip install 'transformers>=5.17'); on older "
            f"versions call patch(model) on each built model.") from None


def _key(name: str) -> str:
    """The patch-mapping key of a class name: transformers matches keys as regular expressions with
    ``re.search``, so an anchored key (``^LlamaRMSNorm$``) keeps ``T5LayerNorm`` from matching ``MT5LayerNorm``."""
    return f"^{name}$"


def enable(*, families: Iterable[str] | None = None, norms: bool = True, mlp: bool = True,
           rope: bool = True) -> dict[str, dict[str, str]]:
    """Register accel's classes with transformers' own patch hook: models that ``from_pretrained`` /
    ``from_config`` build from now on have accel's norms, MLPs and attention.

    ``transformers.monkey_patching.register_patch_mapping`` (transformers 5.17+) swaps the named classes
    only while transformers builds a model; no class is patched globally. The causal-LM class cannot be
    reached that way (transformers instantiates the class ``from_pretrained`` is called on before its hook
    applies): call :func:`patch` on the built model for the loss, the one-node attention (verified per model
    config) and the residual adds fused across layers (a layer's link to the next layer's norm). A class another library has already
    registered a replacement for is left to it. Calling ``enable`` again adds what is missing.

    Args:
        families: the families to cover (names of :data:`FAMILIES`; default all).
        norms, mlp, rope: which roles to register.

    Returns:
        ``{"registered": {class name: accel op}, "skipped": {class name: reason}}``.

    Raises:
        FeatureUnavailableError: transformers (5.17+, with ``transformers.monkey_patching``) is not installed.
        ValueError: ``families`` names a family accel does not know.
    """
    mp = _monkey_patching()
    dispatch_keys()
    chosen = list(FAMILIES) if families is None else list(families)
    unknown = sorted(set(chosen) - set(FAMILIES))
    if unknown:
        raise ValueError(f"accel.integrations.transformers.enable: unknown families {unknown}. Known: "
                         f"{', '.join(FAMILIES)}.")
    wanted = {"rms_norm": norms, "mlp": mlp, "attention": rope, "causal_lm": False, "decoder_layer": norms}
    registered: dict[str, str] = {}
    skipped: dict[str, str] = {}
    with _LOCK:
        existing = mp.get_patch_mapping()
        mapping: dict[str, type] = {}
        for family in chosen:
            module_name, classes = FAMILIES[family]
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                skipped.update({name: f"{module_name} does not import ({exc})" for name in classes})
                continue
            for name, (role, variant) in classes.items():
                cls = getattr(module, name, None)
                if role == "causal_lm":
                    skipped[name] = ("the loss needs patch(model): transformers' hook cannot replace the class "
                                     "from_pretrained is called on")
                    continue
                if not wanted[role]:
                    continue
                if cls is None:
                    skipped[name] = f"{module_name} has no {name}"
                    continue
                key = _key(name)
                if key in _ENABLED:
                    registered[name] = OPS[role]
                    continue
                if key in existing or name in existing:
                    skipped[name] = "another replacement is registered for it in transformers' patch mapping"
                    continue
                accel_cls, why = verdict(cls, role, variant)
                if accel_cls is None:
                    skipped[name] = why
                    continue
                mapping[key] = accel_cls
                registered[name] = accel_cls.accel_op
        if mapping:
            mp.register_patch_mapping(mapping)
            try:  # transformers 5.17's hook imports every module alias it finds (image processors: torchvision)
                with mp.apply_patches():
                    pass
            except Exception as exc:
                mp.unregister_patch_mapping(list(mapping))
                _undo_partial_patches(set(mapping.values()))
                raise FeatureUnavailableError(
                    f"accel.integrations.transformers.enable: transformers' patch hook fails in this environment "
                    f"({type(exc).__name__}: {exc}): with any class registered, every from_pretrained/from_config "
                    f"would fail the same way (transformers.monkey_patching.apply_patches lists every transformers "
                    f"module, importing their aliases). Nothing was registered. Install what the error names "
                    f"(torchvision for the image-processor aliases), or call patch(model) on each built "
                    f"model.") from exc
            _ENABLED.update(mapping)
    return {"registered": registered, "skipped": skipped}


def _undo_partial_patches(classes: set[type]) -> None:
    """Put the original classes back where a failed ``apply_patches`` left accel's in a transformers module
    (it restores only after its block, which a failure in its set-up never reaches)."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("transformers") or getattr(module, "__file__", "") is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in classes:
                setattr(module, attr, value.accel_original)


def enabled() -> dict[str, str]:
    """The classes :func:`enable` has registered with transformers' hook: class name -> accel op."""
    with _LOCK:
        return {key.strip("^$"): cls.accel_op for key, cls in _ENABLED.items()}


def disable() -> list[str]:
    """Undo :func:`enable`: unregister accel's classes from transformers' patch hook. Models built while it
    was on keep their accel modules (:func:`unpatch` gives them the originals back).

    transformers' hook also points the models' class-level output recorders (``_can_record_outputs``: which
    module classes ``output_attentions`` records) at the replacement classes when it builds a model; they are
    pointed back at the original classes here, so unpatched models record their attentions again.

    Returns:
        The class names unregistered (empty when nothing was enabled).
    """
    with _LOCK:
        if not _ENABLED:
            return []
        mp = _monkey_patching()
        ours = dict(_ENABLED)
        current = mp.get_patch_mapping()
        keys = [k for k, cls in ours.items() if current.get(k) is cls]
        if keys:
            mp.unregister_patch_mapping(keys)
        _ENABLED.clear()
        _restore_recorders(set(ours.values()))
    return [k.strip("^$") for k in ours]


def _restore_recorders(classes: set[type]) -> None:
    """Point ``_can_record_outputs`` entries of loaded transformers models at the original classes again."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("transformers.models."):
            continue
        for value in list(vars(module).values()):
            recorders = vars(value).get("_can_record_outputs") if isinstance(value, type) else None
            if not isinstance(recorders, dict):
                continue
            for output, spec in list(recorders.items()):
                recorders[output] = _restored(spec, classes)


def _restored(spec: Any, classes: set[type]) -> Any:
    if isinstance(spec, list):
        return [_restored(s, classes) for s in spec]
    if isinstance(spec, type) and spec in classes:
        return spec.accel_original
    target = getattr(spec, "target_class", None)
    if isinstance(target, type) and target in classes:
        spec.target_class = target.accel_original
    return spec
