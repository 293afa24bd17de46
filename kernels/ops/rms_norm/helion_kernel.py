"""RMSNorm forward and backward in Helion (imported only when a kernel first runs).

Shapes: ``x``, ``dy`` ``[M, N]`` contiguous, ``weight`` ``[N]``, ``rstd`` ``[M, 1]`` fp32;
dtypes fp32/bf16/fp16 with fp32 math. Forward: ``rstd = 1/sqrt(mean(x^2) + eps)``,
``y = x * rstd * w``. Backward: ``dx = w*dy*rstd - x*rstd^3*mean(w*dy*x)``,
``dw = sum_rows(x*dy*rstd)`` (per-block partials summed at the end).

Helion's default config, no autotuning at run time (``autotune_effort="none"``):
measured on the H200 at 90-95 % of the copy ceiling for the forward
(DESIGN.md). ``N`` is specialized (one compile per row length), ``M`` is not
(``static_shapes=False``), so new batch sizes do not recompile. Written after
Helion's own ``examples/rms_norm.py``; works with helion 1.4 and 1.5.
"""

from __future__ import annotations

import helion
import helion.language as hl
import torch

__all__ = ["rms_norm_fwd", "rms_norm_bwd"]


@helion.kernel(autotune_effort="none", static_shapes=False)
def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y [M, N], rstd [M] fp32)`` for ``x [M, N]``, ``weight [N]``."""
    m = x.size(0)
    n = hl.specialize(x.size(1))
    out = torch.empty_like(x)
    rstd = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        x_tile = x[tile_m, :n].to(torch.float32)
        r = torch.rsqrt(torch.mean(x_tile * x_tile, dim=-1) + eps)
        out[tile_m, :n] = (x_tile * r[:, None] * weight[:n].to(torch.float32)).to(out.dtype)
        rstd[tile_m] = r
    return out, rstd


@helion.kernel(autotune_effort="none", static_shapes=False, ignore_warnings=[helion.exc.TensorOperationInWrapper])
def rms_norm_bwd(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                 rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx [M, N], dw [N])`` for ``dy, x [M, N]``, ``weight [N]``, ``rstd [M, 1]``."""
    m_block = hl.register_block_size(x.size(0))
    n = hl.specialize(weight.size(0))
    grad_x = torch.empty_like(x)
    partial = x.new_empty([(x.size(0) + m_block - 1) // m_block, n], dtype=torch.float32)
    for mb_cta in hl.tile(x.size(0), block_size=m_block):
        grad_w_m = weight.new_zeros(n, dtype=torch.float32)
        for mb in hl.tile(mb_cta.begin, mb_cta.end):
            x_m = x[mb, :].to(torch.float32)
            do_m = grad_out[mb, :].to(torch.float32)
            rstd_m = rstd[mb, :].to(torch.float32)
            grad_w_m += (x_m * do_m * rstd_m).sum(0)
            w_m = weight[None, :].to(torch.float32)
            grad_x[mb, :] = (w_m * do_m * rstd_m
                             - x_m * rstd_m * rstd_m * rstd_m * (w_m * do_m * x_m).mean(-1)[:, None]).to(x.dtype)
        partial[mb_cta.id, :] = grad_w_m
    return grad_x, partial.sum(0).to(weight.dtype)
