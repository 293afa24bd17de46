"""Softmax over the last dim in Triton (imported only when a kernel first runs).

Shapes: ``x``, ``y``, ``dy``, ``dx`` are ``[M, N]`` row-major contiguous; dtypes
fp32/bf16/fp16, fp32 math. Forward ``y = exp(x - max) / sum(exp(x - max))``;
backward ``dx = y * (dy - sum(dy * y))``.

- rows kernels (``N <= MAX_BLOCK_N``, ``BLOCK_N = next_pow2(N)``): ``ROWS`` rows
  per program, each whole in registers: one read and one write per element
  (copy-like traffic; the backward reads two tensors). Several rows per program
  for short rows keep programs large enough to hide memory latency.
- looped kernels (very long rows): one row per program in ``BLOCK_N`` chunks; the
  forward keeps an online (running max, rescaled sum) pair per lane, then a
  second pass writes ``y`` (the second read mostly hits L2).

Launch configs are dicts ``{"rows", "num_warps", "looped", "block_n"}``; the
defaults come from :func:`default_config`, tuned ones from the tuning table.
"""

from __future__ import annotations

import triton
import triton.language as tl

from accel._caches import kept_cache
from accel.kernels.dsl.triton_lang import hinted_load, row_ids, row_offsets
from accel.kernels.dsl.triton_configs import next_power_of_2, row_candidates, row_config, unique_configs

__all__ = ["MAX_BLOCK_N", "default_config", "softmax_fwd_rows", "softmax_fwd_looped", "softmax_bwd_rows",
           "softmax_bwd_looped", "candidate_configs"]

#: Longest row held whole in registers (elements): 32768 fp32 values over 16 warps = 64 per thread.
MAX_BLOCK_N = 32768
#: softmax reads/writes fewer streams per element than the norms: more elements per warp step.
SOFTMAX_WARP_STEPS = (4096, 16384)
_LOG2E = 1.4426950408889634


