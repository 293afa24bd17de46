"""The vocabulary-tiled schedule of the linear cross-entropy: every matmul with a large inner dimension.

The row-chunked loop of :mod:`.reference` multiplies ``grad_W += g.T @ x[chunk]`` with the chunk's rows as
the inner dimension: at a memory budget like Liger-Kernel's (256 rows at a vocabulary of 128k) that matmul
reads and writes all of ``grad_W`` per chunk and is bound by memory, not compute. This schedule takes a
block of ``R`` rows (thousands) and walks the vocabulary in tiles of ``Vt`` classes, twice:

1. per tile, ``logits = x_b @ W_t.T`` and :func:`.reference.tile_stats` (an online log-sum-exp); then
   :func:`.reference.finalize` gives each row's loss and log-sum-exp;
2. per tile, the same logits again, :func:`.reference.tile_grad` in place, then
   ``grad_input_b += g @ W_t`` (accumulated in fp32 over the tiles, rounded once) and
   ``grad_W[t] (+)= g.T @ x_b`` (inner dimension ``R``; accumulated over the row blocks).

Four matmuls instead of three (the logits are computed twice), each compute-bound. The buffers are one
``[R, Vt]`` logits tile and one fp32 ``[R, D]`` accumulator, sized by :func:`tile_shape` to fit the memory
the row-chunked loop would use at ``batch_chunk_size`` rows. Precision as :mod:`.reference`: ``"compact"``
accumulates ``grad_W`` in the input dtype (once per row block), ``"accurate"`` in an fp32 ``[C, D]`` scratch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from accel.kernels.dsl.launch import empty

from . import reference
from .reference import Coefficients, fp32_result_mm, loss_dtype, mm_into, slice_rows

__all__ = ["EAGER", "MIN_TILE_COLS", "MIN_TILE_ROWS", "TILE_ROWS", "TileSteps", "tile_shape", "tiled"]

#: Most rows in a block (the grad_W matmul's inner dimension; more rows, fewer grad_W roundings).
TILE_ROWS = 4096
#: Fewest rows a block may have for the schedule to be worth its fourth matmul (below, row chunks).
MIN_TILE_ROWS = 1024
#: Fewest classes a tile may have (a narrower tile makes every matmul a thin one).
MIN_TILE_COLS = 512


class TileSteps(NamedTuple):
    """The two per-tile steps the schedule runs: :func:`.reference.tile_stats` and
    :func:`.reference.tile_grad` (eager, :data:`EAGER`), or their Triton launches."""

    stats: Callable[[torch.Tensor, torch.Tensor, Coefficients, int], None]
    grad: Callable[[torch.Tensor, torch.Tensor, Coefficients, torch.Tensor, torch.Tensor, int], None]


EAGER = TileSteps(reference.tile_stats, reference.tile_grad)


def tile_shape(n: int, d: int, c: int, batch_chunk_size: int, logit_bytes: int, acc_bytes: int
               ) -> tuple[int, int] | None:
    """``(rows per block, classes per tile)`` within the memory of the row-chunked loop's logits buffer
    (``min(n, batch_chunk_size) * c * logit_bytes``), or ``None`` where no block of at least
    :data:`MIN_TILE_ROWS` rows (fewer only where ``n`` is) and tile of :data:`MIN_TILE_COLS` classes fits.

    ``acc_bytes``: bytes per element of the ``[rows, d]`` grad_input accumulator (0 where none is kept).
    Rows are halved from :data:`TILE_ROWS` until the accumulator takes at most 3/4 of the budget (rows are the
    grad_W matmul's inner dimension); the tile gets the rest, a multiple of 128 classes.

    >>> tile_shape(8192, 2048, 128256, 256, 2, 4)    # torch's and Liger's 256-row chunks at vocabulary 128256
    (4096, 3840)
    >>> tile_shape(8192, 2048, 32000, 512, 2, 4)
    (2048, 3840)
    >>> tile_shape(8192, 4096, 32000, 64, 2, 4) is None   # too little memory for a block: row chunks
    True
    """
    budget = min(n, batch_chunk_size) * c * logit_bytes
    rows = min(n, TILE_ROWS)
    while rows > MIN_TILE_ROWS and rows * d * acc_bytes > budget * 3 // 4:
        rows //= 2
    cols = (budget - rows * d * acc_bytes) // (rows * logit_bytes) // 128 * 128
    cols = min(cols, c)
    if rows < min(n, MIN_TILE_ROWS) or cols < min(c, MIN_TILE_COLS):
        return None
    return rows, cols


def tiled(input: torch.Tensor, linear_weight: torch.Tensor, coef: Coefficients, linear_bias: torch.Tensor | None,
          tile: tuple[int, int], acc_policy: str, acc_dtype: torch.dtype, compute_input_grad: bool,
          compute_linear_weight_grad: bool, compute_linear_bias_grad: bool, steps: TileSteps = EAGER,
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tiled schedule: ``(per-row losses [N], grad_input, grad_linear_weight, grad_linear_bias)``, as
    :func:`.reference.chunked` returns them; ``tile`` from :func:`tile_shape`; ``steps`` the per-tile steps."""
    n, d = input.shape
    c = linear_weight.shape[0]
    dtype, device = input.dtype, input.device
    mdt = loss_dtype(dtype)
    want_grad = compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad
    wide = acc_policy == "accurate" and acc_dtype != dtype
    fp32_out = fp32_result_mm(device.type)  # low-precision operands, fp32 results (cuBLAS / hipBLASLt)
    upcast = wide and not fp32_out
    w_mm = linear_weight.to(acc_dtype) if upcast else linear_weight
    rows_max, cols_max = tile
    logits_flat = empty(rows_max * cols_max, acc_dtype if wide else dtype, device)
    grad_flat = empty(rows_max * cols_max, dtype, device) if (want_grad and wide and fp32_out) else logits_flat
    bias = None if linear_bias is None else linear_bias.to(logits_flat.dtype)
    losses = empty(n, mdt, device)
    grad_input = empty(tuple(input.shape) if compute_input_grad else (0, 0), dtype, device)
    # grad_input sums over the tiles: in the math dtype, rounded once (the unfused path's one rounding)
    acc_x = empty((rows_max, d), mdt, device) if compute_input_grad and mdt != dtype else None
    gw_dtype = acc_dtype if wide else dtype
    grad_w = empty(tuple(linear_weight.shape) if compute_linear_weight_grad else (0, 0), gw_dtype, device)
    grad_b = torch.zeros(c if compute_linear_bias_grad else 0, dtype=mdt, device=device)

    def logits_of(x_mm, rows, c0, cols):
        out = logits_flat.narrow(0, 0, rows * cols).view(rows, cols)
        wt = w_mm.narrow(0, c0, cols).t()
        if wide and fp32_out:
            if bias is None:
                torch.mm(x_mm, wt, out_dtype=acc_dtype, out=out)
            else:
                torch.addmm(bias.narrow(0, c0, cols), x_mm, wt, out_dtype=acc_dtype, out=out)
        elif bias is None:
            torch.mm(x_mm, wt, out=out)
        else:
            torch.addmm(bias.narrow(0, c0, cols), x_mm, wt, out=out)
        return out

    for r0 in range(0, n, rows_max):
        rows = min(rows_max, n - r0)
        x = input.narrow(0, r0, rows)
        x_mm = x.to(acc_dtype) if upcast else x
        part = slice_rows(coef, r0, rows)
        stats = reference.new_stats(rows, mdt, device)
        for c0 in range(0, c, cols_max):
            cols = min(cols_max, c - c0)
            steps.stats(logits_of(x_mm, rows, c0, cols), stats, part, c0)
        row_loss, lse, p_coef = reference.finalize(stats, part)
        losses.narrow(0, r0, rows).copy_(row_loss)
        if not want_grad:
            continue
        gx = None
        if compute_input_grad:
            gx = grad_input.narrow(0, r0, rows) if acc_x is None else acc_x.narrow(0, 0, rows)
        for i, c0 in enumerate(range(0, c, cols_max)):
            cols = min(cols_max, c - c0)
            logits = logits_of(x_mm, rows, c0, cols)
            g = grad_flat.narrow(0, 0, rows * cols).view(rows, cols)
            steps.grad(logits, g, part, lse, p_coef, c0)
            if compute_linear_bias_grad:
                grad_b.narrow(0, c0, cols).add_(g.sum(0, dtype=mdt))
            if gx is not None:
                w_t = linear_weight.narrow(0, c0, cols)
                if acc_x is None:  # fp32 / fp64 input: the gradient itself accumulates
                    gx.addmm_(g, w_t, beta=0.0 if i == 0 else 1.0)
                elif fp32_out:
                    mm_into(gx, g, w_t, first=i == 0, out_dtype=mdt)
                else:
                    mm_into(gx, g.to(mdt), w_t.to(mdt), first=i == 0)
            if compute_linear_weight_grad:  # the first row block writes grad_W, later ones add to it
                mixed = wide and fp32_out
                mm_into(grad_w.narrow(0, c0, cols), g.t(), x if mixed else x_mm, first=r0 == 0,
                        out_dtype=acc_dtype if mixed else None)
        if acc_x is not None:
            grad_input.narrow(0, r0, rows).copy_(gx)
    if grad_w.dtype != dtype:
        grad_w = grad_w.to(dtype)
    return losses, grad_input, grad_w, grad_b.to(dtype)
