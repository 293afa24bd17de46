"""``@triton.jit`` helpers shared by the row-wise kernels (imported by the kernel modules only: it imports Triton).

Two launch choices every rows kernel (RMSNorm, softmax, LayerNorm forward; softmax
backward) takes as constexprs, so the tuner can measure them per shape:

- ``WIDE``: int64 element offsets. Needed only where ``rows * N`` can reach 2**31;
  int32 offsets elsewhere (fewer address instructions). :func:`accel.kernels._triton_configs.wide`
  decides it per launch.
- ``HINTS``: L2 eviction hints (``evict_first`` on data read once, ``evict_last`` on the
  weight every program rereads). Measured on the H200 (session 5 run C): the RMSNorm rows
  kernel was 1-5 % faster *without* them on every tuned shape, so they are off unless a
  tuned config (``"hints": True``) says otherwise.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["row_ids", "row_offsets", "hinted_load"]


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
