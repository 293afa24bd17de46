"""LayerNorm forward and backward in Helion (imported only when a kernel first runs).

Shapes: ``x``, ``dy`` ``[M, N]`` contiguous; ``weight``, ``bias`` ``[N]``; ``mean``,
``rstd`` ``[M]``; fp32 math. Forward ``y = (x-mean)*rstd*w + b``; backward
``dx = rstd*(g - mean(g) - xhat*mean(g*xhat))`` with ``g = dy*w``, partial
``dw``/``db`` per block of rows summed at the end. ``N`` is specialized, ``M``
is not. Configs are explicit (:func:`accel.kernels.dsl.helion_utils.bind`): the tuning
table's, else :data:`DEFAULT_FWD` / :data:`DEFAULT_BWD`. Written after Helion's
``examples/layer_norm.py``; works with helion 1.4 and 1.5.
"""

from __future__ import annotations

import helion.language as hl
import torch

__all__ = ["DEFAULT_FWD", "DEFAULT_BWD", "layer_norm_fwd", "layer_norm_bwd", "candidate_configs"]

#: Fixed default configs (``helion.Config`` keyword arguments).
DEFAULT_FWD = {"block_sizes": [1], "num_warps": 8}
#: 64-row blocks per program walked one row at a time (the row stays in registers).
DEFAULT_BWD = {"block_sizes": [64, 1], "num_warps": 8}


def layer_norm_fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, out: torch.Tensor,
                   mean: torch.Tensor, rstd: torch.Tensor) -> None:
    """Write ``out [M, N]``, ``mean [M]``, ``rstd [M]``."""
    m = x.size(0)
    hl.specialize(x.size(1))
    for tile_m in hl.tile(m):
        xt = x[tile_m, :].to(torch.float32)
        mu = torch.mean(xt, dim=-1)
        xc = xt - mu[:, None]
        r = torch.rsqrt(torch.mean(xc * xc, dim=-1) + eps)
        out[tile_m, :] = (xc * r[:, None] * weight[:].to(torch.float32) + bias[:].to(torch.float32)).to(out.dtype)
        mean[tile_m] = mu.to(mean.dtype)
        rstd[tile_m] = r.to(rstd.dtype)


def layer_norm_bwd(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                   rstd: torch.Tensor, grad_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Write ``grad_x [M, N]``; return fp32 ``(dw [N], db [N])`` (per-block partials summed)."""
    m_block = hl.register_block_size(x.size(0))
    n = hl.specialize(weight.size(0))
    blocks = (x.size(0) + m_block - 1) // m_block
    partial_w = x.new_empty([blocks, n], dtype=torch.float32)
    partial_b = x.new_empty([blocks, n], dtype=torch.float32)
    for mb_cta in hl.tile(x.size(0), block_size=m_block):
        acc_w = weight.new_zeros(n, dtype=torch.float32)
        acc_b = weight.new_zeros(n, dtype=torch.float32)
        for mb in hl.tile(mb_cta.begin, mb_cta.end):
            xt = x[mb, :].to(torch.float32)
            dy = grad_out[mb, :].to(torch.float32)
            xhat = (xt - mean[mb].to(torch.float32)[:, None]) * rstd[mb].to(torch.float32)[:, None]
            g = dy * weight[None, :].to(torch.float32)
            acc_w += (dy * xhat).sum(0)
            acc_b += dy.sum(0)
            c1 = torch.mean(g * xhat, dim=-1, keepdim=True)
            c2 = torch.mean(g, dim=-1, keepdim=True)
            grad_x[mb, :] = ((g - c2 - xhat * c1) * rstd[mb].to(torch.float32)[:, None]).to(grad_x.dtype)
        partial_w[mb_cta.id, :] = acc_w
        partial_b[mb_cta.id, :] = acc_b
    return partial_w.sum(0), partial_b.sum(0)


def candidate_configs(n: int, direction: str = "fwd") -> list[dict]:
    """Configs ``accel bench --tune`` times (default first)."""
    if direction == "bwd":
        return [dict(DEFAULT_BWD)] + [{"block_sizes": [rows, 1], "num_warps": w}
                                      for rows in (32, 128) for w in (4, 8, 16)]
    out = [dict(DEFAULT_FWD)]
    for rows in (1, 2, 4):
        for warps in (4, 8, 16):
            if 4 <= rows * n // (32 * warps) <= 64 and {"block_sizes": [rows], "num_warps": warps} != DEFAULT_FWD:
                out.append({"block_sizes": [rows], "num_warps": warps})
    return out
