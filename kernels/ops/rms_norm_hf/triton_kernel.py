"""Model-rounding RMSNorm forward and backward in Triton (imported only when a kernel first runs).

Shapes: ``x``, ``y``, ``dy``, ``dx`` are ``[M, N]`` row-major contiguous, ``N <= 16384`` (a whole row in
registers); ``w`` ``[N]`` of the input's dtype; ``rstd`` ``[M]`` fp32. dtypes fp32/bf16/fp16, fp32 math.

Forward: ``rstd = 1/sqrt(sum(x^2)/N + eps)``, ``xhat = x * rstd`` and

- ``UNIT_OFFSET=False`` (Llama): ``y = round(round(xhat) * w)``: ``xhat`` is rounded to the input's dtype
  first, as ``weight * hidden.to(input_dtype)`` rounds it (the product of two bf16 or fp16 values is exact
  in fp32, so ``y`` rounds as the eager ``mul`` does);
- ``UNIT_OFFSET=True`` (Gemma): ``y = round(xhat * (1 + w))``, one rounding.

Backward, ``w' = w`` or ``1 + w``: ``dx = rstd * (w'dy - xhat * mean(xhat * w'dy))``, ``dw = sum_rows(dy * h)``
with ``h`` the forward's rounded ``xhat`` (Llama) or ``xhat`` (Gemma). A fixed grid of a few programs per SM
walks contiguous row ranges, each keeping its ``dw`` partial in fp32 registers and writing it to ``[G, N]``;
``torch.sum`` adds the partials (as in :mod:`accel.kernels.ops.rms_norm.triton_kernel`).

The residual add of ``accel::add_rms_norm_hf`` (:mod:`accel.kernels.ops.add_rms_norm_hf`) runs in these two
kernels behind constexpr flags, off for ``accel::rms_norm_hf`` (its launches pass dummy pointers for the
flags' tensors, never read nor written):

- ``RESIDUAL`` (forward): ``s = round(x + r)``, added in fp32 and rounded to the input's dtype to nearest
  even (:func:`round_to`: torch's ``x + r``), stored to ``S``; the rounded ``s`` is then normalised as a
  loaded ``x`` is.
- ``ADD_GRAD`` (backward): ``dx = round(round(dx) + ds)``: the ``dx`` the plain kernel stores, added to
  ``DS`` in fp32 and rounded again (torch's ``dx + ds`` in the input's dtype, autograd's accumulation; fp32
  too: the multiply before the add is kept out of an FMA).

Bit for bit the same as the unfused ops with these kernels, on a GPU and in Triton's interpreter alike.
"""

from __future__ import annotations

import triton
import triton.language as tl
from accel.kernels.dsl.triton_configs import next_power_of_2, row_config, warps
from accel.kernels.dsl.triton_lang import hinted_load, load_rows, row_run

__all__ = ["MAX_BLOCK_N", "bwd_config", "default_config", "rms_norm_hf_bwd", "rms_norm_hf_fwd", "round_to"]

#: Largest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def round_to(x, DTYPE: tl.constexpr):
    """fp32 ``x`` rounded to ``DTYPE`` to nearest, ties to even: torch's rounding of an fp32 result (its
    bf16/fp16 ``add`` computes in fp32 and rounds so). bf16 in integer arithmetic (torch's
    ``round_to_nearest_even``; NaN as 0x7FC0), which Triton's interpreter runs as a GPU does (its fp32 -> bf16
    cast truncates); fp16 and fp32 by the cast, which rounds so everywhere."""
    if DTYPE == tl.bfloat16:
        u = x.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        u = tl.where(x != x, 0x7FC0, u)
        return u.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(DTYPE)


@triton.jit
def rms_norm_hf_fwd(X, W, Y, RSTD, R, S, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                    HINTS: tl.constexpr, WIDE: tl.constexpr, UNIT_OFFSET: tl.constexpr, RESIDUAL: tl.constexpr):
    """``ROWS`` rows of ``[M, N]`` per program, each whole in registers; with ``RESIDUAL`` the rows normalised
    are ``S = X + R`` (``R`` and ``S`` ``[M, N]`` like ``X``; unused otherwise)."""
    rows, cols, row_ok, col_ok, mask, offs, x = load_rows(X, M, N, BLOCK_N, ROWS, HINTS, WIDE)
    if RESIDUAL:
        r = hinted_load(R + offs, mask, 0.0, HINTS, "evict_first").to(tl.float32)
        s = round_to(x + r, X.dtype.element_ty)
        tl.store(S + offs, s, mask=mask)
        x = s.to(tl.float32)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    xhat = x * rstd[:, None]
    if UNIT_OFFSET:
        y = xhat * (1.0 + w[None, :])
    else:
        y = xhat.to(X.dtype.element_ty).to(tl.float32) * w[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit
def rms_norm_hf_bwd(DY, X, W, RSTD, DX, DW_PARTIAL, DS, M, N, rows_per_program, BLOCK_N: tl.constexpr,
                    UNIT_OFFSET: tl.constexpr, WANT_DX: tl.constexpr, WANT_DW: tl.constexpr, ADD_GRAD: tl.constexpr):
    """Rows ``[pid * rows_per_program, ...)`` of the backward; partial ``dw`` to ``DW_PARTIAL[pid]``; with
    ``ADD_GRAD`` (and ``WANT_DX``) ``DS`` (``[M, N]`` like ``X``; unused otherwise) is added to ``dx``."""
    pid, cols, col_ok, first, last = row_run(M, N, rows_per_program, BLOCK_N)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    if UNIT_OFFSET:
        w = w + 1.0
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(first, last):
        base = row * N
        x = tl.load(X + base + cols, mask=col_ok, other=0.0).to(tl.float32)
        dy = tl.load(DY + base + cols, mask=col_ok, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = x * rstd
        if WANT_DW:
            if UNIT_OFFSET:
                dw += dy * xhat
            else:
                dw += dy * xhat.to(X.dtype.element_ty).to(tl.float32)
        if WANT_DX:
            wdy = w * dy
            c = tl.sum(xhat * wdy, axis=0) / N
            dx = ((wdy - xhat * c) * rstd).to(DX.dtype.element_ty)
            if ADD_GRAD:
                ds = tl.load(DS + base + cols, mask=col_ok, other=0.0).to(tl.float32)
                # the select keeps an fp32 dx's last multiply out of the add: fused into one FMA (fp fusion
                # is on) the sum would be rounded once, not as the unfused dx and torch's add round it
                dx = round_to(tl.where(col_ok, dx.to(tl.float32), 0.0) + ds, DX.dtype.element_ty)
            tl.store(DX + base + cols, dx, mask=col_ok)
    if WANT_DW:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * N + cols, dw, mask=col_ok)


def default_config(n: int) -> dict:
    """Forward launch config ``{"looped": False, "block_n", "rows", "num_warps"}`` for rows of ``n``."""
    return row_config(n, MAX_BLOCK_N)


def bwd_config(n: int) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for the backward with rows of ``n <= MAX_BLOCK_N`` elements."""
    block_n = next_power_of_2(n)
    return block_n, warps(block_n)
