"""Vendor backends (installed as ``accel.backends``).

Built-in: ``cuda``, ``rocm``, ``xpu``, ``mps``, ``cpu``. Out-of-tree backends
register a :class:`~accel.backends.Backend` subclass under the entry-point group
``accel.backends`` (``name = "module:Class"``); they are loaded on first use of
:func:`registered`.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points

import torch

from accel import _compat
from accel.errors import UnknownBackendError

from ._base import Backend, Capabilities, KernelLimits, ProbeResult
from .cpu import CpuBackend
from .cuda import CudaBackend
from .mps import MpsBackend
from .rocm import RocmBackend
from .xpu import XpuBackend

__all__ = [
    "BUILTIN",
    "Backend",
    "Capabilities",
    "KernelLimits",
    "ProbeResult",
    "backend_for_device",
    "dispatch_key_for_device_type",
    "forget",
    "registered",
]

#: The built-in backends by name, in selection order.
BUILTIN: dict[str, type[Backend]] = {
    b.name: b for b in (CudaBackend, RocmBackend, XpuBackend, MpsBackend, CpuBackend)
}

# accel._compat resolves runtime functions per torch device type from the serving backend's tables;
# it is told here so that it needs no import of the backends (which import it).
for _cls in BUILTIN.values():
    _compat.register_backend(_cls)
del _cls

_REGISTERED: dict[str, type[Backend]] | None = None


def registered() -> dict[str, type[Backend]]:
    """Every backend by name: built-ins plus entry points of group ``accel.backends``.

    A broken entry point is skipped with a warning naming it; it never hides the
    built-ins. Cached; :func:`accel.clear_cache` forgets it.
    """
    global _REGISTERED
    if _REGISTERED is None:
        found = dict(BUILTIN)
        for ep in entry_points(group="accel.backends"):
            try:
                cls = ep.load()
            except Exception as exc:  # noqa: BLE001 - a third-party plug-in may raise anything on import
                warnings.warn(f"accel: backend entry point {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2)
                continue
            if not (isinstance(cls, type) and issubclass(cls, Backend)) or cls.name in BUILTIN:
                warnings.warn(f"accel: backend entry point {ep.name!r} is not a new accel Backend subclass; skipped",
                              stacklevel=2)
                continue
            found[cls.name] = cls
            _compat.register_backend(cls)  # a built-in keeps its device type; a new type is served by cls
        _REGISTERED = found
    return _REGISTERED


def forget() -> None:
    """Forget the cached :func:`registered` answer (entry points are read again at next use)."""
    global _REGISTERED
    _REGISTERED = None


def _serving(device_type: str, caller: str, shown: str, fix: str) -> list[type[Backend]]:
    """The registered backends of ``device_type``, in registration order; raises for a type none runs."""
    found = [cls for cls in registered().values() if cls.torch_device_type == device_type]
    if not found:
        known = sorted({cls.torch_device_type for cls in registered().values()})
        raise UnknownBackendError(
            f"{caller}: no accel backend runs device type {shown}. Backends run device types {', '.join(known)}. "
            f"{fix}"
        )
    return found


def backend_for_device(device: torch.device, /) -> type[Backend]:
    """The registered backend class that serves a torch device.

    Device type ``cuda`` is served by :class:`~accel.backends.rocm.RocmBackend` on a ROCm
    build of torch (``torch.version.hip`` set, read at each call) and by
    :class:`~accel.backends.cuda.CudaBackend` otherwise; other types by the backend whose
    ``torch_device_type`` they are. Initialises no device and probes nothing.

    Args:
        device: a ``torch.device`` (its index is ignored).

    Returns:
        The :class:`Backend` subclass (the class, not an instance).

    Raises:
        UnknownBackendError: no registered backend runs that device type (``meta``).

    Example:
        >>> import torch
        >>> from accel.backends import backend_for_device
        >>> backend_for_device(torch.device("cpu")).name
        'cpu'
    """
    device_type = device.type
    if device_type == "cuda":  # both NVIDIA and AMD builds of torch call their GPUs "cuda"
        return BUILTIN["rocm"] if getattr(torch.version, "hip", None) else BUILTIN["cuda"]
    return _serving(device_type, "backend_for_device", f"{device_type!r} ({device})",
                    "Pass a device of one of those types.")[0]


def dispatch_key_for_device_type(device_type: str, /) -> str:
    """The ATen dispatch key of a torch device type (``"cuda"`` -> ``"CUDA"``, ROCm's too; ``"cpu"`` ->
    ``"CPU"``, ``"xpu"`` -> ``"XPU"``, ``"mps"`` -> ``"MPS"``), from the serving backend's ``dispatch_key``.

    Raises:
        UnknownBackendError: no registered backend runs that device type.

    Example:
        >>> from accel.backends import dispatch_key_for_device_type
        >>> dispatch_key_for_device_type("cuda"), dispatch_key_for_device_type("cpu")
        ('CUDA', 'CPU')
    """
    return _serving(device_type, "dispatch_key_for_device_type", repr(device_type), "Pass one of those.")[0].dispatch_key

