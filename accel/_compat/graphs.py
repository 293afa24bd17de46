"""Graph capture in the running torch: ``torch.accelerator.Graph`` and the allocator's graph-pool hooks."""

from __future__ import annotations

import sys
from typing import Any

import torch

from accel._caches import detection_cache

__all__ = [
    "accelerator_graph",
    "graph_class",
    "graph_pool_functions",
    "has_accelerator_graph",
    "has_xpu_graph",
    "pool_functions",
]


def _package():
    """The ``accel._compat`` package: calls between its functions go through it, so a function that a
    test replaces there is the one that answers."""
    return sys.modules[__package__]


@detection_cache
def has_accelerator_graph() -> bool:
    """``torch.accelerator.Graph`` (torch 2.12+)."""
    return _package().accelerator_has("Graph")


def accelerator_graph() -> type | None:
    """The class ``torch.accelerator.Graph`` where the running torch has it (2.12+), else ``None``."""
    return torch.accelerator.Graph if _package().has_accelerator_graph() else None


@detection_cache
def has_xpu_graph() -> bool:
    """An XPU graph class (``torch.xpu.XPUGraph``) in the running torch."""
    return hasattr(getattr(torch, "xpu", None), "XPUGraph")


def pool_functions(device_type: str, binding_prefix: str | None) -> tuple[Any, Any, Any]:
    """``(graph_pool_handle, end_allocate_to_pool, release_pool)`` of one device module's allocator.

    ``graph_pool_handle`` is ``torch.<device_type>.graph_pool_handle``; the allocator hooks are the
    ``torch._C`` bindings named with ``binding_prefix`` (``"_cuda"``: ``_cuda_endAllocateToPool``,
    before that ``_cuda_endAllocateCurrentStreamToPool``; ``_cuda_releasePool``). ``None`` where the
    running torch lacks one, and for both hooks when ``binding_prefix`` is ``None``.
    """
    handle = getattr(getattr(torch, device_type, None), "graph_pool_handle", None)
    if binding_prefix is None:
        return handle, None, None
    end = getattr(torch._C, f"{binding_prefix}_endAllocateToPool", None) or getattr(
        torch._C, f"{binding_prefix}_endAllocateCurrentStreamToPool", None
    )
    release = getattr(torch._C, f"{binding_prefix}_releasePool", None)
    return handle, end, release


def graph_class(device_type: str) -> tuple[str, type] | None:
    """The graph class the running torch offers for ``device_type``, as ``(qualified name, class)``:
    the serving backend's ``graph_class`` hook; ``None`` for a device type no backend serves."""
    cls = _package().backend_for_device_type(device_type)
    return None if cls is None else cls.graph_class()


def graph_pool_functions(device_type: str) -> tuple[Any, Any, Any]:
    """``(graph_pool_handle, end_allocate_to_pool, release_pool)`` of ``device_type``'s allocator.

    ``graph_pool_handle()`` returns a fresh memory-pool id (``torch.cuda.graph_pool_handle``,
    ``torch.xpu.graph_pool_handle``). ``end_allocate_to_pool(device_index, pool)`` and
    ``release_pool(device_index, pool)`` are the allocator hooks used to close a capture that the
    driver aborted. Each is ``None`` where the running torch lacks it. The serving backend's
    ``graph_pool_functions`` hook answers.
    """
    cls = _package().backend_for_device_type(device_type)
    if cls is None:
        return pool_functions(device_type, None)
    return cls.graph_pool_functions()
