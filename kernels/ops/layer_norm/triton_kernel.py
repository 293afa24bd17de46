"""LayerNorm forward and backward in Triton (imported only when a kernel first runs).

Shapes: ``x``, ``y``, ``dy``, ``dx`` ``[M, N]`` row-major contiguous; ``w``, ``b``
``[N]`` (input dtype or fp32); ``mean``, ``rstd`` ``[M]``. fp32 math throughout.

Forward ``y = (x - mean) * rstd * w + b``: ``ROWS`` rows per program with each
row whole in registers, ``N <= MAX_BLOCK_N`` (one read, one write per element).
Longer rows go to ATen: a looped kernel (three passes in chunks: mean, centred
variance, write, the later reads mostly from L2) ran at 0.87x ATen on 8192x32768
bf16 on the H200 and was removed (``accel bench`` on the H200).

Backward (``N <= MAX_BLOCK_N``): a fixed grid of ``G`` programs (a few per SM),
each walking a contiguous range of rows with the row in registers:
``xhat = (x-mean)*rstd``, ``g = dy*w``, ``dx = rstd*(g - mean(g) - xhat*mean(g*xhat))``;
partial ``dw = sum(dy*xhat)`` and ``db = sum(dy)`` stay in fp32 registers and
go to ``[G, N]`` buffers, summed and cast by :func:`partials_finish` (small next to ``3*M*N*esize``).

At N = 16384 those partials (2 x 16384 fp32 per program) spill registers: best 608 us
on the H200 for 8192x16384 bf16 against Helion's 408 and ATen's 511. Measured and removed
(``accel bench --tune`` for layer_norm on the H200):
32-warp programs (no better); two or four column slabs per row range, each program
rereading the rest of the row for the row sums (best 450.7 us: the rereads cost L2
bandwidth); partials kept for half or a quarter of the columns with a column-reduction
kernel for the rest (best 489.8 us).

Split backward (long rows, configs with ``"split"``): each row over ``SPLIT`` programs, each
holding a ``PART`` of the columns; a group of ``SPLIT`` programs walks a range of rows (the
next row's loads issued before this row's wait), the parts exchanging their two partial row
sums through the slots buffer (:mod:`accel.kernels.dsl.triton_lang`) before writing ``dx``, and
keeping ``dw``/``db`` partials for their own columns only (``PART`` fp32 each: no spill) in
``[groups, N]`` buffers. On the H200 (8192x16384 bf16): 266-272 us against the rows kernel's
608, Helion's 408 and ATen's 511-525 (split-row probe, ``benchmarks/results/h200/README.md``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from accel._caches import kept_cache
from accel.kernels.dsl.triton_lang import gather, hinted_load, load_rows, publish, row_run, split_place
from accel.kernels.dsl.triton_configs import (next_power_of_2, row_candidates, row_config, split_part,
                                           unique_configs, warps)

__all__ = ["MAX_BLOCK_N", "layer_norm_fwd_rows", "layer_norm_bwd_rows",
           "layer_norm_bwd_split", "default_config", "bwd_config", "candidate_configs", "split_bwd_candidates",
           "split_groups"]

#: Longest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def layer_norm_fwd_rows(X, W, B, Y, MEAN, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                        HAS_W: tl.constexpr, HAS_B: tl.constexpr, HINTS: tl.constexpr, WIDE: tl.constexpr):
    """``ROWS`` rows per program, each whole in registers (``HINTS``, ``WIDE``: :mod:`accel.kernels.dsl.triton_lang`)."""
    rows, cols, row_ok, col_ok, mask, offs, x = load_rows(X, M, N, BLOCK_N, ROWS, HINTS, WIDE)
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
def layer_norm_bwd_rows(DY, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, M, N, rows_per_program,
                        BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, WANT_DX: tl.constexpr, WANT_DW: tl.constexpr,
                        WANT_DB: tl.constexpr):
    """Rows ``[pid*rows_per_program, ...)`` of the backward; partial ``dw``/``db`` to ``[pid]`` of the buffers."""
    pid, cols, col_ok, first, last = row_run(M, N, rows_per_program, BLOCK_N)
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
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
def layer_norm_bwd_split(DY, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, SLOTS, M, N, rows_per_group,
                         PART: tl.constexpr, SPLIT: tl.constexpr, STAGE: tl.constexpr, HAS_W: tl.constexpr,
                         WANT_DX: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr):
    """Columns ``[part*PART, (part+1)*PART)`` of rows ``[group*rows_per_group, ...)``; the row sums
    ``sum(g*xhat)`` and ``sum(g)`` are the parts' published pairs summed; partial ``dw``/``db`` of this
    part's columns go to row ``group`` of the ``[groups, N]`` buffers. ``STAGE`` 1 publishes and writes
    the partials, 2 writes ``dx`` (:mod:`accel.kernels.dsl.triton_lang`)."""
    group, part = split_place(SPLIT)
    cols = part * PART + tl.arange(0, PART)
    col_ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([PART], dtype=tl.float32)
    db = tl.zeros([PART], dtype=tl.float32)
    first = group * rows_per_group
    last = tl.minimum(first + rows_per_group, M)
    # software pipelining: the next row's loads are issued before this row's wait (every group has a
    # row; the last row's "next" is itself again, an L2 hit)
    x_next = tl.load(X + first * N + cols, mask=col_ok, other=0.0)
    dy_next = tl.load(DY + first * N + cols, mask=col_ok, other=0.0)
    mean_next = tl.load(MEAN + first)
    rstd_next = tl.load(RSTD + first)
    for row in range(first, last):
        base = row * N
        x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
        mean, rstd = mean_next.to(tl.float32), rstd_next.to(tl.float32)
        ahead = tl.minimum(row + 1, last - 1)
        x_next = tl.load(X + ahead * N + cols, mask=col_ok, other=0.0)
        dy_next = tl.load(DY + ahead * N + cols, mask=col_ok, other=0.0)
        mean_next = tl.load(MEAN + ahead)
        rstd_next = tl.load(RSTD + ahead)
        xhat = tl.where(col_ok, (x - mean) * rstd, 0.0)
        if HAS_W:
            g = dy * w
        else:
            g = dy
        if STAGE != 2:
            if WANT_DW:
                dw += dy * xhat
            if WANT_DB:
                db += dy
        if WANT_DX:
            if STAGE != 2:
                publish(SLOTS, row, part, tl.sum(g * xhat, axis=0), tl.sum(g, axis=0), SPLIT)
            if STAGE != 1:
                a, b = gather(SLOTS, row, SPLIT, STAGE)
                c1 = tl.sum(a, axis=0) / N
                c2 = tl.sum(b, axis=0) / N
                tl.store(DX + base + cols, ((g - c2 - xhat * c1) * rstd).to(DX.dtype.element_ty), mask=col_ok)
    if STAGE != 2:
        if WANT_DW:
            tl.store(DW_PARTIAL + group * N + cols, dw, mask=col_ok)
        if WANT_DB:
            tl.store(DB_PARTIAL + group * N + cols, db, mask=col_ok)


#: Columns per program of :func:`partials_finish`, and partial rows summed per step.
FINISH_BLOCK_N, FINISH_BLOCK_G = 128, 32


@triton.jit
def partials_finish(P, OUT0, OUT1, G, N, STRIDE, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """``OUTk[:] = sum over g of P[k * STRIDE + g * N + :]`` for part ``k = program_id(1)`` (0 or 1; fp32 sums,
    stored in ``OUTk``'s dtype): the dw/db partials of the backward's ``G`` programs summed and cast in one
    launch, ``BLOCK_N`` columns per program (where ``torch.sum`` then ``.to`` took two per output)."""
    k = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    base = P + k.to(tl.int64) * STRIDE
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    for g0 in range(0, G, BLOCK_G):
        g = g0 + tl.arange(0, BLOCK_G)
        ok = (g[:, None] < G) & col_ok[None, :]
        acc += tl.load(base + g[:, None].to(tl.int64) * N + cols[None, :], mask=ok, other=0.0)
    total = tl.sum(acc, axis=0)
    if k == 0:
        tl.store(OUT0 + cols, total.to(OUT0.dtype.element_ty), mask=col_ok)
    else:
        tl.store(OUT1 + cols, total.to(OUT1.dtype.element_ty), mask=col_ok)


@kept_cache("a pure function of the row length n")
def default_config(n: int) -> dict:
    """Forward launch config ``{"looped", "block_n", "rows", "num_warps"}`` for rows of ``n``."""
    return row_config(n, MAX_BLOCK_N)


def bwd_config(n: int) -> dict:
    """Backward launch config ``{"block_n", "num_warps", "programs_per_sm"}`` for rows of ``n <= MAX_BLOCK_N``."""
    block_n = next_power_of_2(n)
    return {"block_n": block_n, "num_warps": warps(block_n), "programs_per_sm": 4 if block_n <= 4096 else 2}


def split_bwd_candidates(n: int) -> list[dict]:
    """Split backward configs for rows of ``n >= 8192``: 2, 4 or 8 parts of at least 1024 columns, 4 or 8
    warps with 4-32 elements per thread, 1, 2 or 4 programs per SM (so ``M / groups`` rows per group,
    ``[groups, N]`` fp32 partials for dw and db). Measured on the H200, 8192x16384 bf16
    (split-row probe, ``benchmarks/results/h200/README.md``): about one program per SM is
    best (groups of 128 rows at 2 parts: 269 us; 16 rows: 329 us; 256 rows, half the SMs idle: 460 us);
    16 warps were 1.7x slower."""
    out = []
    if n < 8192:
        return out
    for split in (2, 4, 8):
        part = split_part(n, split)
        if part is None or part < 1024:
            continue
        for nw in (4, 8):
            if 4 <= part // (32 * nw) <= 32:
                for per_sm in (1, 2, 4):
                    out.append({"split": split, "block_n": part, "num_warps": nw, "programs_per_sm": per_sm})
    return out


def split_groups(m: int, split: int, programs: int) -> tuple[int, int]:
    """``(groups, rows per group)`` for a split backward over ``m >= 1`` rows with about ``programs`` programs
    (``programs // split`` groups of ``split``, at least one, at most ``m``; every group has a row)."""
    groups = max(1, min(m, programs // split))
    rows = -(-m // groups)
    return -(-m // rows), rows


def candidate_configs(n: int, direction: str = "fwd") -> list[dict]:
    """Configs ``accel bench --tune`` times (default first); the backward's include the split kernel's
    (:func:`split_bwd_candidates`)."""
    block_n = next_power_of_2(n)
    if direction == "bwd":
        out = [bwd_config(n)]
        for nw in (4, 8, 16):
            for per_sm in (1, 2, 4, 8):
                out.append({"block_n": block_n, "num_warps": nw, "programs_per_sm": per_sm})
        out += split_bwd_candidates(n)
    else:
        out = [default_config(n)]
        if block_n <= MAX_BLOCK_N:
            rows = row_candidates(block_n, max_elements=32768, warp_choices=(4, 8, 16), per_thread=(4, 64))
            out += rows + [{**c, "hints": True} for c in rows]  # L2 hints: accel.kernels.dsl.triton_lang
    return unique_configs(out)
