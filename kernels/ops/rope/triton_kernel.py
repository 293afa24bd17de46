"""RoPE (Hugging Face convention) forward and backward in Triton, q and k in one launch (imported only when
a kernel first runs).

Layout: ``q`` ``[B, Hq, S, D]`` and ``k`` ``[B, Hk, S, D]`` with any strides (unit on ``D``), passed as
strides per dim; ``cos``/``sin`` ``[B or 1, S, D]`` (unit on ``D``), each with its own batch and sequence strides
(batch stride 0 for one shared row set): either may be a strided view of a larger cache. One program per
token ``(b, s)``: it loads that token's ``cos``/``sin`` halves once (fp32) and rotates every head of ``q``
and of ``k``, ``BLOCK_H`` heads at a time, each head as its two halves ``x1 = x[:D/2]``, ``x2 = x[D/2:]``::

    forward:   y1 = x1 * c1 - x2 * s1        y2 = x2 * c2 + x1 * s2
    backward:  y1 = x1 * c1 + x2 * s2        y2 = x2 * c2 - x1 * s1   (the adjoint, x = the gradient)

fp32 math, one rounding per output element (Hugging Face's eager ops round the two products and the sum).
"""

from __future__ import annotations

import triton
import triton.language as tl
from accel.kernels.dsl.triton_configs import next_power_of_2

__all__ = ["default_config", "rope_rows"]


@triton.jit
def _rotate(X, Y, b, s, H, sb, sh, ss, ob, oh, o_s, c1, c2, s1, s2, d, d_ok, HALF,
            BLOCK_H: tl.constexpr, BACKWARD: tl.constexpr):
    """Rotate the ``H`` heads of token ``(b, s)`` of ``X`` into ``Y`` (strides ``sb, sh, ss`` / ``ob, oh, o_s``)."""
    for h0 in range(0, H, BLOCK_H):
        h = h0 + tl.arange(0, BLOCK_H)
        mask = (h < H)[:, None] & d_ok[None, :]
        src = X + b * sb + s * ss + h[:, None].to(tl.int64) * sh + d[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        if BACKWARD:
            y1 = x1 * c1[None, :] + x2 * s2[None, :]
            y2 = x2 * c2[None, :] - x1 * s1[None, :]
        else:
            y1 = x1 * c1[None, :] - x2 * s1[None, :]
            y2 = x2 * c2[None, :] + x1 * s2[None, :]
        dst = Y + b * ob + s * o_s + h[:, None].to(tl.int64) * oh + d[None, :]
        tl.store(dst, y1.to(Y.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, y2.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rope_rows(Q, K, COS, SIN, QO, KO, S, HQ, HK, HALF,
              q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, qo_sb, qo_sh, qo_ss, ko_sb, ko_sh, ko_ss, c_sb, c_ss, s_sb, s_ss,
              BLOCK_D: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BACKWARD: tl.constexpr):
    """One token ``(b, s) = divmod(program_id, S)``: ``QO``/``KO`` from ``Q``/``K`` (``HALF = D / 2``)."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // S
    s = pid % S
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HALF
    c_row = b * c_sb + s * c_ss
    s_row = b * s_sb + s * s_ss
    c1 = tl.load(COS + c_row + d, mask=d_ok, other=0.0).to(tl.float32)
    c2 = tl.load(COS + c_row + HALF + d, mask=d_ok, other=0.0).to(tl.float32)
    s1 = tl.load(SIN + s_row + d, mask=d_ok, other=0.0).to(tl.float32)
    s2 = tl.load(SIN + s_row + HALF + d, mask=d_ok, other=0.0).to(tl.float32)
    _rotate(Q, QO, b, s, HQ, q_sb, q_sh, q_ss, qo_sb, qo_sh, qo_ss, c1, c2, s1, s2, d, d_ok, HALF, BLOCK_HQ, BACKWARD)
    _rotate(K, KO, b, s, HK, k_sb, k_sh, k_ss, ko_sb, ko_sh, ko_ss, c1, c2, s1, s2, d, d_ok, HALF, BLOCK_HK, BACKWARD)


def default_config(hq: int, hk: int, half: int) -> dict:
    """``{"block_d", "block_hq", "block_hk", "num_warps"}``: the whole half row, and as many heads per step
    as keep a step at 2048 elements per half (every head of a 16-head, 128-wide model in one step)."""
    block_d = next_power_of_2(half)
    per_step = max(1, 2048 // block_d)
    block_hq = min(next_power_of_2(hq), per_step)
    block_hk = min(next_power_of_2(hk), per_step)
    return {"block_d": block_d, "block_hq": block_hq, "block_hk": block_hk,
            "num_warps": 4 if block_d * max(block_hq, block_hk) <= 1024 else 8}
