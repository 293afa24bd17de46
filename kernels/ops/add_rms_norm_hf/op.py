"""accel's residual-add RMSNorm ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::add_rms_norm_hf(input, residual, weight, eps, unit_offset=False) -> (sum, y, rstd)``: ``sum =
  input + residual`` (``input``'s shape, dtype and layout), ``(y, rstd)`` as ``accel::rms_norm_hf(sum, weight,
  eps, unit_offset)`` (:mod:`accel.kernels.ops.rms_norm_hf.reference` states the rounding; ``rstd`` fp32,
  ``input.shape[:-1]``).
- ``accel::add_rms_norm_hf_backward(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad)
  -> (grad_input, grad_weight)``: ``grad_input = dx + grad_sum`` in ``sum``'s dtype (``dx`` alone where
  ``grad_sum`` is ``None``), an empty ``[0]`` tensor for a gradient not asked for.

:func:`add_rms_norm` is the call a model makes (``(sum, y)``). Both default kernels are the eager reference
(:mod:`.reference`); accel's registry puts faster ones at a backend's dispatch key. Autograd saves ``sum``,
the weight and ``rstd`` (not ``input`` nor ``residual``: the backward needs only their sum); ``input`` and
``residual`` get the same gradient. Where ``y``'s gradient is ``None`` (the normalised output unused) the
input gradient is ``grad_sum`` itself, with no kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from accel.kernels.core.autograd import below_autograd, eager_autograd
from accel.kernels.ops.rms_norm_hf import reference as rn_reference

from . import reference

__all__ = ["BACKWARD", "FORWARD", "add_rms_norm", "add_rms_norm_hf", "add_rms_norm_hf_backward"]

FORWARD = "accel::add_rms_norm_hf"
BACKWARD = "accel::add_rms_norm_hf_backward"


@torch.library.custom_op(FORWARD, mutates_args=())
def add_rms_norm_hf(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum, y, rstd)``: :func:`.reference.add_rms_norm_hf`."""
    reference.check(input, residual, weight)
    return reference.add_rms_norm_hf(input, residual, weight, eps, unit_offset)


@add_rms_norm_hf.register_fake
def _(input, residual, weight, eps, unit_offset=False):
    reference.check(input, residual, weight)
    y = torch.empty_like(input, dtype=rn_reference.output_dtype(input, weight, unit_offset))
    return torch.empty_like(input), y, input.new_empty(input.shape[:-1], dtype=torch.float32)


@torch.library.custom_op(BACKWARD, mutates_args=())
def add_rms_norm_hf_backward(grad_y: torch.Tensor, grad_sum: torch.Tensor | None, sum: torch.Tensor,
                             weight: torch.Tensor, rstd: torch.Tensor, unit_offset: bool, input_grad: bool,
                             weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_input, grad_weight)``: :func:`.reference.add_rms_norm_hf_backward`."""
    reference.check_backward(grad_sum, sum, weight, BACKWARD)
    return reference.add_rms_norm_hf_backward(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad,
                                              weight_grad)


@add_rms_norm_hf_backward.register_fake
def _(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad):
    reference.check_backward(grad_sum, sum, weight, BACKWARD)
    return (torch.empty_like(sum) if input_grad else sum.new_empty(0),
            torch.empty_like(weight) if weight_grad else weight.new_empty(0))


def _setup_context(ctx, inputs, output):
    weight, unit_offset = inputs[2], inputs[4]
    s, _, rstd = output
    ctx.save_for_backward(s, weight, rstd)
    ctx.unit_offset = unit_offset
    ctx.mark_non_differentiable(rstd)
    ctx.set_materialize_grads(False)  # no zero-filled gradient of an unused output is ever made


def _backward(ctx, grad_sum, grad_y, grad_rstd):
    need_in, need_res, need_w = ctx.needs_input_grad[:3]
    need_x = need_in or need_res
    if grad_y is None or not (need_x or need_w):  # y unused: sum's gradient passes to both addends
        gx = grad_sum if need_x else None
        return (gx if need_in else None), (gx if need_res else None), None, None, None
    s, weight, rstd = ctx.saved_tensors
    gx, gw = below_autograd(torch.ops.accel.add_rms_norm_hf_backward.default, grad_y, grad_sum, s, weight, rstd,
                            ctx.unit_offset, need_x, need_w)
    return (gx if need_in else None), (gx if need_res else None), (gw if need_w else None), None, None


add_rms_norm_hf.register_autograd(_backward, setup_context=_setup_context)
#: ``accel::add_rms_norm_hf`` with the formula above in a plain autograd.Function where that is the same call
_add_rms_norm_hf = eager_autograd(torch.ops.accel.add_rms_norm_hf.default, _setup_context, _backward)


def add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 unit_offset: bool = False, *, answer: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input + residual, rms_norm(input + residual))`` with the model's rounding (``accel::add_rms_norm_hf``'s
    ``sum`` and ``y``): a decoder layer's ``h = residual + h; residual = h; h = norm(h)`` in one op.

    Args:
        input: ``[..., N]``, floating.
        residual: ``input``'s shape, dtype and device.
        weight: ``[N]``, floating (Llama: any dtype, ``y`` is ``promote(input, weight)``; Gemma: ``y`` has the
            input's dtype).
        eps: added to the mean square.
        unit_offset: Gemma's ``1 + weight`` in fp32, one cast at the end; else Llama's rounding.
        answer: what :func:`accel.kernels.core.autograd.decide` gave for exactly these arguments just now (its
            ``Answer`` runs without routing the call again; one for other arguments, or whose override is no
            longer live, is ignored and the call routed), or ``None``.

    Returns:
        ``(sum, y)``: ``sum`` the input's dtype and layout (the next residual), ``y`` the normalised ``sum``.

    Raises:
        RuntimeError: ``residual`` or ``weight`` does not fit ``input`` (:func:`.reference.check`).

    .. note::
        Autograd keeps ``sum``, ``weight`` and the fp32 ``rstd`` per row for backward; ``input`` and
        ``residual`` get the same gradient.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.add_rms_norm_hf.op import add_rms_norm
        >>> add_rms_norm(torch.tensor([[1.0, 4.0]]), torch.tensor([[2.0, 0.0]]), torch.ones(2), 0.0)
        (tensor([[3., 4.]]), tensor([[0.8485, 1.1314]]))
    """
    if answer is None:
        s, y, _ = _add_rms_norm_hf(input, residual, weight, eps, unit_offset)
    else:
        s, y, _ = _add_rms_norm_hf.answered(answer, input, residual, weight, eps, unit_offset)
    return s, y
