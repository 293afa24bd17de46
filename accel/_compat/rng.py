"""How the running torch exposes random-number generators: ``torch.accelerator.random`` and default generators."""

from __future__ import annotations

import sys

import torch

from accel._caches import detection_cache

__all__ = [
    "accelerator_random",
    "default_generator",
    "has_accelerator_random",
    "module_default_generator",
    "single_default_generator",
]


def _package():
    """The ``accel._compat`` package: calls between its functions go through it, so a function that a
    test or :mod:`accel.testing` replaces there is the one that answers."""
    return sys.modules[__package__]


@detection_cache
def has_accelerator_random() -> bool:
    """``torch.accelerator.random`` (torch 2.14+)."""
    return _package().accelerator_has("random")


def accelerator_random():
    """``torch.accelerator.random`` (2.14+; reads only: ``initial_seed``, ``get_rng_state(_all)``), or ``None``."""
    return torch.accelerator.random if _package().has_accelerator_random() else None


def module_default_generator(module, device_type: str, index: int | None = None) -> torch.Generator:
    """The default generator of device ``index`` of a device module with ``default_generators``
    (``torch.cuda`` incl. ROCm, ``torch.xpu``): ``init()`` then ``default_generators[index]``
    (``index=None``: the current device).

    Raises:
        AttributeError: the module exposes no ``default_generators``.

    .. note:: Initialises the device runtime (the generators exist only after it).
    """
    if not hasattr(module, "default_generators"):
        raise AttributeError(f"torch.{device_type} exposes no default generator")
    if hasattr(module, "init"):
        module.init()
    idx = module.current_device() if index is None else index
    return module.default_generators[idx]


def single_default_generator(module, device_type: str) -> torch.Generator:
    """The one default generator of a single-device module without a public getter
    (``torch.mps._get_default_mps_generator``).

    Raises:
        AttributeError: the running torch's module has no such getter.
    """
    getter = getattr(module, f"_get_default_{device_type}_generator", None)
    if getter is None:
        raise AttributeError(f"torch.{device_type} exposes no default generator")
    return getter()


def default_generator(device_type: str, index: int | None = None) -> torch.Generator:
    """The default ``torch.Generator`` of one device: the serving backend's ``default_generator`` hook.

    ``cpu``: ``torch.default_generator``; ``torch.cuda`` (incl. ROCm) and ``torch.xpu``:
    ``default_generators[index]`` (``index=None``: the current device); ``torch.mps``: its
    single default generator. A device type no backend serves is read as a device module
    with ``default_generators``.

    Raises:
        AttributeError: the device module exposes no default generator (the caller turns
            this into a typed accel error).

    .. note:: Initialises the device runtime (the generators exist only after it).
    """
    compat = _package()
    cls = compat.backend_for_device_type(device_type)
    if cls is not None:
        return cls.default_generator(index)
    return module_default_generator(compat.device_module(device_type), device_type, index)
