"""The one place that knows which running torch has which function.

Feature detection with ``hasattr`` on the running torch, never version-string
comparisons. Everything else in accel asks this module. Answers are computed
once, at first use, and never import a DSL runtime or initialise a device.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

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
    "graph_class",
    "graph_pool_functions",
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


def graph_class(device_type: str) -> tuple[str, type] | None:
    """The graph class the running torch offers for ``device_type``, as ``(qualified name, class)``.

    Order: ``torch.accelerator.Graph`` (torch 2.12+, any device type with a graph
    implementation), else the vendor class: ``torch.cuda.CUDAGraph`` for ``"cuda"``
    (CUDA and ROCm builds), ``torch.xpu.XPUGraph`` for ``"xpu"``. ``None`` when the
    running torch has none for that device type (``"mps"``, ``"cpu"``, old XPU builds).
    Reads attributes only; never initialises a device.
    """
    if device_type in ("cuda", "xpu") and has_accelerator_graph():
        return "torch.accelerator.Graph", torch.accelerator.Graph
    if device_type == "cuda" and hasattr(torch.cuda, "CUDAGraph"):
        return "torch.cuda.CUDAGraph", torch.cuda.CUDAGraph
    if device_type == "xpu" and has_xpu_graph():
        return "torch.xpu.XPUGraph", torch.xpu.XPUGraph
    return None


def graph_pool_functions(device_type: str) -> tuple[Any, Any, Any]:
    """``(graph_pool_handle, end_allocate_to_pool, release_pool)`` of ``device_type``'s allocator.

    ``graph_pool_handle()`` returns a fresh memory-pool id (``torch.cuda.graph_pool_handle``,
    ``torch.xpu.graph_pool_handle``). ``end_allocate_to_pool(device_index, pool)`` and
    ``release_pool(device_index, pool)`` are the allocator hooks (``torch._C._cuda_endAllocateToPool``,
    older ``torch._C._cuda_endAllocateCurrentStreamToPool``; ``torch._C._cuda_releasePool``; the
    ``_xpu_`` ones) used to close a capture that the driver aborted. Each is ``None`` where the
    running torch lacks it.
    """
    module = getattr(torch, device_type, None)
    handle = getattr(module, "graph_pool_handle", None)
    prefix = {"cuda": "_cuda", "xpu": "_xpu"}.get(device_type)
    if prefix is None:
        return handle, None, None
    end = getattr(torch._C, f"{prefix}_endAllocateToPool", None) or getattr(
        torch._C, f"{prefix}_endAllocateCurrentStreamToPool", None
    )
    release = getattr(torch._C, f"{prefix}_releasePool", None)
    return handle, end, release


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
