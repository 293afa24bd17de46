"""accel's chunked linear cross-entropy ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
  label_smoothing, batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
  compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0, z_loss=0.0) -> (loss, grad_input,
  grad_linear_weight, grad_linear_bias)``: the arguments of torch 2.15's
  ``torch_nn::_linear_cross_entropy_batch_chunked``, for every reduction, and two of accel's own: the
  final-logit ``softcap`` (``s * tanh(z / s)`` before the softmax, Gemma 2) and the ``z_loss`` weight
  (``z_loss * lse**2`` per kept row), each 0 for off (:mod:`.reference` gives the formulas). For ``"mean"``/``"sum"`` the gradients are computed in the forward and the backward only
  scales them by the loss's gradient; for ``"none"`` the forward returns the ``[N]`` losses and the backward
  calls the second op.
- ``accel::linear_cross_entropy_backward(grad_loss, input, linear_weight, target, linear_bias, weight,
  ignore_index, label_smoothing, batch_chunk_size, acc_policy, acc_dtype, compute_input_grad,
  compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0, z_loss=0.0) -> (grad_input,
  grad_linear_weight, grad_linear_bias)``: ``reduction="none"``'s gradients, recomputed chunk by chunk.

Both default kernels (every device) are the eager chunked reference (:mod:`.reference`); accel's registry
puts faster ones at a backend's dispatch key (the op family in this folder). The loss comes back in fp32
(fp64 for fp64 input); :func:`accel.nn.functional.linear_cross_entropy` casts it to the input's dtype, as
torch does.

Autograd limits (those torch documents for its chunked path): no higher-order or forward-mode AD, no
``torch.func.grad``; for ``"mean"``/``"sum"`` a second ``backward`` through the same graph raises unless
``allow_retain_graph`` (which keeps the precomputed gradients: one extra gradient-sized allocation per call).
"""

from __future__ import annotations

import torch

from accel.errors import LossInputError, UnsupportedOperationError
from accel.kernels.core.autograd import eager_autograd
from accel.kernels.core.slot import live_slot

from . import reference

__all__ = ["BACKWARD", "FORWARD", "apply", "linear_cross_entropy", "linear_cross_entropy_backward"]

FORWARD = "accel::linear_cross_entropy"
BACKWARD = "accel::linear_cross_entropy_backward"


