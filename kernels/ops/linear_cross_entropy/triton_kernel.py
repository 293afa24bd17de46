"""The linear cross-entropy row step in Triton (imported only when the kernel first runs).

One program per row of a chunk's logits ``Z`` (``[rows, V]`` fp32/bf16/fp16, row stride ``stride_z``), fp32
math whatever the storage dtype, coefficients as in :mod:`.reference`:

- pass 1 reads the row once: a running max per block with a per-lane rescaled sum of ``exp`` (an online
  log-sum-exp: one ``exp`` per element, one cross-lane max per block), and, with label smoothing, the
  class-weighted sum of the logits (class-probability targets: the sums of ``q`` and ``q * z``);
- the row's loss goes to ``LOSS[row]`` (scaled for the reduction, the class weight and the smoothing);
- pass 2 (``WRITE_GRAD``) reads the row again and writes the gradient w.r.t. the logits to ``G``
  (``[rows, V]`` in the matmuls' dtype). ``G`` may be ``Z`` itself: every lane writes only the elements it
  has just read, so in place needs no barrier.

With ``SOFTCAP`` every logit is read as ``u = cap * tanh(z / cap)`` and pass 2 multiplies the gradient by
``1 - tanh(z / cap)**2`` (both from :func:`accel.kernels.dsl.triton_lang.tanh_parts`, within a few fp32 ulps for
any cap); with ``HAS_Z`` the row's z-loss coefficient ``ZC[row]`` adds ``zc * lse**2`` to the
loss and ``2 * zc * lse`` to the softmax's coefficient (:mod:`.reference` gives the formulas).

A class-index row whose coefficients are all zero (an ignored row) skips both passes: loss 0, gradient 0.
``lce_tile_stats`` / ``lce_tile_grad`` are the same two passes over one vocabulary tile of a row, for the
tiled schedule (:mod:`.tiled`): pass 1 folds the tile into the row's stats, pass 2 reads the row's
log-sum-exp.
Offsets are int64 (``rows * V`` exceeds 2**31 at vocabularies of 128k).

Two launches around the chunk loop replace eager chains of small ops (each a host dispatch the device
waits for when the host is the bottleneck): ``lce_coefs`` computes every row's coefficients
(:func:`.reference.coefficients` for class-index targets) in one program, and ``lce_scale`` multiplies
the gradients the forward precomputed by the loss's gradient read on the device, doing nothing for a
gradient of 1 (a plain ``loss.backward()``) without the host read that would stall it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from accel.kernels.dsl.triton_configs import next_power_of_2
from accel.kernels.dsl.triton_lang import tanh_parts

__all__ = ["COEF_BLOCK", "SCALE_BLOCK", "SCALE_PROGRAMS", "default_config", "lce_coefs", "lce_rows", "lce_scale",
           "lce_tile_grad", "lce_tile_stats"]

#: Rows per block of :func:`lce_coefs` (one program loops over all rows).
COEF_BLOCK = 1024
#: Elements per block, and most programs, of :func:`lce_scale` (a grid-stride loop).
SCALE_BLOCK = 4096
SCALE_PROGRAMS = 1024


@triton.jit
def _read(z_row, cols, ok, cap, SOFTCAP: tl.constexpr):
    """``(u, d)`` at ``cols``: the logits in fp32 after the softcap (``-inf`` outside the row) and the softcap's
    derivative ``1 - tanh(z / cap)**2`` (the logits themselves and 1 without a softcap)."""
    z = tl.load(z_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
    d = tl.full(z.shape, 1.0, tl.float32)
    if SOFTCAP:
        t, d = tanh_parts(tl.where(ok, z, 0.0) / cap)
        z = tl.where(ok, cap * t, float("-inf"))
    return z, d


@triton.jit
def _q_block(t_row, CW, cols, ok, smoothing, inv_v, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr):
    """Probability targets' ``q`` at ``cols`` (0 outside the row)."""
    q = tl.load(t_row + cols, mask=ok, other=0.0).to(tl.float32)
    if SMOOTH:
        q = tl.where(ok, q * (1.0 - smoothing) + smoothing * inv_v, 0.0)
    if HAS_CW:
        q = q * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
    return q


