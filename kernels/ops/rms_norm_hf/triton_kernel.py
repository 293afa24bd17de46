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
"""

from __future__ import annotations

import triton
import triton.language as tl
from accel.kernels.dsl.triton_configs import next_power_of_2, row_config, warps
from accel.kernels.dsl.triton_lang import load_rows, row_run

__all__ = ["MAX_BLOCK_N", "bwd_config", "default_config", "rms_norm_hf_bwd", "rms_norm_hf_fwd"]

#: Largest row kept whole in registers (elements).
MAX_BLOCK_N = 16384


@triton.jit
def rms_norm_hf_fwd(X, W, Y, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, HINTS: tl.constexpr,
                    WIDE: tl.constexpr, UNIT_OFFSET: tl.constexpr):
    """``ROWS`` rows of ``[M, N]`` per program, each whole in registers."""
    rows, cols, row_ok, col_ok, mask, offs, x = load_rows(X, M, N, BLOCK_N, ROWS, HINTS, WIDE)
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
def rms_norm_hf_bwd(DY, X, W, RSTD, DX, DW_PARTIAL, M, N, rows_per_program, BLOCK_N: tl.constexpr,
                    UNIT_OFFSET: tl.constexpr, WANT_DX: tl.constexpr, WANT_DW: tl.constexpr):
    """Rows ``[pid * rows_per_program, ...)`` of the backward; partial ``dw`` to ``DW_PARTIAL[pid]``."""
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
            tl.store(DX + base + cols, ((wdy - xhat * c) * rstd).to(DX.dtype.element_ty), mask=col_ok)
    if WANT_DW:
        tl.store(DW_PARTIAL + pid.to(tl.int64) * N + cols, dw, mask=col_ok)


def default_config(n: int) -> dict:
    """Forward launch config ``{"looped": False, "block_n", "rows", "num_warps"}`` for rows of ``n``."""
    return row_config(n, MAX_BLOCK_N)


def bwd_config(n: int) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for the backward with rows of ``n <= MAX_BLOCK_N`` elements."""
    block_n = next_power_of_2(n)
    return block_n, warps(block_n)
