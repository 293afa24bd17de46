"""Host-side helpers every DSL's impls share: lazy kernel imports, output buffers, device guard, program counts.

Imports no DSL. Launching is per DSL: :mod:`.triton_utils`, :mod:`.helion_utils`, :mod:`.cutedsl_utils`.
"""

from __future__ import annotations

import contextlib
import math

import torch

from accel._caches import detection_cache
from accel.backends import KernelLimits, backend_for_device
from accel.errors import UnknownBackendError

__all__ = ["arch", "device_guard", "empty", "empty_like", "kernel_limits", "lazy_module", "poison_outputs",
           "row_count", "row_programs", "rows_view", "shaped_like", "sm_count", "vector"]

#: Tests set this: every output buffer the impls allocate starts filled with NaN,
#: so an element a kernel forgets to write cannot pass as a right answer.
poison_outputs = False


def lazy_module(name: str):
    """A function returning module ``name``, imported at its first call (kernel modules import a DSL:
    importing them is deferred to the first launch; later calls are one global read, not an import statement)."""
    import importlib

    module = None

    def get():
        nonlocal module
        if module is None:
            module = importlib.import_module(name)
        return module

    return get


def empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty`` for kernel outputs (NaN-filled while :data:`poison_outputs` is set).

    ``shape`` is an int or a sequence of ints; sizes are passed positionally (a tuple argument
    plus keywords parses 0.5 µs slower per call, measured on the CPU host with torch 2.13).
    """
    t = torch.empty(shape, dtype=dtype, device=device) if type(shape) is int else \
        torch.empty(*shape, dtype=dtype, device=device)
    return t.fill_(float("nan")) if poison_outputs else t


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like`` for kernel outputs of a contiguous ``t`` (same shape, dtype, device, strides;
    NaN-filled while :data:`poison_outputs` is set). One C call: 0.8 µs vs 2.4 µs for ``torch.empty``
    with shape/dtype/device keywords (CPU host, torch 2.13)."""
    out = torch.empty_like(t)
    return out.fill_(float("nan")) if poison_outputs else out


def rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as ``[M, n]`` without copying (raises for non-viewable layouts; the cond rejects those).

    ``t`` itself when it already is ``[M, n]``: a view costs 1-3 µs on the H200's host, the
    check 0.2 (a cProfile by ``benchmarks/launch_cost.py --profile``).
    """
    return t if t.dim() == 2 and t.shape[1] == n else t.view(-1, n)


def vector(t: torch.Tensor, n: int) -> torch.Tensor:
    """A weight or bias as ``[n]`` (``t`` itself when it already is one-dimensional)."""
    return t if t.dim() == 1 else t.view(n)


def shaped_like(t: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``t`` (same number of elements as ``input``) in ``input``'s shape; ``t`` itself when it has it."""
    shape = input.shape
    return t if t.shape == shape else t.view(shape)


def row_count(normalized_shape) -> int:
    """``N = prod(normalized_shape)``."""
    return normalized_shape[0] if len(normalized_shape) == 1 else math.prod(normalized_shape)


_NO_GUARD = contextlib.nullcontext()


def device_guard(device: torch.device):
    """Make ``device`` current for a DSL launch when it is a non-current CUDA device (else a shared no-op)."""
    if device.type == "cuda" and device.index is not None and device.index != torch._C._cuda_getDevice():
        return torch.cuda.device(device)
    return _NO_GUARD


@detection_cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (compute units) of a CUDA/ROCm device; 4 elsewhere (interpreter runs)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4


def row_programs(m: int, device: torch.device, per_sm: int) -> tuple[int, int]:
    """``(programs, rows per program)`` for a kernel whose programs each walk a run of whole rows (a
    backward keeping one partial sum per program): at most ``per_sm`` programs per SM of ``device``
    (:func:`sm_count`) and no more than ``m`` rows, each program ``ceil(m / programs)`` rows, so that none
    is left without rows. ``(1, 1)`` for ``m == 0`` (one program, nothing to walk).

    Example:
        >>> import torch
        >>> row_programs(10, torch.device("cpu"), 2)   # 8 programs at most on 4 "SMs": 5 of 2 rows
        (5, 2)
    """
    if not m:
        return 1, 1
    programs = max(1, min(m, sm_count(device) * per_sm))
    per_program = -(-m // programs)
    return -(-m // per_program), per_program


@detection_cache
def arch(device: torch.device) -> str:
    """The tuning table's arch key of ``device``: ``sm_90`` (NVIDIA), ``gfx942`` / ``gfx1100`` (AMD),
    ``pvc`` / ``bmg`` / ``acm`` / ``lnl`` (Intel), else the device type (``cpu``, ``meta``, ``mps``).

    Asks the device's backend (:meth:`accel.backends.Backend.device_arch`: the same naming as
    ``accel.backend().arch()``), so every vendor keys its own tables. Cached per device;
    :func:`accel.clear_cache` forgets it (a detection cache of :mod:`accel._caches`), so a changed
    ``CUDA_VISIBLE_DEVICES`` or another faked vendor is seen by the kernels' conds.
    """
    try:
        backend = backend_for_device(device)
    except UnknownBackendError:  # meta and other device types no backend serves
        return device.type
    return backend.device_arch(device)


@detection_cache
def kernel_limits(device: torch.device) -> KernelLimits:
    """The :class:`~accel.backends.KernelLimits` of ``device`` (wave size, shared memory / LDS, fp8 flavour,
    config family), from its backend; the host's for device types no backend serves (``meta``). Cached
    per device (a detection cache)."""
    try:
        backend = backend_for_device(device)
    except UnknownBackendError:
        return KernelLimits(device.type, "host", 1, None, None, "no GPU: host execution")
    return backend.device_kernel_limits(device)
