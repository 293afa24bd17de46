"""``@triton.jit`` helpers shared by the row-wise kernels (imported by the kernel modules only: it imports Triton).

Two launch choices every rows kernel (RMSNorm, softmax, LayerNorm forward; softmax
backward) takes as constexprs, so the tuner can measure them per shape:

- ``WIDE``: int64 element offsets. Needed only where ``rows * N`` can reach 2**31;
  int32 offsets elsewhere (fewer address instructions). :func:`accel.kernels.dsl.triton_configs.wide`
  decides it per launch.
- ``HINTS``: L2 eviction hints (``evict_first`` on data read once, ``evict_last`` on the
  weight every program rereads). Off unless a tuned config (``"hints": True``) says otherwise,
  because on the H200 the RMSNorm rows kernel was 1-5 % faster *without* them on every tuned
  shape (``accel bench --tune`` for rms_norm on the H200).

Split-row kernels (one row over ``SPLIT`` programs, each holding its ``PART`` of the row in
registers) exchange one pair of fp32 partial results per part through a zeroed int64
*slots* buffer: :func:`split_place` says which (row group, part) a program is, :func:`publish`
writes its pair, :func:`gather` waits for and reads the row's ``SPLIT`` pairs.
``STAGE`` selects how: ``0`` one launch whose programs wait for the other parts of their
row (GPU); ``1`` then ``2``, two launches (publish only; gather and finish), used where
programs run one after another and a wait would never end (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["row_ids", "row_offsets", "hinted_load", "load_rows", "row_run", "pack_pair", "unpack_pair", "split_place", "publish", "gather",
           "tanh_parts"]


@triton.jit
def tanh_parts(x):
    """``(tanh(x), 1 - tanh(x)**2)`` in fp32, each within a few ulps for every ``x`` (Triton has no portable
    ``tanh`` across CUDA, ROCm and the interpreter). ``s = 2 / (exp(2|x|) + 1)`` is ``1 - |tanh x|`` without
    cancellation, so ``1 - tanh**2 = s * (2 - s)`` stays exact where ``tanh`` saturates; below ``|x| = 1/8`` the
    odd Taylor series to ``x**7`` (its next term is under 2e-10 relative there) replaces ``1 - s``, whose
    rounding would dominate a small ``tanh``."""
    ax = tl.abs(x)
    s = 2.0 / (tl.exp(2.0 * ax) + 1.0)
    x2 = ax * ax
    series = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    small = ax < 0.125
    t_abs = tl.where(small, series, 1.0 - s)
    d = tl.where(small, 1.0 - t_abs * t_abs, s * (2.0 - s))
    return tl.where(x < 0, -t_abs, t_abs), d


@triton.jit
def row_ids(ROWS: tl.constexpr, WIDE: tl.constexpr):
    """The ``ROWS`` row indices of this program, ``program_id * ROWS + [0, ROWS)`` (int64 where ``WIDE``:
    with ``M >= 2**31`` rows the product itself overflows int32)."""
    if WIDE:
        return tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    else:
        return tl.program_id(0) * ROWS + tl.arange(0, ROWS)


@triton.jit
def row_offsets(rows, cols, N, WIDE: tl.constexpr):
    """``[ROWS, BLOCK_N]`` element offsets ``rows * N + cols`` (int64 where ``WIDE``)."""
    if WIDE:
        return rows[:, None].to(tl.int64) * N + cols[None, :]
    else:
        return rows[:, None] * N + cols[None, :]


@triton.jit
def hinted_load(ptr, mask, other, HINTS: tl.constexpr, POLICY: tl.constexpr):
    """``tl.load`` with L2 eviction policy ``POLICY`` where ``HINTS`` (``"evict_first"`` for data this
    kernel reads once, ``"evict_last"`` for data every program rereads, such as a weight), none otherwise."""
    if HINTS:
        return tl.load(ptr, mask=mask, other=other, eviction_policy=POLICY)
    else:
        return tl.load(ptr, mask=mask, other=other)


@triton.jit
def load_rows(X, M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HINTS: tl.constexpr, WIDE: tl.constexpr):
    """This program's ``ROWS`` rows of ``[M, N]`` ``X``, each whole (``BLOCK_N`` >= N), loaded once as fp32
    (masked elements 0): returns ``(rows, cols, row_ok, col_ok, mask, offs, x)`` for the kernel's epilogue."""
    rows = row_ids(ROWS, WIDE)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = row_offsets(rows, cols, N, WIDE)
    x = hinted_load(X + offs, mask, 0.0, HINTS, "evict_first").to(tl.float32)
    return rows, cols, row_ok, col_ok, mask, offs, x


