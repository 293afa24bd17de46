"""Vendor backends (installed as ``accel.backends``).

Built-in: ``cuda``, ``rocm``, ``xpu``, ``mps``, ``cpu``. Out-of-tree backends
register a :class:`~accel.backends.Backend` subclass under the entry-point group
``accel.backends`` (``name = "module:Class"``); they are loaded on first use of
:func:`registered`.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points

from ._base import Backend, Capabilities, ProbeResult
from .cpu import CpuBackend
from .cuda import CudaBackend
from .mps import MpsBackend
from .rocm import RocmBackend
from .xpu import XpuBackend

__all__ = ["Backend", "Capabilities", "ProbeResult", "BUILTIN", "registered"]

#: The built-in backends by name, in selection order.
BUILTIN: dict[str, type[Backend]] = {
    b.name: b for b in (CudaBackend, RocmBackend, XpuBackend, MpsBackend, CpuBackend)
}

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
        _REGISTERED = found
    return _REGISTERED


def _forget() -> None:
    global _REGISTERED
    _REGISTERED = None
