"""Inductor: config keys, compile modes and the GEMM template packages the running torch finds.

These import ``torch._inductor`` lazily, at first call: never at ``import accel``.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = [
    "ck_available",
    "cutedsl_available",
    "find_spec",
    "has_rdna3_flex_heuristics",
    "inductor_backend",
    "inductor_config_get",
    "inductor_config_has",
    "inductor_mode_options",
    "inductor_modes",
    "inductor_option_problem",
    "inductor_options",
    "nvgemm_available",
    "origami_available",
]

_MISSING = object()


def _package():
    """The ``accel._compat`` package: calls between its functions go through it, so a function that a
    test replaces there is the one that answers."""
    return sys.modules[__package__]


def inductor_config_get(key: str, default: object = _MISSING) -> object:
    """Value of the dotted Inductor config ``key`` (``"rocm.origami"``) in the running torch.

    Raises:
        KeyError: the running torch has no such key and no ``default`` was given.
    """
    import torch._inductor.config as cfg

    obj: object = cfg
    for part in key.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
    return obj


def inductor_config_has(key: str) -> bool:
    """Whether ``torch._inductor.config`` of the running torch has the dotted ``key``."""
    absent = object()  # not _MISSING: that one means "no default" and would raise
    return _package().inductor_config_get(key, absent) is not absent


def inductor_mode_options(mode: str | None) -> dict[str, object]:
    """The Inductor options ``torch.compile(mode=mode)`` applies (``torch._inductor.list_mode_options``).

    Raises:
        RuntimeError: ``mode`` is not a mode of the running torch (torch's own error).
    """
    import torch._inductor

    return dict(torch._inductor.list_mode_options(mode or "default"))


def inductor_backend(mode: str | None, options: dict[str, object] | None, dynamic: bool | None) -> object:
    """The backend object ``torch.compile(backend="inductor", mode=mode, options=options, dynamic=dynamic)`` builds
    (``torch._TorchCompileInductorWrapper``, private; the same three arguments on torch 2.9-2.15), for a caller that
    wraps it."""
    import torch

    return torch._TorchCompileInductorWrapper(mode, options, dynamic)


def inductor_modes() -> tuple[str, ...]:
    """The ``torch.compile`` modes of the running torch (``torch._inductor.list_mode_options()``'s keys)."""
    import torch._inductor

    return tuple(torch._inductor.list_mode_options())


def inductor_options() -> dict[str, object]:
    """Every option ``torch.compile(options=...)`` takes in the running torch, with its current value:
    ``torch._inductor.config.get_config_copy()`` (dotted names for nested configs: ``"triton.cudagraphs"``)."""
    import torch._inductor.config as cfg

    return dict(cfg.get_config_copy())


def inductor_option_problem(key: str, value: object, known: dict[str, object] | None = None) -> str | None:
    """Why ``torch.compile(options={key: value})`` would refuse this option, or ``None`` when it takes it.

    The same check torch makes when the compiled function is first called
    (``_TorchCompileInductorWrapper.apply_options``): ``key`` with ``-`` read as ``_`` must be a config
    name, and ``value`` an instance of its declared type (generic types are not checked, as in torch).

    Args:
        key: the option name the user wrote.
        value: its value.
        known: :func:`inductor_options` (passed in when checking many keys).
    """
    import typing

    import torch._inductor.config as cfg

    known = inductor_options() if known is None else known
    name = key.replace("-", "_")
    if name not in known:
        return "unknown"
    get_type = getattr(cfg, "get_type", None)
    declared = get_type(name) if get_type is not None else None
    if isinstance(declared, type) and typing.get_origin(declared) is None and not isinstance(value, declared):
        return (f"{key}={value!r:.60} is {type(value).__name__}; torch takes {type(known[name]).__name__} "
                f"(default {known[name]!r:.60})")
    return None


def _inductor_utils_flag(name: str) -> bool:
    """Call the running torch's own ``torch._inductor.utils.<name>()`` availability check."""
    import torch._inductor.utils as utils

    fn = getattr(utils, name, None)
    if fn is None:
        return False
    try:
        return bool(fn())
    except (ImportError, AttributeError, ValueError, RuntimeError):
        return False


def nvgemm_available() -> bool:
    """Whether the running torch's NVGEMM (NVIDIA Universal GEMM) backend finds its package.

    Asks torch itself (``ensure_cute_available`` and
    ``ensure_nv_universal_gemm_available``): torch 2.13 looks for ``cutlass_api``,
    torch 2.14 for ``cutlass.operators`` (from ``nvidia-cutlass-dsl``).
    """
    return _inductor_utils_flag("ensure_cute_available") and _inductor_utils_flag("ensure_nv_universal_gemm_available")


def cutedsl_available() -> bool:
    """Whether CuTeDSL (``cutlass``, from ``nvidia-cutlass-dsl``) is importable, as torch checks it."""
    return _inductor_utils_flag("ensure_cute_available")


def find_spec(name: str) -> bool:
    """Whether module ``name`` is installed, without importing it (``False`` also when a parent fails)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def ck_available() -> bool:
    """Whether Composable Kernel for Inductor (``ck4inductor``) is installed. Not imported."""
    return find_spec("ck4inductor")


def origami_available() -> bool:
    """Whether ``rocm-origami`` (import name ``origami``) is installed. Not imported."""
    return find_spec("origami")


def has_rdna3_flex_heuristics() -> bool:
    """Whether Inductor picks RDNA3 FlexAttention block sizes by sequence length itself.

    Detected through ``torch._inductor.utils.using_rocm_rdna3`` (added with those
    heuristics, torch 2.14).
    """
    import torch._inductor.utils as utils

    return hasattr(utils, "using_rocm_rdna3")
