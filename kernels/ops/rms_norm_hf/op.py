"""accel's model-rounding RMSNorm ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::rms_norm_hf(input, weight, eps, unit_offset=False) -> (y, rstd)``: :mod:`.reference` states the
  rounding of each variant; ``rstd`` (fp32, ``input.shape[:-1]``) is what the backward needs.
- ``accel::rms_norm_hf_backward(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad) ->
  (grad_input, grad_weight)``, an empty ``[0]`` tensor for a gradient not asked for.

:func:`rms_norm` is the call a model makes (``y`` alone). Both default kernels are the eager reference;
accel's registry puts faster ones at a backend's dispatch key. Autograd saves the input and ``rstd`` (eager
autograd of Hugging Face's module keeps an fp32 copy of the input and four more tensors of its size).
"""

from __future__ import annotations

from typing import Any

import torch

from accel.kernels.core.autograd import below_autograd, eager_autograd

from . import reference

__all__ = ["BACKWARD", "FORWARD", "rms_norm", "rms_norm_hf", "rms_norm_hf_backward"]

FORWARD = "accel::rms_norm_hf"
BACKWARD = "accel::rms_norm_hf_backward"


@torch.library.custom_op(FORWARD, mutates_args=())
def rms_norm_hf(input: torch.Tensor, weight: torch.Tensor, eps: float,
                unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)``: :func:`.reference.rms_norm_hf`."""
    reference.check(input, weight)
    return reference.rms_norm_hf(input, weight, eps, unit_offset)


@rms_norm_hf.register_fake
def _(input, weight, eps, unit_offset=False):
    reference.check(input, weight)
    y = torch.empty_like(input, dtype=reference.output_dtype(input, weight, unit_offset))
    return y, input.new_empty(input.shape[:-1], dtype=torch.float32)


@torch.library.custom_op(BACKWARD, mutates_args=())
def rms_norm_hf_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                         unit_offset: bool, input_grad: bool, weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_input, grad_weight)``: :func:`.reference.rms_norm_hf_backward`."""
    reference.check(input, weight, BACKWARD)
    return reference.rms_norm_hf_backward(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad)


@rms_norm_hf_backward.register_fake
def _(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad):
    reference.check(input, weight, BACKWARD)
    return (torch.empty_like(input) if input_grad else input.new_empty(0),
            torch.empty_like(weight) if weight_grad else weight.new_empty(0))


def _setup_context(ctx, inputs, output):
    input, weight, _, unit_offset = inputs
    ctx.save_for_backward(input, weight, output[1])
    ctx.unit_offset = unit_offset
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # no zero-filled gradient of rstd (a launch per norm per step) is ever made


def _backward(ctx, grad_y, grad_rstd):
    input, weight, rstd = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[:2]
    if grad_y is None or not (need_x or need_w):
        return None, None, None, None
    gx, gw = below_autograd(torch.ops.accel.rms_norm_hf_backward.default, grad_y, input, weight, rstd,
                            ctx.unit_offset, need_x, need_w)
    return (gx if need_x else None), (gw if need_w else None), None, None


rms_norm_hf.register_autograd(_backward, setup_context=_setup_context)
#: ``accel::rms_norm_hf`` with the formula above in a plain autograd.Function where that is the same call
_rms_norm_hf = eager_autograd(torch.ops.accel.rms_norm_hf.default, _setup_context, _backward)


def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float, unit_offset: bool = False, *,
             answer: Any = None) -> torch.Tensor:
    """The normalised ``input`` with the model's rounding (``accel::rms_norm_hf``'s ``y``).

    Args:
        input: ``[..., N]``, floating.
        weight: ``[N]``, floating (Llama: any dtype, the result is ``promote(input, weight)``; Gemma: the
            result has the input's dtype).
        eps: added to the mean square.
        unit_offset: Gemma's ``1 + weight`` in fp32, one cast at the end; else Llama's rounding.
        answer: what :func:`accel.kernels.core.autograd.decide` gave for exactly these arguments just now (its
            ``Answer`` runs without routing the call again; one for other arguments, or whose override is no
            longer live, is ignored and the call routed), or ``None``.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.rms_norm_hf.op import rms_norm
        >>> rms_norm(torch.tensor([[3.0, 4.0]]), torch.ones(2), 0.0)
        tensor([[0.8485, 1.1314]])
    """
    if answer is None:
        return _rms_norm_hf(input, weight, eps, unit_offset)[0]
    return _rms_norm_hf.answered(answer, input, weight, eps, unit_offset)[0]
