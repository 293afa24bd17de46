"""The one place that knows which running torch has which function.

Feature detection with ``hasattr`` on the running torch, never version-string
comparisons. Everything else in accel asks this module. Answers are computed
once, at first use, and never import a DSL runtime or initialise a device.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

__all__ = [
    "accelerator_has",
    "accelerator_random",
    "default_generator",
    "device_module",
    "has_accelerator_graph",
    "has_accelerator_random",
    "has_native_dsl_registry",
    "has_xpu_graph",
    "module_version",
]


def accelerator_has(name: str) -> bool:
    """Whether ``torch.accelerator.<name>`` exists in the running torch."""
    return hasattr(getattr(torch, "accelerator", None), name)


@functools.cache
def has_accelerator_random() -> bool:
    """``torch.accelerator.random`` (torch 2.14+)."""
    return accelerator_has("random")


def accelerator_random():
    """``torch.accelerator.random`` (2.14+; reads only: ``initial_seed``, ``get_rng_state(_all)``), or ``None``."""
    return torch.accelerator.random if has_accelerator_random() else None


@functools.cache
def has_accelerator_graph() -> bool:
    """``torch.accelerator.Graph`` (torch 2.12+)."""
    return accelerator_has("Graph")


@functools.cache
def has_xpu_graph() -> bool:
    """An XPU graph class (``torch.xpu.XPUGraph``) in the running torch."""
    return hasattr(getattr(torch, "xpu", None), "XPUGraph")


@functools.cache
def has_native_dsl_registry() -> bool:
    """``torch._native`` (the native DSL operator registry, torch 2.13+). Not imported here."""
    return importlib.util.find_spec("torch._native") is not None


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


def default_generator(device_type: str, index: int | None = None) -> torch.Generator:
    """The default ``torch.Generator`` of one device, found the way the running torch exposes it.

    ``cpu``: ``torch.default_generator``. Device modules with ``default_generators``
    (``torch.cuda`` incl. ROCm, ``torch.xpu``): ``init()`` then ``default_generators[index]``
    (``index=None``: the current device). ``torch.mps``: its single default generator.

    Raises:
        AttributeError: the device module exposes no default generator (the caller turns
            this into a typed accel error).

    .. note:: Initialises the device runtime (the generators exist only after it).
    """
    if device_type == "cpu":
        return torch.default_generator
    mod = device_module(device_type)
    if hasattr(mod, "default_generators"):
        if hasattr(mod, "init"):
            mod.init()
        idx = mod.current_device() if index is None else index
        return mod.default_generators[idx]
    if hasattr(mod, "_get_default_mps_generator"):  # torch.mps: one device, no public getter
        return mod._get_default_mps_generator()
    raise AttributeError(f"torch.{device_type} exposes no default generator")


def module_version(dist_or_module: str) -> str | None:
    """Installed version of a distribution (``"triton"``, ``"helion"``), or ``None``.

    Reads package metadata only: never imports the module (importing Triton or
    Helion is slow and may initialise a device).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist_or_module)
    except PackageNotFoundError:
        return None