@triton.jit
def softmax_fwd_rows(X, Y, M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HINTS: tl.constexpr,
                     WIDE: tl.constexpr):
    """``ROWS`` rows of ``[M, N]`` per program, each whole in registers (``HINTS``, ``WIDE``:
    :mod:`accel.kernels.dsl.triton_lang`)."""
    rows = row_ids(ROWS, WIDE)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offs = row_offsets(rows, cols, N, WIDE)
    x = hinted_load(X + offs, mask, -float("inf"), HINTS, "evict_first").to(tl.float32)
    mx = tl.max(x, axis=1)
    e = tl.exp2((x - mx[:, None]) * 1.4426950408889634)
    y = e / tl.sum(e, axis=1)[:, None]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def softmax_fwd_looped(X, Y, N, BLOCK_N: tl.constexpr, HINTS: tl.constexpr):
    """One row per program in ``BLOCK_N`` chunks: online max/sum per lane, then a second pass writes ``y``.

    ``HINTS``: cache hints for the second read to hit L2 - the first pass loads with
    ``evict_last``, ``y`` is stored streaming (``.cs``: it is not read again here).
    """
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        if HINTS:
            x = tl.load(X + base + cols, mask=cols < N, other=-float("inf"), eviction_policy="evict_last")
        else:
            x = tl.load(X + base + cols, mask=cols < N, other=-float("inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, x)
        keep = m_new == -float("inf")
        scale = tl.where(keep, 0.0, tl.exp2((m - m_new) * 1.4426950408889634))
        add = tl.where(keep, 0.0, tl.exp2((x - m_new) * 1.4426950408889634))
        s = s * scale + add
        m = m_new
    mx = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp2((m - mx) * 1.4426950408889634)), axis=0)
    inv = 1.0 / total
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        x = tl.load(X + base + cols, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
        y = (tl.exp2((x - mx) * 1.4426950408889634) * inv).to(Y.dtype.element_ty)
        if HINTS:
            tl.store(Y + base + cols, y, mask=ok, cache_modifier=".cs")
        else:
            tl.store(Y + base + cols, y, mask=ok)


@triton.jit
def softmax_bwd_rows(DY, Y, DX, M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HINTS: tl.constexpr,
                     WIDE: tl.constexpr):
    """``dx = y * (dy - sum(dy*y))`` for ``ROWS`` rows per program, rows whole in registers."""
    rows = row_ids(ROWS, WIDE)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offs = row_offsets(rows, cols, N, WIDE)
    y = hinted_load(Y + offs, mask, 0.0, HINTS, "evict_first").to(tl.float32)
    dy = hinted_load(DY + offs, mask, 0.0, HINTS, "evict_first").to(tl.float32)
    dot = tl.sum(y * dy, axis=1)
    tl.store(DX + offs, (y * (dy - dot[:, None])).to(DX.dtype.element_ty), mask=mask)


@triton.jit
def softmax_bwd_looped(DY, Y, DX, N, BLOCK_N: tl.constexpr, HINTS: tl.constexpr):
    """The backward for very long rows: ``sum(dy*y)`` in one pass, ``dx`` in a second.

    ``HINTS``: first-pass loads ``evict_last`` (the second pass rereads them), ``dx`` stored streaming.
    """
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        if HINTS:
            y = tl.load(Y + base + cols, mask=ok, other=0.0, eviction_policy="evict_last")
            dy = tl.load(DY + base + cols, mask=ok, other=0.0, eviction_policy="evict_last")
        else:
            y = tl.load(Y + base + cols, mask=ok, other=0.0)
            dy = tl.load(DY + base + cols, mask=ok, other=0.0)
        acc += y.to(tl.float32) * dy.to(tl.float32)
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < N
        y = tl.load(Y + base + cols, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(DY + base + cols, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dx = (y * (dy - dot)).to(DX.dtype.element_ty)
        if HINTS:
            tl.store(DX + base + cols, dx, mask=ok, cache_modifier=".cs")
        else:
            tl.store(DX + base + cols, dx, mask=ok)


@kept_cache("a pure function of the row length n")
def default_config(n: int) -> dict:
    """The launch config for rows of ``n`` elements when the table has none: rows in registers up to 32768."""
    return row_config(n, MAX_BLOCK_N, SOFTMAX_WARP_STEPS)


def candidate_configs(n: int) -> list[dict]:
    """The configs ``accel bench --tune`` times for rows of ``n`` elements (default first).

    Rows in registers (1-16 rows per program, 4-32 warps, 4-128 elements per thread, without
    and with ``evict_first`` hints: :mod:`accel.kernels.dsl.triton_lang`);
    for rows of 8192+ also the looped kernels, with and without L2 cache hints (``hints``),
    and a few with software-pipelined chunk loads (``num_stages`` 2/3).

    Not candidates, each removed after it lost on the H200 (times: 8192x32768 bf16, vs the looped kernel):

    - an ``exp2(x*log2e - (max*log2e + log2(sum)))`` formulation: never the fastest, and it loses
      precision for large logits;
    - thread-block clusters (``num_ctas`` 2/4, one row over a cluster's CTAs as quack's CuTe softmax
      does): they do not compile, Triton 3.6's ``TritonGPUPlanCTAPass`` fails on the row reduction
      (``accel bench`` on the H200);
    - persistent grids (1-2 programs per SM, row in registers, next row's load before this row's
      reductions): forward best 299.2 us vs 293.4, no backward among the ten fastest
      (``accel bench --tune`` for softmax on the H200);
    - a row-wide running max in the looped forward (two exps per element instead of three): 311.8 us
      vs 291.6, so the special-function unit is not the limit
      (``accel bench --tune`` for softmax on the H200);
    - a split forward streaming the other parts of the row from L2 (2 or 4 programs a row): 529.4 us vs
      293.1 (``accel bench --tune`` for softmax on the H200);
    - split kernels whose 2-16 parts wait for each other through a zeroed slots buffer
      (:mod:`accel.kernels.dsl.triton_lang`; the exchange that wins for the LayerNorm backward): forward
      287.4 us vs 291.2-293.3, backward 393.3 vs 384.1-386.9, no gain worth a kernel
      (split-row probe, ``benchmarks/results/h200/README.md``; ``accel bench --tune`` for softmax).
    """
    block_n = next_power_of_2(n)
    out = [default_config(n)]
    if block_n <= MAX_BLOCK_N:
        rows = row_candidates(block_n, max_elements=65536, warp_choices=(4, 8, 16, 32), per_thread=(4, 128))
        out += rows + [{**c, "hints": True} for c in rows]
    if block_n >= 8192:
        for chunk in (2048, 4096, 8192, 16384):
            for warps in (4, 8, 16, 32):
                if 4 <= chunk // (32 * warps) <= 64:
                    for hints in (False, True):
                        out.append({"looped": True, "block_n": chunk, "rows": 1, "num_warps": warps, "hints": hints})
        for chunk, warps in ((4096, 8), (4096, 16), (8192, 16), (16384, 32)):  # software-pipelined chunk loads
            for stages in (2, 3):
                out.append({"looped": True, "block_n": chunk, "rows": 1, "num_warps": warps, "hints": True,
                            "num_stages": stages})
    return unique_configs(out)