@triton.jit
def _row_stats(z_row, t_row, CW, V, smoothing, inv_v, cap, BLOCK_V: tl.constexpr, PROB: tl.constexpr,
               SMOOTH: tl.constexpr, HAS_CW: tl.constexpr, SOFTCAP: tl.constexpr):
    """Pass 1 over the ``V`` columns at ``z_row``: ``(max, sum exp(z - max), s, sq)`` (``s``: smoothing's
    class-weighted sum of the logits, or probability targets' sum of ``q * z``; ``sq``: the sum of ``q``)."""
    cols0 = tl.arange(0, BLOCK_V)
    # the running max starts below any real logit but finite: a block of -inf never forms -inf - -inf
    m = tl.max(tl.full([BLOCK_V], -3.0e38, tl.float32), axis=0)
    l_vec = tl.zeros([BLOCK_V], dtype=tl.float32)
    s_vec = tl.zeros([BLOCK_V], dtype=tl.float32)
    q_vec = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + cols0
        ok = cols < V
        z, _ = _read(z_row, cols, ok, cap, SOFTCAP)
        m_new = tl.maximum(m, tl.max(z, axis=0))
        l_vec = l_vec * tl.exp(m - m_new) + tl.exp(z - m_new)
        m = m_new
        if PROB:
            q = _q_block(t_row, CW, cols, ok, smoothing, inv_v, SMOOTH, HAS_CW)
            q_vec += q
            s_vec += q * tl.where(ok, z, 0.0)
        elif SMOOTH:
            zz = tl.where(ok, z, 0.0)
            if HAS_CW:
                zz = zz * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
            s_vec += zz
    return m, tl.sum(l_vec, axis=0), tl.sum(s_vec, axis=0), tl.sum(q_vec, axis=0)


@triton.jit
def _row_grad(z_row, g_row, t_row, CW, V, y, a, b, p_coef, lse, smoothing, inv_v, cap, BLOCK_V: tl.constexpr,
              PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr, SOFTCAP: tl.constexpr):
    """Pass 2: the gradient w.r.t. the ``V`` logits at ``z_row`` into ``g_row`` (``y``: the target's column
    here, anything outside ``[0, V)`` where the target is elsewhere)."""
    cols0 = tl.arange(0, BLOCK_V)
    for start in range(0, V, BLOCK_V):
        cols = start + cols0
        ok = cols < V
        z, dz = _read(z_row, cols, ok, cap, SOFTCAP)
        g = p_coef * tl.exp(z - lse)
        if PROB:
            g -= a * _q_block(t_row, CW, cols, ok, smoothing, inv_v, SMOOTH, HAS_CW)
        else:
            g -= tl.where(cols == y, a, 0.0)
            if SMOOTH:
                if HAS_CW:
                    g -= b * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
                else:
                    g -= b
        if SOFTCAP:
            g = g * dz
        tl.store(g_row + cols, g.to(g_row.dtype.element_ty), mask=ok)


@triton.jit
def _row_zero(g_row, V, BLOCK_V: tl.constexpr):
    cols0 = tl.arange(0, BLOCK_V)
    zero = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + cols0
        tl.store(g_row + cols, zero.to(g_row.dtype.element_ty), mask=cols < V)


@triton.jit
def _row_coefs(T, A, B, ZC, row, PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_Z: tl.constexpr):
    """``(a, b, zc, y, skip)`` of one row: a class-index row whose coefficients are all zero is skipped."""
    a = tl.load(A + row).to(tl.float32)
    b = 0.0
    zc = 0.0
    y = 0
    skip = False
    if HAS_Z:
        zc = tl.load(ZC + row).to(tl.float32)
    if not PROB:
        y = tl.load(T + row)
        skip = (a == 0.0) & (zc == 0.0)
        if SMOOTH:
            b = tl.load(B + row).to(tl.float32)
            skip = skip & (b == 0.0)
    return a, b, zc, y, skip


