"""Host-side helpers shared by every op's DSL impls: row view, device guard, program counts, output buffers."""

from __future__ import annotations

import contextlib
import functools
import math

import torch

__all__ = ["rows_view", "row_count", "device_guard", "sm_count", "empty", "empty_like", "poison_outputs"]

#: Tests set this: every output buffer the impls allocate starts filled with NaN,
#: so an element a kernel forgets to write cannot pass as a right answer.
poison_outputs = False


def empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty`` for kernel outputs (NaN-filled while :data:`poison_outputs` is set)."""
    t = torch.empty(shape, dtype=dtype, device=device)
    return t.fill_(float("nan")) if poison_outputs else t


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like`` for kernel outputs (NaN-filled while :data:`poison_outputs` is set)."""
    return empty(t.shape, t.dtype, t.device)


def rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as ``[M, n]`` without copying (raises for non-viewable layouts; the cond rejects those)."""
    return t.view(-1, n)


def row_count(normalized_shape) -> int:
    """``N = prod(normalized_shape)``."""
    return normalized_shape[0] if len(normalized_shape) == 1 else math.prod(normalized_shape)


def device_guard(device: torch.device):
    """Make ``device`` current for a DSL launch when it is a non-current CUDA device."""
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (compute units) of a CUDA/ROCm device; 4 elsewhere (interpreter runs)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4
