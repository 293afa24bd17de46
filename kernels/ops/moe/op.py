"""accel's mixture-of-experts ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::moe_gather(x, perm, top_k) -> rows``: ``rows[j] = x[perm[j] // top_k]`` (``[T, D]`` -> ``[T * top_k,
  D]``); its backward is ``accel::moe_combine`` without weights (each token's ``top_k`` row gradients summed).
- ``accel::moe_combine(y, perm, weights, top_k) -> out``: ``out[t] = sum_k weights[t, k] * y[inv[t * top_k +
  k]]`` (``[T * top_k, D]`` -> ``[T, D]``), and ``accel::moe_combine_backward``.
- ``accel::grouped_mm(x, w, offs) -> y``: ``y[rows of group e] = x[rows of group e] @ w[e]``, and
  ``accel::grouped_mm_backward``.

Shapes and the meaning of ``perm`` are :mod:`.reference`'s; the default kernels (every device) are its functions.
Autograd saves ``perm`` (and ``y``, ``weights`` for the combine; ``x``, ``w``, ``offs`` for the GEMM).
"""

from __future__ import annotations

import torch

from . import reference as ref

__all__ = ["combine", "combine_backward", "gather", "grouped_mm", "grouped_mm_backward"]


def _check_gather(x, perm, top_k) -> None:
    ref.check_perm(x, perm, top_k, "accel::moe_gather")
    torch._check(perm.shape[0] == x.shape[0] * top_k, lambda: f"accel::moe_gather: perm has {perm.shape[0]} entries, "
                                                               f"not tokens x top_k = {x.shape[0]} x {top_k}")


@torch.library.custom_op("accel::moe_gather", mutates_args=())
def gather(x: torch.Tensor, perm: torch.Tensor, top_k: int) -> torch.Tensor:
    _check_gather(x, perm, top_k)
    return ref.gather(x, perm, top_k)


@gather.register_fake
def _(x, perm, top_k):
    _check_gather(x, perm, top_k)
    return x.new_empty(perm.shape[0], x.shape[1])


@torch.library.custom_op("accel::moe_combine", mutates_args=())
def combine(y: torch.Tensor, perm: torch.Tensor, weights: torch.Tensor | None, top_k: int) -> torch.Tensor:
    _check_combine(y, perm, weights, top_k)
    return ref.combine(y, perm, weights, top_k)


def _check_combine(y, perm, weights, top_k) -> None:
    ref.check_perm(y, perm, top_k, "accel::moe_combine")
    torch._check(perm.shape[0] == y.shape[0], lambda: f"accel::moe_combine: perm has {perm.shape[0]} entries, y "
                                                       f"{y.shape[0]} rows")
    torch._check(y.shape[0] % top_k == 0, lambda: f"accel::moe_combine: {y.shape[0]} rows are not tokens x {top_k}")
    if weights is not None:
        torch._check(tuple(weights.shape) == (y.shape[0] // top_k, top_k),
                     lambda: f"accel::moe_combine: weights must be [tokens, top_k] = "
                             f"{[y.shape[0] // top_k, top_k]}, got {list(weights.shape)}")
        torch._check(weights.is_floating_point(), lambda: "accel::moe_combine: weights must be floating")


@combine.register_fake
def _(y, perm, weights, top_k):
    _check_combine(y, perm, weights, top_k)
    return y.new_empty(y.shape[0] // top_k, y.shape[1])


@torch.library.custom_op("accel::moe_combine_backward", mutates_args=())
def combine_backward(grad_out: torch.Tensor, y: torch.Tensor, perm: torch.Tensor, weights: torch.Tensor | None,
                     top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    _check_combine(y, perm, weights, top_k)
    return ref.combine_backward(grad_out, y, perm, weights, top_k)


@combine_backward.register_fake
def _(grad_out, y, perm, weights, top_k):
    _check_combine(y, perm, weights, top_k)  # contiguous, as the kernels write them
    return y.new_empty(y.shape), (weights.new_empty(weights.shape) if weights is not None else grad_out.new_empty(0))


def _gather_setup(ctx, inputs, output):
    _, perm, top_k = inputs
    ctx.save_for_backward(perm)
    ctx.top_k = top_k


def _gather_grad(ctx, grad):
    (perm,) = ctx.saved_tensors
    return combine(grad.contiguous(), perm, None, ctx.top_k), None, None


gather.register_autograd(_gather_grad, setup_context=_gather_setup)


def _combine_setup(ctx, inputs, output):
    y, perm, weights, top_k = inputs
    ctx.save_for_backward(y, perm, weights)
    ctx.top_k = top_k


def _combine_grad(ctx, grad):
    y, perm, weights = ctx.saved_tensors
    need_y, _, need_w, _ = ctx.needs_input_grad
    if not (need_y or need_w):
        return None, None, None, None
    grad_y, grad_w = combine_backward(grad.contiguous(), y, perm, weights, ctx.top_k)
    return (grad_y if need_y else None), None, (grad_w if need_w and weights is not None else None), None


combine.register_autograd(_combine_grad, setup_context=_combine_setup)


def _check_mm(x, w, offs, where: str) -> None:
    torch._check(x.dim() == 2 and w.dim() == 3, lambda: f"{where}: x must be [rows, K] and w [experts, K, N], got "
                                                        f"{list(x.shape)} and {list(w.shape)}")
    torch._check(x.shape[1] == w.shape[1], lambda: f"{where}: x has {x.shape[1]} columns, w[e] {w.shape[1]} rows")
    torch._check(offs.dim() == 1 and offs.shape[0] == w.shape[0] and offs.dtype in (torch.int32, torch.int64),
                 lambda: f"{where}: offs must be [experts] int32 cumulative row counts, got {list(offs.shape)} "
                         f"{offs.dtype}")
    torch._check(x.dtype == w.dtype and x.device == w.device and x.is_floating_point(),
                 lambda: f"{where}: x is {x.dtype} on {x.device}, w {w.dtype} on {w.device}: both must be one "
                         f"floating dtype on one device")


@torch.library.custom_op("accel::grouped_mm", mutates_args=())
def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    _check_mm(x, w, offs, "accel::grouped_mm")
    return ref.grouped_mm(x, w, offs)


@grouped_mm.register_fake
def _(x, w, offs):
    _check_mm(x, w, offs, "accel::grouped_mm")
    return x.new_empty(x.shape[0], w.shape[2])


@torch.library.custom_op("accel::grouped_mm_backward", mutates_args=())
def grouped_mm_backward(grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    _check_mm(x, w, offs, "accel::grouped_mm_backward")
    return ref.grouped_mm_backward(grad_out, x, w, offs)


@grouped_mm_backward.register_fake
def _(grad_out, x, w, offs):
    return x.new_empty(x.shape), w.new_empty(w.shape)


def _mm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _mm_grad(ctx, grad):
    x, w, offs = ctx.saved_tensors
    grad_x, grad_w = grouped_mm_backward(grad.contiguous(), x, w, offs)
    need_x, need_w, _ = ctx.needs_input_grad
    return (grad_x if need_x else None), (grad_w if need_w else None), None


grouped_mm.register_autograd(_mm_grad, setup_context=_mm_setup)