@triton.jit
def lce_rows(Z, G, T, A, B, BW, CW, ZC, LOSS, V, stride_z, stride_g, stride_t, smoothing, inv_v, cap,
             BLOCK_V: tl.constexpr, PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr,
             WRITE_GRAD: tl.constexpr, SOFTCAP: tl.constexpr, HAS_Z: tl.constexpr):
    """Loss (and gradient) of row ``program_id(0)``; see the module docstring for the passes."""
    row = tl.program_id(0).to(tl.int64)
    z_row = Z + row * stride_z
    g_row = G + row * stride_g
    t_row = T + row * stride_t
    a, b, zc, y, skip = _row_coefs(T, A, B, ZC, row, PROB, SMOOTH, HAS_Z)
    if skip:
        tl.store(LOSS + row, 0.0)
        if WRITE_GRAD:
            _row_zero(g_row, V, BLOCK_V)
    else:
        m, l_sum, s, sq = _row_stats(z_row, t_row, CW, V, smoothing, inv_v, cap, BLOCK_V, PROB, SMOOTH, HAS_CW,
                                     SOFTCAP)
        log_l = tl.log(l_sum)
        lse = m + log_l
        if PROB:
            loss = a * (sq * lse - s)
            p_coef = a * sq
        else:
            zy = tl.load(z_row + y).to(tl.float32)
            if SOFTCAP:
                zt, _ = tanh_parts(zy / cap)
                zy = cap * zt
            loss = a * ((m - zy) + log_l)  # both halves shifted by the max: no cancellation at large logits
            p_coef = a
            if SMOOTH:
                bw = tl.load(BW + row).to(tl.float32)
                loss += bw * lse - b * s
                p_coef = a + bw
        if HAS_Z:
            loss += zc * lse * lse
            p_coef += 2.0 * zc * lse
        tl.store(LOSS + row, loss)
        if WRITE_GRAD:
            _row_grad(z_row, g_row, t_row, CW, V, y, a, b, p_coef, lse, smoothing, inv_v, cap, BLOCK_V, PROB, SMOOTH,
                      HAS_CW, SOFTCAP)


@triton.jit
def lce_tile_stats(Z, T, A, B, CW, ZC, ST, n_st, V, col0, stride_z, stride_t, smoothing, inv_v, cap,
                   BLOCK_V: tl.constexpr, PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr,
                   SOFTCAP: tl.constexpr, HAS_Z: tl.constexpr):
    """Fold one vocabulary tile (``V`` columns from ``col0``; ``Z`` holds the tile) of row ``program_id(0)``
    into its stats (``ST``: ``[5, n_st]`` fp32, :data:`.reference.STATS`); skipped rows are left as they are."""
    row = tl.program_id(0).to(tl.int64)
    z_row = Z + row * stride_z
    a, b, zc, y, skip = _row_coefs(T, A, B, ZC, row, PROB, SMOOTH, HAS_Z)
    if not skip:
        m_t, l_t, s_t, q_t = _row_stats(z_row, T + row * stride_t + col0, CW + col0, V, smoothing, inv_v, cap,
                                        BLOCK_V, PROB, SMOOTH, HAS_CW, SOFTCAP)
        m_old = tl.load(ST + row)
        l_old = tl.load(ST + n_st + row)
        m = tl.maximum(m_old, m_t)
        tl.store(ST + row, m)
        tl.store(ST + n_st + row, l_old * tl.exp(m_old - m) + l_t * tl.exp(m_t - m))
        if PROB or SMOOTH:
            tl.store(ST + 3 * n_st + row, tl.load(ST + 3 * n_st + row) + s_t)
        if PROB:
            tl.store(ST + 4 * n_st + row, tl.load(ST + 4 * n_st + row) + q_t)
        else:
            local = y - col0
            inside = (local >= 0) & (local < V)
            zy = tl.load(z_row + local, mask=inside, other=0.0).to(tl.float32)
            if SOFTCAP:
                zt, _ = tanh_parts(zy / cap)
                zy = cap * zt
            tl.store(ST + 2 * n_st + row, zy, mask=inside)


@triton.jit
def lce_tile_grad(Z, G, T, A, B, CW, ZC, LSE, PC, V, col0, stride_z, stride_g, stride_t, smoothing, inv_v, cap,
                  BLOCK_V: tl.constexpr, PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr,
                  SOFTCAP: tl.constexpr, HAS_Z: tl.constexpr):
    """The gradient w.r.t. one vocabulary tile's logits of row ``program_id(0)`` into ``G`` (may be ``Z``), from
    the row's log-sum-exp ``LSE`` and softmax coefficient ``PC`` (:func:`.reference.finalize`)."""
    row = tl.program_id(0).to(tl.int64)
    g_row = G + row * stride_g
    a, b, zc, y, skip = _row_coefs(T, A, B, ZC, row, PROB, SMOOTH, HAS_Z)
    if skip:
        _row_zero(g_row, V, BLOCK_V)
    else:
        _row_grad(Z + row * stride_z, g_row, T + row * stride_t + col0, CW + col0, V, y - col0, a, b,
                  tl.load(PC + row).to(tl.float32), tl.load(LSE + row).to(tl.float32), smoothing, inv_v, cap,
                  BLOCK_V, PROB, SMOOTH, HAS_CW, SOFTCAP)


