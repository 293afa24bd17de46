"""LayerNorm forward and backward in Triton (imported only when a kernel first runs).

Shapes: ``x``, ``y``, ``dy``, ``dx`` ``[M, N]`` row-major contiguous; ``w``, ``b``
``[N]`` (input dtype or fp32); ``mean``, ``rstd`` ``[M]``. fp32 math throughout.

Forward ``y = (x - mean) * rstd * w + b``: ``ROWS`` rows per program with each
row whole in registers for ``N <= MAX_BLOCK_N`` (one read, one write per
element); longer rows loop in ``BLOCK_N`` chunks over three passes (mean,
centred variance, write; the later reads mostly hit L2).

Backward (``N <= MAX_BLOCK_N``): a fixed grid of ``G`` programs (a few per SM),
each walking a contiguous range of rows with the row in registers:
``xhat = (x-mean)*rstd``, ``g = dy*w``, ``dx = rstd*(g - mean(g) - xhat*mean(g*xhat))``;
partial ``dw = sum(dy*xhat)`` and ``db = sum(dy)`` stay in fp32 registers and
go to ``[G, N]`` buffers summed by ``torch.sum`` (small next to ``3*M*N*esize``).

At N = 16384 those partials (2 x 16384 fp32 per program) spill registers: best 608 us
on the H200 for 8192x16384 bf16 against Helion's 408 and ATen's 511. Measured in
session 4 and removed (``benchmarks/results/h200/session4/tune-run{A,B}-layer_norm.json``):
32-warp programs (no better); two or four column slabs per row range, each program
rereading the rest of the row for the row sums (best 450.7 us: the rereads cost L2
bandwidth); partials kept for half or a quarter of the columns with a column-reduction
kernel for the rest (best 489.8 us).
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from accel.kernels._triton_lib import hinted_load, row_ids, row_offsets
from accel.kernels._triton_configs import next_power_of_2, row_candidates, row_config, unique_configs, warps

__all__ = ["MAX_BLOCK_N", "layer_norm_fwd_rows", "layer_norm_fwd_looped", "layer_norm_bwd_rows", "default_config",
           "bwd_config", "candidate_configs"]

#: Longest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def layer_norm_fwd_rows(X, W, B, Y, MEAN, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                        HAS_W: tl.constexpr, HAS_B: tl.constexpr, HINTS: tl.constexpr, WIDE: tl.constexpr):
    """``ROWS`` rows per program, each whole in registers (``HINTS``, ``WIDE``: :mod:`accel.kernels._triton_lib`)."""
    rows = row_ids(ROWS, WIDE)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = row_offsets(rows, cols, N, WIDE)
    x = hinted_load(X + offs, mask, 0.0, HINTS, "evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    y = xc * rstd[:, None]
    if HAS_W:
        y = y * hinted_load(W + cols, col_ok, 0.0, HINTS, "evict_last").to(tl.float32)[None, :]
    if HAS_B:
        y = y + hinted_load(B + cols, col_ok, 0.0, HINTS, "evict_last").to(tl.float32)[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean.to(MEAN.dtype.element_ty), mask=row_ok)
    tl.store(RSTD + rows, rstd.to(RSTD.dtype.element_ty), mask=row_ok)


@triton.jit
def layer_norm_fwd_looped(X, W, B, Y, MEAN, RSTD, N, eps, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr,
                          HAS_B: tl.constexpr):
    """One row per program for rows longer than :data:`MAX_BLOCK_N`: mean, centred variance, then write."""
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(X + base + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        xc = tl.where(ok, tl.load(X + base + cols, mask=ok, other=0.0).to(tl.float32) - mean, 0.0)
        acc += xc * xc
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        y = (tl.load(X + base + cols, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32) - mean) * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=ok)
    tl.store(MEAN + row, mean.to(MEAN.dtype.element_ty))
    tl.store(RSTD + row, rstd.to(RSTD.dtype.element_ty))


@triton.jit
def layer_norm_bwd_rows(DY, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, M, N, rows_per_program,
                        BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, WANT_DX: tl.constexpr, WANT_DW: tl.constexpr,
                        WANT_DB: tl.constexpr):
    """Rows ``[pid*rows_per_program, ...)`` of the backward; partial ``dw``/``db`` to ``[pid]`` of the buffers."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    first = pid.to(tl.int64) * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for row in range(first, last):
        base = row * N
        x = tl.load(X + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(DY + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        mean = tl.load(MEAN + row).to(tl.float32)
        rstd = tl.load(RSTD + row).to(tl.float32)
        xhat = tl.where(col_ok, (x - mean) * rstd, 0.0)
        if HAS_W:
            g = dy * w
        else:
            g = dy
        if WANT_DW:
            dw += dy * xhat
        if WANT_DB:
            db += dy
        if WANT_DX:
            c1 = tl.sum(g * xhat, axis=0) / N
            c2 = tl.sum(g, axis=0) / N
            dx = (g - c2 - xhat * c1) * rstd
            tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=col_ok)
    if WANT_DW:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * N + cols, dw, mask=col_ok)
    if WANT_DB:
        tl.store(DB_PARTIAL + pid.to(tl.int64) * N + cols, db, mask=col_ok)


@functools.cache
def default_config(n: int) -> dict:
    """Forward launch config ``{"looped", "block_n", "rows", "num_warps"}`` for rows of ``n``."""
    return row_config(n, MAX_BLOCK_N)


def bwd_config(n: int) -> dict:
    """Backward launch config ``{"block_n", "num_warps", "programs_per_sm"}`` for rows of ``n <= MAX_BLOCK_N``."""
    block_n = next_power_of_2(n)
    return {"block_n": block_n, "num_warps": warps(block_n), "programs_per_sm": 4 if block_n <= 4096 else 2}


def candidate_configs(n: int, direction: str = "fwd") -> list[dict]:
    """Configs ``accel bench --tune`` times (default first)."""
    block_n = next_power_of_2(n)
    if direction == "bwd":
        out = [bwd_config(n)]
        for nw in (4, 8, 16):
            for per_sm in (1, 2, 4, 8):
                out.append({"block_n": block_n, "num_warps": nw, "programs_per_sm": per_sm})
    else:
        out = [default_config(n)]
        if block_n <= MAX_BLOCK_N:
            rows = row_candidates(block_n, max_elements=32768, warp_choices=(4, 8, 16), per_thread=(4, 64))
            out += rows + [{**c, "hints": True} for c in rows]  # L2 hints: accel.kernels._triton_lib
    return unique_configs(out)