@triton.jit
def row_run(M, N, rows_per_program, BLOCK_N: tl.constexpr):
    """This program's run of whole rows of ``[M, N]`` for the kernels that walk ``rows_per_program`` rows each
    (the grid of :func:`accel.kernels.dsl.launch.row_programs`): returns ``(pid, cols, col_ok, first, last)``,
    rows ``[first, last)``, ``first`` in int64 because ``M * N`` may exceed 2**31."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    first = pid.to(tl.int64) * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    return pid, cols, col_ok, first, last


@triton.jit
def pack_pair(a, b):
    """Two fp32 scalars as one int64 (``a``'s bits high, ``b``'s low) that is never 0, the slots' "not yet
    written" value: a ``b`` of +0.0 is written as -0.0 (equal as a number)."""
    hi = a.to(tl.int32, bitcast=True).to(tl.int64) << 32
    lo = b.to(tl.int32, bitcast=True)
    lo = tl.where(lo == 0, -2147483648, lo)
    return hi | lo.to(tl.uint32).to(tl.int64)


@triton.jit
def unpack_pair(v):
    """The two fp32 values :func:`pack_pair` packed into ``v`` (elementwise on an int64 tensor)."""
    a = (v >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    b = v.to(tl.int32).to(tl.float32, bitcast=True)
    return a, b


@triton.jit
def split_place(SPLIT: tl.constexpr):
    """``(group, part)`` of this program in a split-row launch of ``groups * SPLIT`` programs: the parts of a
    group have consecutive program ids.

    A part waits only for the other parts of its group. That never deadlocks while programs start in
    program-id order (CUDA starts a 1-D grid so): only the last group started can be incomplete,
    and every other resident program finishes. (Taking the place from an atomic ticket counter
    instead, which holds whatever the start order, was measured 5-20 % slower on the H200:
    the split-row probe in ``benchmarks/results/h200/README.md``.)
    """
    pid = tl.program_id(0)
    return (pid // SPLIT).to(tl.int64), pid % SPLIT


@triton.jit
def publish(SLOTS, row, part, a, b, SPLIT: tl.constexpr):
    """Write this part's pair ``(a, b)`` to its slot: one relaxed atomic exchange, visible GPU-wide (the slot
    is its own flag, so nothing else needs ordering, and the program need not wait for it to land)."""
    tl.atomic_xchg(SLOTS + row * SPLIT + part, pack_pair(a, b), sem="relaxed")


@triton.jit
def gather(SLOTS, row, SPLIT: tl.constexpr, STAGE: tl.constexpr):
    """The ``[SPLIT]`` pairs ``(a, b)`` of ``row``'s parts; where ``STAGE == 0`` it first waits until every
    part has published (volatile loads: each 8-byte slot is read whole, never a stale cached copy)."""
    idx = row * SPLIT + tl.arange(0, SPLIT)
    v = tl.load(SLOTS + idx, volatile=True)
    if STAGE == 0:
        while tl.sum((v == 0).to(tl.int32), axis=0) > 0:
            v = tl.load(SLOTS + idx, volatile=True)
    return unpack_pair(v)
