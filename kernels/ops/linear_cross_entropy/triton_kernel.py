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

A class-index row whose coefficients are all zero (an ignored row) skips both passes: loss 0, gradient 0.
Offsets are int64 (``rows * V`` exceeds 2**31 at vocabularies of 128k).
"""

from __future__ import annotations

import triton
import triton.language as tl

from accel.kernels.dsl.triton_configs import next_power_of_2

__all__ = ["default_config", "lce_rows"]

@triton.jit
def lce_rows(Z, G, T, A, B, BW, CW, LOSS, V, stride_z, stride_g, stride_t, smoothing, inv_v,
             BLOCK_V: tl.constexpr, PROB: tl.constexpr, SMOOTH: tl.constexpr, HAS_CW: tl.constexpr,
             WRITE_GRAD: tl.constexpr):
    """Loss (and gradient) of row ``program_id(0)``; see the module docstring for the passes."""
    row = tl.program_id(0).to(tl.int64)
    z_row = Z + row * stride_z
    g_row = G + row * stride_g
    cols0 = tl.arange(0, BLOCK_V)
    a = tl.load(A + row).to(tl.float32)
    if PROB:
        t_row = T + row * stride_t
        skip = False
    else:
        y = tl.load(T + row)
        if SMOOTH:
            b = tl.load(B + row).to(tl.float32)
            bw = tl.load(BW + row).to(tl.float32)
            skip = (a == 0.0) & (b == 0.0)
        else:
            skip = a == 0.0
    if skip:
        tl.store(LOSS + row, 0.0)
        if WRITE_GRAD:
            zero = tl.zeros([BLOCK_V], dtype=tl.float32)
            for start in range(0, V, BLOCK_V):
                cols = start + cols0
                tl.store(g_row + cols, zero.to(G.dtype.element_ty), mask=cols < V)
    else:
        # the running max starts below any real logit but finite: a block of -inf never forms -inf - -inf
        m = tl.max(tl.full([BLOCK_V], -3.0e38, tl.float32), axis=0)
        l_vec = tl.zeros([BLOCK_V], dtype=tl.float32)
        s_vec = tl.zeros([BLOCK_V], dtype=tl.float32)   # smoothing: sum w*z; probabilities: sum q*z
        q_vec = tl.zeros([BLOCK_V], dtype=tl.float32)   # probabilities: sum q
        for start in range(0, V, BLOCK_V):
            cols = start + cols0
            ok = cols < V
            z = tl.load(z_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(z, axis=0))
            l_vec = l_vec * tl.exp(m - m_new) + tl.exp(z - m_new)
            m = m_new
            if PROB:
                q = tl.load(t_row + cols, mask=ok, other=0.0).to(tl.float32)
                if SMOOTH:
                    q = tl.where(ok, q * (1.0 - smoothing) + smoothing * inv_v, 0.0)
                if HAS_CW:
                    q = q * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
                q_vec += q
                s_vec += q * tl.where(ok, z, 0.0)
            elif SMOOTH:
                zz = tl.where(ok, z, 0.0)
                if HAS_CW:
                    zz = zz * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
                s_vec += zz
        log_l = tl.log(tl.sum(l_vec, axis=0))
        lse = m + log_l
        if PROB:
            sq = tl.sum(q_vec, axis=0)
            loss = a * (sq * lse - tl.sum(s_vec, axis=0))
        else:
            zy = tl.load(z_row + y).to(tl.float32)
            loss = a * ((m - zy) + log_l)  # both halves shifted by the max: no cancellation at large logits
            if SMOOTH:
                loss += bw * lse - b * tl.sum(s_vec, axis=0)
        tl.store(LOSS + row, loss)
        if WRITE_GRAD:
            if PROB:
                coef = a * sq
            elif SMOOTH:
                coef = a + bw
            else:
                coef = a
            for start in range(0, V, BLOCK_V):
                cols = start + cols0
                ok = cols < V
                z = tl.load(z_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
                g = coef * tl.exp(z - lse)
                if PROB:
                    q = tl.load(t_row + cols, mask=ok, other=0.0).to(tl.float32)
                    if SMOOTH:
                        q = q * (1.0 - smoothing) + smoothing * inv_v
                    if HAS_CW:
                        q = q * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
                    g -= a * q
                else:
                    g -= tl.where(cols == y, a, 0.0)
                    if SMOOTH:
                        if HAS_CW:
                            g -= b * tl.load(CW + cols, mask=ok, other=0.0).to(tl.float32)
                        else:
                            g -= b
                tl.store(g_row + cols, g.to(G.dtype.element_ty), mask=ok)


def default_config(v: int) -> dict:
    """``{"block_v", "num_warps"}`` for rows of ``v`` classes when the tuning table has none: blocks of 4096
    elements up to 64k classes, 8192 above (16 per thread), looped over the row. On the H200 (bf16, chunk
    rows x classes): 512 x 32000 4.1 TB/s with 4096/8 warps where 8192/16 gave 3.5; 256 x 128256 3.0 TB/s,
    best of the 2048-32768 x 4-32 warps sweep."""
    block = min(next_power_of_2(max(v, 16)), 4096 if v <= 65536 else 8192)
    return {"block_v": block, "num_warps": 4 if block <= 1024 else 8 if block <= 4096 else 16}
