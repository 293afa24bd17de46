"""Softmax over the last dim in Helion (imported only when a kernel first runs).

Shapes: ``x``/``y``/``dy``/``dx`` ``[M, N]`` contiguous; fp32/bf16/fp16, fp32 math.
Forward ``y = softmax(x, -1)``; backward ``dx = y * (dy - sum(dy*y))``. Each tile of
rows holds whole rows (``N`` specialized: one compile per row length; ``M`` is
not, so new batch sizes do not recompile). Configs are explicit
(:func:`accel.kernels.dsl.helion_utils.bind`): the tuning table's, else :data:`DEFAULT`
(one row per program, 8 warps).
"""

from __future__ import annotations

import helion.language as hl
import torch

__all__ = ["DEFAULT", "softmax_fwd", "softmax_bwd", "candidate_configs"]

#: Fixed default config (``helion.Config`` keyword arguments).
DEFAULT = {"block_sizes": [1], "num_warps": 8}


def softmax_fwd(x: torch.Tensor, out: torch.Tensor) -> None:
    """Write ``out [M, N] = softmax(x, -1)``."""
    m = x.size(0)
    hl.specialize(x.size(1))
    for tile_m in hl.tile(m):
        xt = x[tile_m, :].to(torch.float32)
        e = torch.exp(xt - torch.amax(xt, dim=-1, keepdim=True))
        out[tile_m, :] = (e / torch.sum(e, dim=-1, keepdim=True)).to(out.dtype)


def softmax_bwd(grad: torch.Tensor, y: torch.Tensor, dx: torch.Tensor) -> None:
    """Write ``dx [M, N] = y * (dy - sum(dy*y, -1))``."""
    m = y.size(0)
    hl.specialize(y.size(1))
    for tile_m in hl.tile(m):
        yt = y[tile_m, :].to(torch.float32)
        g = grad[tile_m, :].to(torch.float32)
        dx[tile_m, :] = (yt * (g - torch.sum(yt * g, dim=-1, keepdim=True))).to(dx.dtype)


def candidate_configs(n: int) -> list[dict]:
    """Configs ``accel bench --tune`` times (default first): rows per program x warps."""
    out = [dict(DEFAULT)]
    for rows in (1, 2, 4, 8):
        for warps in (4, 8, 16, 32):
            per_thread = rows * n // (32 * warps)
            if 4 <= per_thread <= 128 and {"block_sizes": [rows], "num_warps": warps} != DEFAULT:
                out.append({"block_sizes": [rows], "num_warps": warps})
    return out
