"""RMSNorm forward and backward in Triton (imported only when a kernel first runs).

Shapes: ``x``, ``y``, ``dy``, ``dx`` are ``[M, N]`` row-major contiguous; ``w``
is ``[N]``; ``rstd`` is ``[M]`` fp32. dtypes fp32/bf16/fp16, fp32 accumulation.

Forward: ``rstd = 1/sqrt(sum(x^2)/N + eps)``, ``y = x * rstd * w``.

- ``N <= 16384`` (``BLOCK_N = next_pow2(N)``): the whole row lives in registers,
  one load and one store per element (copy-like traffic); for small rows
  (``BLOCK_N < 4096``) each program normalizes several rows, so programs stay
  large enough to hide latency.
- larger ``N``: one row per program in ``BLOCK_N`` chunks, two passes over the
  row (the second read mostly hits L2).

Backward: ``xhat = x*rstd``, ``dx = rstd * (w*dy - xhat * mean(xhat*w*dy))``,
``dw = sum_rows(dy*xhat)``. A fixed grid of ``G`` programs (a few per SM) each
walks a contiguous range of rows with the whole row in registers, keeps its
partial ``dw`` in fp32 registers, and writes it to ``[G, N]``; the partials are
summed by ``torch.sum`` (``G*N*4`` bytes, small next to ``3*M*N*esize``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from accel._caches import kept_cache
from accel.kernels.dsl.triton_lang import hinted_load, load_rows, row_run
from accel.kernels.dsl.triton_configs import next_power_of_2, row_candidates, row_config, unique_configs, warps

__all__ = ["rms_norm_fwd_rows", "rms_norm_fwd_looped", "rms_norm_bwd_rows", "fwd_config", "default_config",
           "candidate_configs", "bwd_config"]

#: Largest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def rms_norm_fwd_rows(X, W, Y, RSTD, M, N, eps,
                      BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HAS_W: tl.constexpr, HINTS: tl.constexpr,
                      WIDE: tl.constexpr):
    """``ROWS`` rows of ``[M, N]`` per program, each row whole in registers (``HINTS``, ``WIDE``:
    :mod:`accel.kernels.dsl.triton_lang`)."""
    rows, cols, row_ok, col_ok, mask, offs, x = load_rows(X, M, N, BLOCK_N, ROWS, HINTS, WIDE)
    # Rows up to 4096: the weight is loaded before the row sums (its latency overlaps the reduction, as in
    # Liger's kernel; the PTX otherwise issues it after the reduction's bar.sync). Longer rows load it after:
    # held through the reduction beside x it cost registers (H200: the same order in the LayerNorm forward
    # fell from 95 to 73 % of the ceiling on 16384x8192; RMSNorm 16384x8192 -1 %, 4096x4096 +3 %;
    # ``accel bench`` on the H200).
    if HAS_W and BLOCK_N <= 4096:
        w = hinted_load(W + cols, col_ok, 0.0, HINTS, "evict_last").to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None]
    if HAS_W:
        if BLOCK_N > 4096:
            w = hinted_load(W + cols, col_ok, 0.0, HINTS, "evict_last").to(tl.float32)
        y = y * w[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit
def rms_norm_fwd_looped(X, W, Y, RSTD, N, eps, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr):
    """One row per program for rows longer than :data:`MAX_BLOCK_N`: sum of squares, then normalize."""
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(X + base + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        x = tl.load(X + base + cols, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        y = x * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=ok)
    tl.store(RSTD + row, rstd)


@triton.jit
def rms_norm_bwd_rows(DY, X, W, RSTD, DX, DW_PARTIAL, M, N, rows_per_program,
                      BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, WANT_DX: tl.constexpr, WANT_DW: tl.constexpr):
    """Rows ``[pid*rows_per_program, ...)`` of the backward; partial ``dw`` to ``DW_PARTIAL[pid]``."""
    pid, cols, col_ok, first, last = row_run(M, N, rows_per_program, BLOCK_N)
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(first, last):
        base = row * N
        x = tl.load(X + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(DY + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = x * rstd
        if HAS_W:
            wdy = w * dy
        else:
            wdy = dy
        if WANT_DW:
            dw += dy * xhat
        if WANT_DX:
            c = tl.sum(xhat * wdy, axis=0) / N
            dx = (wdy - xhat * c) * rstd
            tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=col_ok)
    if WANT_DW:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * N + cols, dw, mask=col_ok)


@kept_cache("a pure function of the row length n")
def default_config(n: int) -> dict:
    """Forward launch config ``{"looped", "block_n", "rows", "num_warps"}`` for rows of ``n`` when the
    tuning table has none."""
    return row_config(n, MAX_BLOCK_N)


def fwd_config(n: int) -> tuple[int, int, int, bool]:
    """``(BLOCK_N, ROWS, num_warps, looped)`` of :func:`default_config` (diagnostic scripts)."""
    c = default_config(n)
    return c["block_n"], c["rows"], c["num_warps"], c["looped"]


def candidate_configs(n: int) -> list[dict]:
    """Forward configs ``accel bench --tune`` times (default first): rows in registers, 1-16 rows per
    program, 4/8/16 warps with 4-64 elements per thread, without and with L2 eviction hints
    (``hints``, default off: on the H200 every shape tuned was 1-5 % faster without them,
    ``accel bench --tune`` for rms_norm on the H200); chunked (looped) above
    :data:`MAX_BLOCK_N`."""
    block_n = next_power_of_2(n)
    out = [default_config(n)]
    if block_n <= MAX_BLOCK_N:
        rows = row_candidates(block_n, max_elements=32768, warp_choices=(4, 8, 16), per_thread=(4, 64))
        out += rows + [{**c, "hints": True} for c in rows]
    else:
        out += [{"looped": True, "block_n": chunk, "rows": 1, "num_warps": nw}
                for chunk in (2048, 4096, 8192) for nw in (4, 8, 16) if 4 <= chunk // (32 * nw) <= 64]
    return unique_configs(out)


def bwd_config(n: int) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for the backward with rows of ``n <= MAX_BLOCK_N`` elements."""
    block_n = next_power_of_2(n)
    return block_n, warps(block_n)
