"""Device selection: explicit argument > ``ACCEL_DEVICE`` > best available.

Exactly one backend is active per selection. Results are cached per
``(spec, ACCEL_DEVICE)``; :func:`accel.clear_cache` forgets them.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass

import torch

from accel import _probe
from accel.backends import Backend
from accel.errors import (
    BackendUnavailableError,
    DeviceIndexError,
    HiddenDevicesWarning,
    InvalidDeviceError,
    UnknownBackendError,
)

__all__ = ["device", "backend", "selection", "Selection", "ENV_VAR", "hidden_devices", "index_value", "parse_index",
           "split_spec"]

#: The environment variable that picks the backend when no argument is given.
ENV_VAR = "ACCEL_DEVICE"


@dataclass(frozen=True)
class Selection:
    """The outcome of one selection.

    Attributes:
        backend: the active :class:`~accel.backends.Backend` instance.
        device: the ``torch.device`` handed to the user.
        source: ``"argument"``, ``"ACCEL_DEVICE"`` or ``"best available"``.
        reason: one line saying why this backend was chosen.
    """

    backend: Backend
    device: torch.device
    source: str
    reason: str


_CACHE: dict[tuple[type, object, str | None], Selection] = {}
_probe.on_clear(_CACHE.clear)

# accel.device()'s fast path: ACCEL_DEVICE read straight from os.environ's backing dict
# (what os.environ.get reads after encoding the key; 5-10x cheaper than os.environ.get,
# and still sees every os.environ / monkeypatch.setenv change). Falls back to
# os.environ.get where the interpreter's os.environ has no such dict.
_ENV_DATA: dict | None = getattr(os.environ, "_data", None)
try:
    _ENV_KEY: object = os.environ.encodekey(ENV_VAR)  # type: ignore[attr-defined]
except AttributeError:
    _ENV_DATA, _ENV_KEY = None, ENV_VAR
if not isinstance(_ENV_DATA, dict):
    _ENV_DATA = None
_DEVICES: dict[tuple[type, object, object], torch.device] = {}
_probe.on_clear(_DEVICES.clear)


#: A device index as torch.device writes it: ASCII digits, no leading zero (str.isdigit also takes '²', '٣').
_INDEX = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def index_value(text: str) -> int | None:
    """The index ``text`` spells (``"0"``, ``"12"``), or ``None`` when it spells none.

    Only ASCII digits without leading zeros, as ``torch.device`` takes them. The one
    index parse in accel (device specs, the runtime's device arguments, ``LOCAL_RANK``).
    """
    return int(text) if _INDEX.fullmatch(text) else None


def parse_index(text: str, what: str, fix: str = "Write '<backend>:<index>', e.g. 'cuda:0'.") -> int:
    """The index after ``':'`` in a device spec.

    Args:
        text: what followed the colon.
        what: the start of the message (the call and the spec the user wrote).
        fix: the message's last sentence (what to do).

    Raises:
        DeviceIndexError: (a ``ValueError``) ``text`` is not ASCII digits without leading zeros.
    """
    index = index_value(text)
    if index is None:
        raise DeviceIndexError(
            f"{what}: the index {text!r} is not a non-negative integer written in ASCII digits without leading "
            f"zeros ('0', '1', '12'), as torch.device takes it. {fix}"
        )
    return index


def split_spec(spec: str) -> tuple[str, str | None]:
    """``" CUDA:1 "`` -> ``("cuda", "1")``; ``"xpu"`` -> ``("xpu", None)``. Check the index with :func:`parse_index`."""
    name, sep, idx = spec.strip().lower().partition(":")
    return name, (idx if sep else None)


def _valid_names() -> list[str]:
    return list(_probe.probes())


def _probe_table() -> str:
    return "\n".join(f"  {name}: {'available' if p.available else 'unavailable'} - {p.reason}"
                     for name, p in _probe.probes().items())


def _parse(spec: object, source: str, env: str | None = None) -> tuple[str, int | None, str]:
    """``spec`` -> ``(backend name, index or None, what the user wrote)``; raises typed errors.

    An int index applies to the ``ACCEL_DEVICE`` backend when that is set, else to the best one.
    """
    if isinstance(spec, torch.device):
        return _name_for_device_type(spec.type, repr(spec), source), spec.index, repr(spec)
    if isinstance(spec, bool) or not isinstance(spec, (str, int)):
        raise InvalidDeviceError(
            f"accel.device: got {spec!r} of type {type(spec).__name__}. A device spec is None, a str such as "
            f"'cuda' or 'cuda:1', an int index, or a torch.device. Pass one of those."
        )
    if isinstance(spec, int):
        name = _parse(env, f"{ENV_VAR}=")[0] if env else _best().name
        return name, spec, str(spec)
    name, text = split_spec(spec)
    name = _name_for_device_type(name, repr(spec), source)
    index = None if text is None else parse_index(
        text, f"{source}{spec!r}", f"{_count_text(name)} Write '<backend>' or '<backend>:<index>', e.g. "
                                   f"'{name if name != 'rocm' else 'cuda'}:0'.")
    return name, index, spec


def _count_text(name: str) -> str:
    """How many devices backend ``name`` has, as a sentence for index errors."""
    p = _probe.probes()[name]
    if not p.available:
        return f"Backend {name!r} has no visible device ({p.reason})."
    return (f"Backend {name!r} has {p.device_count} visible device(s), so valid indices are "
            f"0..{p.device_count - 1}.")


#: Words people write for a vendor or a device kind -> the backend name(s) accel uses for it.
_VENDOR_WORDS = {"hip": "'rocm'", "amd": "'rocm'", "nvidia": "'cuda'", "intel": "'xpu'", "apple": "'mps'",
                 "metal": "'mps'", "gpu": "'cuda', 'rocm', 'xpu' or 'mps' (the vendor's name)"}


def _name_for_device_type(name: str, shown: str, source: str = "argument ") -> str:
    names = _valid_names()
    if name in names:
        if name == "cuda" and _probe.torch_build()["hip"]:
            return "rocm"  # ROCm builds of torch call AMD GPUs "cuda": the vendor comes from torch.version.hip
        return name
    alias = _VENDOR_WORDS.get(name.lower())
    raise UnknownBackendError(
        f"{source}{shown}: unknown backend {name!r}. Valid names: {', '.join(names)} "
        f"(optionally with ':<index>'). "
        + (f"Did you mean {alias}? " if alias else "")
        + (f"Fix the spelling, or unset {ENV_VAR} to pick the best available." if source.startswith(ENV_VAR)
           else "Fix the spelling, or pass no device to pick the best available.")
    )


def _best() -> Backend:
    for name, p in _probe.probes().items():
        if p.available:
            return _probe.backend_class(name)()
    raise BackendUnavailableError(  # unreachable with the built-in cpu backend, kept for plug-in registries
        f"accel: no backend is available.\n{_probe_table()}"
    )


def hidden_devices(chosen: Backend | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """Backends that the running torch build serves but whose every device the visible-devices variables
    hide, by name -> ``((variable, value), ...)`` (:attr:`~accel.backends.ProbeResult.hidden_by`).

    Args:
        chosen: only those that would have been preferred to this backend (``None``: all).
    """
    probes = _probe.probes()
    names = list(probes)
    stop = names.index(chosen.name) if chosen is not None and chosen.name in names else len(names)
    return {n: probes[n].hidden_by for n in names[:stop] if probes[n].hidden_by}


def _hidden_text(hidden: dict[str, tuple[tuple[str, str], ...]]) -> str:
    """``"the cuda devices of this torch build are all hidden by CUDA_VISIBLE_DEVICES=''"``."""
    parts = [f"{name} devices of this torch build are all hidden by "
             + ", ".join(f"{k}={v!r}" for k, v in variables) for name, variables in hidden.items()]
    return "the " + "; the ".join(parts)


def _resolve(spec: object, env: str | None) -> Selection:
    if spec is not None:
        source, raw = "argument", spec
    elif env:
        source, raw = ENV_VAR, env
    else:
        b = _best()
        p = _probe.probes()[b.name]
        reason = f"best available: {b.name} ({p.reason})"
        hidden = hidden_devices(b)
        if hidden:
            said = _hidden_text(hidden)
            reason += f"; {said}"
            warnings.warn(
                f"accel: {said}, so accel falls back to {b.name}. Unset the variable(s), or set them to the "
                f"device indices to use (e.g. {next(iter(hidden.values()))[0][0]}=0), then call "
                f"accel.clear_cache(); or set {ENV_VAR}={b.name} to choose {b.name} on purpose (no warning). "
                f"`accel doctor` checks this.",
                HiddenDevicesWarning, stacklevel=4)
        return Selection(b, b.device(), "best available", reason)
    label = "argument " if source == "argument" else f"{ENV_VAR}="
    name, index, shown = _parse(raw, label, env)
    p = _probe.probes()[name]
    if not p.available:
        raise BackendUnavailableError(
            f"{label}{shown!r}: backend {name!r} is not available: {p.reason}.\nEvery probe:\n{_probe_table()}\n"
            f"Pick an available backend (e.g. {'ACCEL_DEVICE=cpu' if source == ENV_VAR else repr('cpu')}), or install "
            f"the torch build for this hardware (https://pytorch.org/get-started/locally/)."
        )
    if index is not None and not 0 <= index < p.device_count:
        raise DeviceIndexError(
            f"{label}{shown!r}: device index {index} is out of range: backend {name!r} has {p.device_count} "
            f"visible device(s), so valid indices are 0..{p.device_count - 1}. "
            + ("Indices count from 0: pass 0 or leave the index out." if index < 0 else
               "Use a smaller index or check the visible-devices variables.")
        )
    b = _probe.backend_class(name)()
    return Selection(b, b.device(index), source, f"{source}: {shown!r} -> {name} ({p.reason})")


def selection(spec: object = None, /) -> Selection:
    """The full :class:`Selection` for ``spec`` (cached), with the reason it was made."""
    env = os.environ.get(ENV_VAR)
    key = (spec.__class__, spec, env)  # the class too: 0 == False and 1 == 1.0 must not share an entry
    try:
        return _CACHE[key]
    except KeyError:
        pass
    except TypeError:  # unhashable spec: not cacheable, and never a valid spec
        return _resolve(spec, env)
    sel = _resolve(spec, env)
    _CACHE[key] = sel
    return sel


def device(spec: object = None, /) -> torch.device:
    """The ``torch.device`` to run on.

    Order: ``spec`` if given, else the ``ACCEL_DEVICE`` environment variable (empty
    means unset), else the best available backend (cuda or rocm, then xpu, then mps,
    then cpu). ``"cuda"`` on a ROCm build of torch selects the ``rocm`` backend
    (torch calls AMD GPUs ``cuda``). Cached per ``(spec, ACCEL_DEVICE)``; a cached call
    costs well under 1 µs. :func:`accel.clear_cache` forgets the cache.

    Args:
        spec: ``None``, a backend name with an optional index (``"cpu"``, ``"cuda"``,
            ``"rocm:1"``, ``"xpu"``, ``"mps"``), an ``int`` index (on the ``ACCEL_DEVICE``
            backend when that is set, else on the best one), or a ``torch.device``.

    Returns:
        ``torch.device`` of the backend's torch device type (``cuda`` for ROCm), with
        the index if one was given, else without (the current device).

    Raises:
        UnknownBackendError: (a ``ValueError``) unknown name; the message lists valid names.
        BackendUnavailableError: (a ``RuntimeError``) the backend is not usable; lists every probe.
        DeviceIndexError: (a ``ValueError``) index outside ``0 .. device_count - 1``.
        InvalidDeviceError: (a ``TypeError``) ``spec`` is not a device spec.

    .. note:: Never initialises a device runtime: device counts come from NVML /
       amd-smi, so ``fork()`` afterwards is safe.

    Example:
        >>> import accel
        >>> accel.device("cpu")
        device(type='cpu')
    """
    env = _ENV_DATA.get(_ENV_KEY) if _ENV_DATA is not None else os.environ.get(ENV_VAR)
    try:
        return _DEVICES[spec.__class__, spec, env]
    except KeyError:
        pass
    except TypeError:  # unhashable spec: never a valid spec; selection() raises the typed error
        return selection(spec).device
    dev = _DEVICES[spec.__class__, spec, env] = selection(spec).device
    return dev


def backend(spec: object = None, /) -> Backend:
    """The active :class:`~accel.backends.Backend` for ``spec``, chosen like :func:`device`.

    Raises:
        The same errors as :func:`device`.

    Example:
        >>> import accel
        >>> accel.backend("cpu").dispatch_key
        'CPU'
    """
    return selection(spec).backend