@triton.jit
def _target_weight(T, CW, offs, ok, C, ignore_index, HAS_CW: tl.constexpr):
    """``(t_hat, ignored, taken, w_y)`` of the rows at ``offs`` (:func:`.reference.coefficients`)."""
    t = tl.load(T + offs, mask=ok, other=ignore_index)
    ignored = t == ignore_index
    taken = (t >= 0) & (t < C) & (t != ignore_index)
    t_hat = tl.where(taken, t, 0)
    if HAS_CW:
        w_y = tl.where(ignored, 0.0, tl.load(CW + t_hat, mask=ok, other=0.0).to(tl.float32))
    else:
        w_y = tl.where(ignored, 0.0, 1.0)
    return t_hat, ignored, taken, w_y


@triton.jit
def lce_coefs(T, CW, CWS, GO, T_HAT, A, B, BW, EMPTY, N, C, ignore_index, keep, smooth_c, c_f,
              BLOCK: tl.constexpr, HAS_CW: tl.constexpr, MEAN: tl.constexpr, SMOOTH: tl.constexpr,
              HAS_GO: tl.constexpr):
    """The class-index coefficients of all ``N`` rows in one program (fp32; ``keep = 1 - label_smoothing``,
    ``smooth_c = label_smoothing / C``, ``c_f = float(C)``; ``CWS``: the class weights' sum, read with them). ``"mean"`` sums the
    kept rows' target weights first (``EMPTY``: whether that sum is 0); ``GO``: ``reduction="none"``'s
    ``grad_loss``, folded in."""
    offs0 = tl.arange(0, BLOCK)
    scale = 1.0
    if MEAN:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            offs = start + offs0
            ok = offs < N
            _, _, _, w_y = _target_weight(T, CW, offs, ok, C, ignore_index, HAS_CW)
            acc += tl.where(ok, w_y, 0.0)
        total = tl.sum(acc, axis=0)
        tl.store(EMPTY, total == 0.0)
        scale = 1.0 / total  # inf where every row is ignored: their a is 0 below, the loss NaN (EMPTY)
    for start in range(0, N, BLOCK):
        offs = start + offs0
        ok = offs < N
        t_hat, ignored, taken, w_y = _target_weight(T, CW, offs, ok, C, ignore_index, HAS_CW)
        a = tl.where(ignored, 0.0, w_y * (keep * scale))
        a = tl.where(taken | ignored, a, float("nan"))  # out of range and not ignored: NaN loss and gradient
        if HAS_GO:
            go = tl.load(GO + offs, mask=ok, other=0.0).to(tl.float32)
            a = a * go
        tl.store(T_HAT + offs, t_hat, mask=ok)
        tl.store(A + offs, a, mask=ok)
        if SMOOTH:
            b = tl.where(ignored, 0.0, smooth_c * scale)
            if HAS_CW:
                bw = b * tl.load(CWS).to(tl.float32)
            else:
                bw = b * c_f
            if HAS_GO:
                b = b * go
                bw = bw * go
            tl.store(B + offs, b, mask=ok)
            tl.store(BW + offs, bw, mask=ok)


@triton.jit
def lce_scale(X, S, numel, BLOCK: tl.constexpr):
    """``X *= S[0]`` in place (fp32 math, rounded to ``X``'s dtype), a grid-stride loop; nothing read or
    written where the scale is exactly 1."""
    s = tl.load(S).to(tl.float32)
    if s != 1.0:
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        offs0 = tl.arange(0, BLOCK)
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, numel, step):
            offs = start + offs0
            ok = offs < numel
            x = tl.load(X + offs, mask=ok).to(tl.float32)
            tl.store(X + offs, (x * s).to(X.dtype.element_ty), mask=ok)


def default_config(v: int) -> dict:
    """``{"block_v", "num_warps"}`` for rows of ``v`` classes when the tuning table has none: blocks of 4096
    elements up to 64k classes, 8192 above (16 per thread), looped over the row. On the H200 (bf16, chunk
    rows x classes): 512 x 32000 4.1 TB/s with 4096/8 warps where 8192/16 gave 3.5; 256 x 128256 3.0 TB/s,
    best of the 2048-32768 x 4-32 warps sweep."""
    block = min(next_power_of_2(max(v, 16)), 4096 if v <= 65536 else 8192)
    return {"block_v": block, "num_warps": 4 if block <= 1024 else 8 if block <= 4096 else 16}
