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
