"""Probing: which backends are usable, read without initialising any runtime.

Results are cached per process; :func:`clear_cache` forgets them (call it after
changing ``CUDA_VISIBLE_DEVICES`` and the like, or in tests). Fork-safe: the
probes never run torch's lazy CUDA/HIP/XPU initialisation, so a process that forks
DataLoader or gunicorn workers afterwards can still use the device in the children.
"""

from __future__ import annotations

import os

import torch

from accel import _caches
from accel.backends import Backend, ProbeResult, registered

__all__ = ["probes", "clear_cache", "torch_build"]

_PROBES: dict[str, ProbeResult] | None = None
_PROBE_PID: int | None = None


def probes() -> dict[str, ProbeResult]:
    """Every registered backend's :class:`~accel.backends.ProbeResult`, by name, in selection order.

    Cached; a forked child re-probes (device visibility may differ there).
    """
    global _PROBES, _PROBE_PID
    if _PROBES is None or _PROBE_PID != os.getpid():
        backends = sorted(registered().values(), key=lambda b: -b.priority)
        _PROBES = {b.name: b.probe() for b in backends}
        _PROBE_PID = os.getpid()
    return _PROBES


def backend_class(name: str) -> type[Backend]:
    """The registered backend class called ``name`` (caller validates the name)."""
    return registered()[name]


def torch_build() -> dict[str, str | None]:
    """What the running torch was built for: ``{"torch", "cuda", "hip", "xpu"}`` version strings or ``None``."""
    v = torch.version
    return {
        "torch": torch.__version__,
        "cuda": getattr(v, "cuda", None),
        "hip": getattr(v, "hip", None),
        "xpu": getattr(v, "xpu", None),
    }


def on_clear(hook) -> None:
    """Register a callable run by :func:`clear_cache` (other modules' caches; see :mod:`accel._caches`)."""
    _caches.on_clear(hook)


def clear_cache() -> None:
    """Forget every cached detection result: probes, selection, entry-point backends, the resolved
    runtime functions, and every detection cache of :mod:`accel._caches` (the kernels' per-device
    arch and SM count, the tuning tables, what the running torch has).

    Side effects: the next :func:`accel.device` re-probes. Never touches a device.
    """
    global _PROBES, _PROBE_PID
    from accel import backends

    _PROBES = None
    _PROBE_PID = None
    backends.forget()
    _caches.clear_detection_caches()
