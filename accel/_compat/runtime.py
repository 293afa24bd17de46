"""Where the running torch keeps each runtime function: attribute look-ups, never a device initialised.

The per-vendor tables (which torch function answers which operation, fastest first) are the
backends' ``runtime_sources``; :mod:`accel.backends` registers each backend here when it loads,
and :func:`resolve` hands out the first function of the table that the running torch has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = [
    "RUNTIME_SOURCES",
    "accelerator_allocator_stats",
    "accelerator_has",
    "accelerator_set_stream",
    "address_reader",
    "backend_for_device_type",
    "device_module",
    "event_class",
    "first_present",
    "lookup",
    "register_backend",
    "resolve",
    "stream_class",
]

#: torch device type -> the ``runtime_sources`` of the backend serving it (``"cuda"``: NVIDIA and AMD,
#: whose ROCm builds of torch call AMD GPUs "cuda"). Filled by :func:`register_backend`.
RUNTIME_SOURCES: dict[str, Mapping[str, tuple[str, ...]]] = {}

#: torch device type -> the first registered backend class serving it (its hooks answer for the type).
_SERVING: dict[str, type] = {}


def register_backend(cls: type) -> None:
    """Record ``cls`` (an :class:`accel.backends.Backend` subclass) as serving its torch device type.

    The first class registered for a device type keeps it (``cuda`` before ``rocm``: both read
    ``torch.cuda`` through the same tables). Called by :mod:`accel.backends`, so this package
    needs no import of the backends.
    """
    device_type = cls.torch_device_type
    _SERVING.setdefault(device_type, cls)
    if cls.runtime_sources:
        RUNTIME_SOURCES.setdefault(device_type, cls.runtime_sources)


def backend_for_device_type(device_type: str) -> type | None:
    """The registered backend class serving torch device type ``device_type``, or ``None``."""
    return _SERVING.get(device_type)


def accelerator_has(name: str) -> bool:
    """Whether ``torch.accelerator.<name>`` exists in the running torch."""
    return hasattr(getattr(torch, "accelerator", None), name)


def device_module(device_type: str):
    """``torch.<device_type>`` (``torch.cuda`` also for ROCm, ``torch.xpu``, ``torch.mps``), or ``None``.

    Uses ``torch.get_device_module`` where the running torch has it.
    """
    if hasattr(torch, "get_device_module"):
        try:
            return torch.get_device_module(device_type)
        except RuntimeError:  # an unknown device type: torch raises instead of returning None
            return None
    return getattr(torch, device_type, None)


def lookup(path: str) -> Any:
    """The object at dotted ``path`` under ``torch`` (``"torch._C._cuda_getDevice"``), or ``None``."""
    obj: Any = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def first_present(paths: tuple[str, ...]) -> Any:
    """The object at the first of ``paths`` that the running torch has, unchanged; ``None`` if none."""
    for path in paths:
        found = lookup(path)
        if found is not None:
            return found
    return None


def resolve(device_type: str, op: str) -> Callable[..., Any] | None:
    """The torch callable for ``op`` on ``device_type`` in the running torch, or ``None``.

    Tries :data:`RUNTIME_SOURCES` ``[device_type][op]`` (the serving backend's
    ``runtime_sources``) in order and returns the first attribute the running torch has,
    unchanged (torch's own function, no wrapper). Attribute look-ups only: never imports
    a DSL, never initialises a device.

    Args:
        device_type: a torch device type (``"cuda"``, ``"xpu"``, ``"mps"``).
        op: an operation name of the backend's ``runtime_sources`` (``"current_device"``, ...).

    Returns:
        The callable, or ``None`` when neither the running torch nor the table has it.

    Example:
        >>> from accel import _compat
        >>> _compat.resolve("cpu", "synchronize") is None
        True
    """
    return first_present(RUNTIME_SOURCES.get(device_type, {}).get(op, ()))


def accelerator_set_stream() -> Callable[..., Any] | None:
    """The raw binding ``torch._C._accelerator_setStream``, or ``None``.

    It refuses a bad stream (not a stream, another device type, a device that is not visible)
    before it changes anything, so a caller handed exactly it can skip its own checks.
    """
    return getattr(torch._C, "_accelerator_setStream", None)


def accelerator_allocator_stats() -> tuple[Callable[[int], dict], Callable[[], bool]]:
    """``(device_stats, is_initialized)`` of the generic accelerator allocator bindings.

    ``torch._C._accelerator_getDeviceStats(index)`` has the raw, nested layout of
    ``torch._C._cuda_memoryStats``; the stand-in for device types without their own binding.
    """
    return torch._C._accelerator_getDeviceStats, torch._C._accelerator_isAllocatorInitialized


def stream_class() -> type:
    """The generic stream class: ``torch.Stream`` (present in every supported torch)."""
    return torch.Stream


def event_class() -> type:
    """The generic event class: ``torch.Event`` (present in every supported torch)."""
    return torch.Event


def address_reader(cls: type = torch.Tensor):
    """``cls.const_data_ptr`` where the Python binding has it (it reads a copy-on-write tensor's
    address without materialising a copy), else ``cls.data_ptr`` (the Python binding of torch 2.11, the GPU
    machine's torch, has no ``const_data_ptr``: ``hasattr(torch.Tensor, "const_data_ptr")`` is false there)."""
    return getattr(cls, "const_data_ptr", None) or cls.data_ptr

