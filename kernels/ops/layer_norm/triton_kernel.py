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
For long rows the tuner may pick ``parts`` (2 or 4): :func:`layer_norm_bwd_split` keeps
the partials of only the first ``1/parts`` of the columns, and :func:`layer_norm_bwd_cols`
sums the rest column-wise (one more read of those columns of ``x`` and ``dy``).
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from accel.kernels._triton_configs import next_power_of_2, row_candidates, row_config, unique_configs, warps

__all__ = ["MAX_BLOCK_N", "layer_norm_fwd_rows", "layer_norm_fwd_looped", "layer_norm_bwd_rows", "layer_norm_bwd_split", "layer_norm_bwd_cols", "default_config",
           "bwd_config", "candidate_configs"]

#: Longest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def layer_norm_fwd_rows(X, W, B, Y, MEAN, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                        HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """``ROWS`` rows per program, each whole in registers."""
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    y = xc * rstd[:, None]
    if HAS_W:
        y = y * tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)[None, :]
    if HAS_B:
        y = y + tl.load(B + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)[None, :]
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


@triton.jit
def layer_norm_bwd_split(DY, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, M, N, rows_per_program,
                         BLOCK_N: tl.constexpr, PARTS: tl.constexpr, HAS_W: tl.constexpr, WANT_DX: tl.constexpr,
                         WANT_DW: tl.constexpr, WANT_DB: tl.constexpr):
    """As :func:`layer_norm_bwd_rows`, but the ``dw``/``db`` partials of only the first
    ``BLOCK_N // PARTS`` columns stay in registers; :func:`layer_norm_bwd_cols` sums the rest.

    The row is a ``[PARTS, BLOCK_N // PARTS]`` tile (part ``p`` = columns
    ``[p*BLOCK_N/PARTS, (p+1)*BLOCK_N/PARTS)``); ``w`` is reloaded per row (an L1/L2 hit)
    rather than held. For a 16384-element row the whole-row partials (2 x 16384 fp32 per
    program) spill registers; a quarter of them does not, at the price of reading ``x`` and
    ``dy`` once more for the other columns.
    """
    pid = tl.program_id(0)
    PART: tl.constexpr = BLOCK_N // PARTS
    part = tl.arange(0, PARTS)[:, None]
    cols = part * PART + tl.arange(0, PART)[None, :]
    col_ok = cols < N
    kept = part == 0
    dw = tl.zeros([PART], dtype=tl.float32)
    db = tl.zeros([PART], dtype=tl.float32)
    first = pid.to(tl.int64) * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for row in range(first, last):
        base = row * N
        x = tl.load(X + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(DY + base + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        mean = tl.load(MEAN + row).to(tl.float32)
        rstd = tl.load(RSTD + row).to(tl.float32)
        xhat = tl.where(col_ok, (x - mean) * rstd, 0.0)
        if WANT_DW:
            dw += tl.sum(tl.where(kept, dy * xhat, 0.0), axis=0)
        if WANT_DB:
            db += tl.sum(tl.where(kept, dy, 0.0), axis=0)
        if WANT_DX:
            if HAS_W:
                g = dy * tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
            else:
                g = dy
            c1 = tl.sum(tl.sum(g * xhat, axis=1), axis=0) / N
            c2 = tl.sum(tl.sum(g, axis=1), axis=0) / N
            dx = (g - c2 - xhat * c1) * rstd
            tl.store(DX + base + cols, dx.to(DX.dtype.element_ty), mask=col_ok)
    own = tl.arange(0, PART)
    if WANT_DW:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * N + own, dw, mask=own < N)
    if WANT_DB:
        tl.store(DB_PARTIAL + pid.to(tl.int64) * N + own, db, mask=own < N)


@triton.jit
def layer_norm_bwd_cols(DY, X, MEAN, RSTD, DW_PARTIAL, DB_PARTIAL, M, N, col0, rows_per_program,
                        BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr):
    """Partial ``dw = sum(dy*xhat)``, ``db = sum(dy)`` over rows ``[pid*rows_per_program, ...)`` for
    columns ``col0 + [tile*BLOCK_C, (tile+1)*BLOCK_C)``, in ``[BLOCK_M, BLOCK_C]`` tiles; program
    ``(tile, pid)`` writes row ``pid`` of the ``[G, N]`` partial buffers (the columns
    :func:`layer_norm_bwd_split` left out)."""
    tile = tl.program_id(0)
    pid = tl.program_id(1)
    cols = col0 + tile * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < N
    dw = tl.zeros([BLOCK_C], dtype=tl.float32)
    db = tl.zeros([BLOCK_C], dtype=tl.float32)
    first = pid.to(tl.int64) * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for start in range(first, last, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < last
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows[:, None] * N + cols[None, :]
        dy = tl.load(DY + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if WANT_DW:
            x = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0).to(tl.float32)
            dw += tl.sum(dy * tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0), axis=0)
        if WANT_DB:
            db += tl.sum(dy, axis=0)
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
        for nw in (4, 8, 16, 32):
            for per_sm in (1, 2, 4, 8):
                if nw < 32 or block_n >= 8192:
                    out.append({"block_n": block_n, "num_warps": nw, "programs_per_sm": per_sm})
        if block_n >= 8192:  # split partials: a long row's dw/db partials spill registers
            for parts in (2, 4):
                for nw in (16, 32):
                    for per_sm in (1, 2):
                        for col_block, col_warps in ((128, 4), (256, 8)):
                            out.append({"block_n": block_n, "num_warps": nw, "programs_per_sm": per_sm,
                                        "parts": parts, "col_rows": 32, "col_block": col_block,
                                        "col_warps": col_warps})
    else:
        out = [default_config(n)]
        if block_n <= MAX_BLOCK_N:
            out += row_candidates(block_n, max_elements=32768, warp_choices=(4, 8, 16), per_thread=(4, 64))
    return unique_configs(out)