@torch.library.custom_op(FORWARD, mutates_args=())
def linear_cross_entropy(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                         linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                         ignore_index: int, label_smoothing: float, batch_chunk_size: int, acc_policy: str,
                         acc_dtype: torch.dtype, allow_retain_graph: bool, compute_input_grad: bool,
                         compute_linear_weight_grad: bool, compute_linear_bias_grad: bool, softcap: float = 0.0,
                         z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunked loss and, for ``"mean"``/``"sum"``, its gradients (:func:`.reference.forward`)."""
    return reference.forward(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                             label_smoothing, batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph,
                             compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad, softcap, z_loss)


def _grad_shapes(input, linear_weight, linear_bias, grads, cig, cwg, cbg):
    return (tuple(input.shape) if grads and cig else (0, 0), tuple(linear_weight.shape) if grads and cwg else (0, 0),
            (linear_weight.shape[0],) if grads and cbg and linear_bias is not None else (0,))


@linear_cross_entropy.register_fake
def _(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing, batch_chunk_size,
      acc_policy, acc_dtype, allow_retain_graph, compute_input_grad, compute_linear_weight_grad,
      compute_linear_bias_grad, softcap=0.0, z_loss=0.0):
    reference.check_op_args(input, linear_weight, target, linear_bias, weight, reduction, label_smoothing,
                            batch_chunk_size, acc_policy, acc_dtype, softcap, z_loss)
    ldt = reference.loss_dtype(input.dtype)
    loss = input.new_empty((input.shape[0],) if reduction == "none" else (), dtype=ldt)
    shapes = _grad_shapes(input, linear_weight, linear_bias, reduction != "none", compute_input_grad,
                          compute_linear_weight_grad, compute_linear_bias_grad)
    return (loss, *(input.new_empty(s) for s in shapes))


@torch.library.custom_op(BACKWARD, mutates_args=())
def linear_cross_entropy_backward(grad_loss: torch.Tensor, input: torch.Tensor, linear_weight: torch.Tensor,
                                  target: torch.Tensor, linear_bias: torch.Tensor | None, weight: torch.Tensor | None,
                                  ignore_index: int, label_smoothing: float, batch_chunk_size: int, acc_policy: str,
                                  acc_dtype: torch.dtype, compute_input_grad: bool, compute_linear_weight_grad: bool,
                                  compute_linear_bias_grad: bool, softcap: float = 0.0, z_loss: float = 0.0,
                                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``reduction="none"``'s gradients weighted by ``grad_loss`` (:func:`.reference.backward`)."""
    return reference.backward(grad_loss, input, linear_weight, target, linear_bias, weight, ignore_index,
                              label_smoothing, batch_chunk_size, acc_policy, acc_dtype, compute_input_grad,
                              compute_linear_weight_grad, compute_linear_bias_grad, softcap, z_loss)


@linear_cross_entropy_backward.register_fake
def _(grad_loss, input, linear_weight, target, linear_bias, weight, ignore_index, label_smoothing, batch_chunk_size,
      acc_policy, acc_dtype, compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0,
      z_loss=0.0):
    reference.check_op_args(input, linear_weight, target, linear_bias, weight, "none", label_smoothing,
                            batch_chunk_size, acc_policy, acc_dtype, softcap, z_loss)
    shapes = _grad_shapes(input, linear_weight, linear_bias, True, compute_input_grad, compute_linear_weight_grad,
                          compute_linear_bias_grad)
    return tuple(input.new_empty(s) for s in shapes)


_TWICE = ("accel linear_cross_entropy: backward ran a second time through the same graph. The chunked path "
          "consumes its precomputed gradients. Pass options=LinearCrossEntropyOptions(allow_retain_graph=True) to "
          "keep them (one gradient-sized copy per call), or, with accel.nn.functional.linear_cross_entropy, "
          "options=None (the reference path).")


def _setup_context(ctx, inputs, output):
    (input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing, batch_chunk_size,
     acc_policy, acc_dtype, allow_retain_graph, cig, cwg, cbg, *extras) = inputs  # extras: softcap, z_loss
    ctx.set_materialize_grads(False)  # the grad outputs are never used: no zero-filled [N, D] + [C, D] per backward
    ctx.reduction = reduction
    if target.requires_grad:
        raise UnsupportedOperationError(
            "accel linear_cross_entropy: the probability target requires grad. The chunked path has no gradient "
            "for the target. Pass options=None (the reference path differentiates it), or target.detach().")
    if reduction == "none":
        # detached: the backward recomputes from the values and never differentiates through them (a saved
        # view of an nn.Linear weight would otherwise keep the parameter's use count up)
        ctx.save_for_backward(input.detach(), linear_weight.detach(), target,
                              None if linear_bias is None else linear_bias.detach(),
                              None if weight is None else weight.detach())
        ctx.args = (ignore_index, label_smoothing, batch_chunk_size, acc_policy, acc_dtype)
        ctx.extras = tuple(extras)
        return
    wanted = (input.requires_grad, linear_weight.requires_grad, linear_bias is not None and linear_bias.requires_grad)
    flags = (cig, cwg, cbg and linear_bias is not None)
    for name, want, flag in zip(("input", "linear_weight", "linear_bias"), wanted, flags):
        if want and not flag:
            raise LossInputError(
                f"accel linear_cross_entropy: {name} requires grad but compute_{name}_grad=False (set when the "
                f"graph was traced?). The op computes gradients in its forward only where told to: pass "
                f"compute_{name}_grad=True, or recompile with the requires_grad the inputs have now.")
    ctx.allow_retain_graph = allow_retain_graph
    _, gi, gw, gb = output
    # detached: they are outputs of this node, so holding them with their grad_fn would be a reference cycle
    ctx.grads = [gi.detach() if flags[0] else None, gw.detach() if flags[1] else None,
                 gb.detach() if flags[2] else None]
    ctx.flags = flags


def _backward(ctx, grad_loss, _gi, _gw, _gb):
    out: list = [None] * len(ctx.needs_input_grad)  # 15 arguments, or 17 with softcap and z_loss
    if grad_loss is None:  # no gradient reaches the loss
        return tuple(out)
    if ctx.reduction == "none":
        input, linear_weight, target, linear_bias, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        cbg = linear_bias is not None and needs[3]
        if not (needs[0] or needs[1] or cbg):
            return tuple(out)
        gi, gw, gb = torch.ops.accel.linear_cross_entropy_backward(
            grad_loss, input, linear_weight, target, linear_bias, weight, *ctx.args, needs[0], needs[1], cbg,
            *ctx.extras)
        out[0], out[1], out[3] = (gi if needs[0] else None), (gw if needs[1] else None), (gb if cbg else None)
        return tuple(out)
    on_device = None if ctx.allow_retain_graph else _device_scale(grad_loss, ctx.grads)
    scale = grad_loss if on_device is not None else _host_scale(grad_loss)
    one = isinstance(scale, float) and scale == 1.0
    for slot, position in enumerate((0, 1, 3)):
        if not ctx.flags[slot]:
            continue
        g = ctx.grads[slot]
        if ctx.allow_retain_graph:
            out[position] = g.clone() if one else g * scale
            continue
        if g is None:
            raise UnsupportedOperationError(_TWICE)
        ctx.grads[slot] = None
        out[position] = on_device(g, grad_loss) if on_device is not None else g if one else g.mul_(scale)
    return tuple(out)


#: forward impl -> its in-place scale of the precomputed gradients, ``scale_(grad, grad_loss) -> grad``, read on
#: the device (an impl module adds its own when imported: :mod:`.triton_impl`)
DEVICE_SCALES: dict = {}
_SCALED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _device_scale(grad_loss: torch.Tensor, grads: list):
    """A live impl's in-place scale (:data:`DEVICE_SCALES`; the Triton impl's :func:`.triton_impl.scale_`: the
    loss's gradient read on the device, a gradient of 1 writing nothing) where an impl that has one is live
    at ``grad_loss``'s dispatch key and every precomputed gradient is a contiguous fp16/bf16/fp32 tensor
    there, eager and not tracing; else ``None`` (the host read of :func:`_host_scale`). Without it each backward waits for the whole forward to
    finish before the next node's kernels are launched."""
    if type(grad_loss) is not torch.Tensor or grad_loss.numel() != 1 or torch.compiler.is_compiling():
        return None
    slot = live_slot(FORWARD, grad_loss.device.type)
    if slot is None:
        return None
    # by identity: a user's impl need not be hashable
    scale = next((fn for ov in slot.live for impl, fn in DEVICE_SCALES.items() if ov.impl is impl), None)
    if scale is None or not all(g is None or (type(g) is torch.Tensor and g.device == grad_loss.device
                                              and g.dtype in _SCALED_DTYPES and g.is_contiguous()) for g in grads):
        return None
    return scale


def _host_scale(grad_loss: torch.Tensor):
    """The loss's gradient as a Python float where reading it is allowed (eager, no CUDA graph capture), else
    the tensor itself. A Python scale multiplies at copy speed (H200: 0.50 ms for a bf16 [128256, 4096]
    gradient, 1.96 ms with the fp32 0-dim tensor) and a scale of 1 (a plain ``loss.backward()``) multiplies
    nothing; the read costs one device-to-host copy per backward. Scaling on the device instead (one
    ``_foreach_mul_`` by the fp32 0-dim tensor, no read) was slower on every benchmark row: 30.71 against
    29.38 ms at d 2048 x vocab 128256, 57.91 against 55.15 at 4096 x 128256
    (``benchmarks/linear_cross_entropy.py``). Where accel's Triton loss kernel serves the device,
    :func:`_device_scale` replaces the read."""
    # traced (fake or functional tensors: a subclass), compiling, or capturing a CUDA graph: no value to read
    if (type(grad_loss) is not torch.Tensor or torch.compiler.is_compiling()
            or (grad_loss.is_cuda and torch.cuda.is_current_stream_capturing())):
        return grad_loss
    return float(grad_loss)


linear_cross_entropy.register_autograd(_backward, setup_context=_setup_context)
#: ``accel::linear_cross_entropy(*args)`` as a loss calls it: eager through a plain autograd.Function with the
#: formula above (:func:`accel.kernels.core.autograd.eager_autograd`: the op's 15 or 17 arguments are not re-filled
#: and redispatched by the custom op's autograd layer), the op itself under ``torch.compile``
apply = eager_autograd(torch.ops.accel.linear_cross_entropy.default, _setup_context, _backward)
