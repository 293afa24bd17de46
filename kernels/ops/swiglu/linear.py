"""``linear(silu(gate) * up, weight, bias)`` whose backward recomputes the SwiGLU product instead of saving it.

The down projection of a gated MLP saves its input, ``silu(gate) * up`` (``[tokens, intermediate]``: 88 MiB
per layer in bf16 at HF Llama's 8192 x 5632), while :func:`.op.swiglu` already saves ``gate`` and ``up``.
:func:`swiglu_linear` saves ``gate``, ``up`` and ``weight`` only; its backward runs ``accel::swiglu`` once
more (one elementwise pass over the three tensors) to get the product for the weight's gradient. Same
numerics as ``F.linear(swiglu(gate, up), weight, bias)``: the same ops in the same order, so the same bits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import op as swiglu_ops

__all__ = ["swiglu_linear"]


class _SwiGLULinear(torch.autograd.Function):
    # forward + setup_context (not forward(ctx, ...)): torch.func transforms (grad, vmap) need that form
    @staticmethod
    def forward(gate, up, weight, bias):
        return F.linear(swiglu_ops.swiglu(gate, up), weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        gate, up, weight, bias = inputs
        ctx.save_for_backward(gate, up, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad_out):
        gate, up, weight = ctx.saved_tensors
        need_gate, need_up, need_w, need_b = ctx.needs_input_grad
        grad_w = grad_b = grad_gate = grad_up = None
        rows = grad_out.reshape(-1, grad_out.shape[-1])
        if need_w:
            product = swiglu_ops.swiglu(gate, up)
            grad_w = rows.t().mm(product.reshape(-1, product.shape[-1]))
            del product  # freed before the SwiGLU backward allocates its two gradients
        if need_b and ctx.has_bias:
            grad_b = rows.sum(0)
        if need_gate or need_up:
            grad_gate, grad_up = torch.ops.accel.swiglu_backward(grad_out.matmul(weight), gate, up)
        return (grad_gate if need_gate else None), (grad_up if need_up else None), grad_w, grad_b


def swiglu_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(silu(gate) * up, weight, bias)``, saving ``gate``, ``up`` and ``weight`` for backward, not the
    product (recomputed there by ``accel::swiglu``).

    Args:
        gate, up: ``[..., intermediate]``, one shape, floating dtype and device (:func:`.op.swiglu`'s rules).
        weight: ``[out, intermediate]`` of ``gate``'s dtype; bias: ``[out]`` or ``None``. Not for autocast
            regions with weights of another dtype (the backward runs outside autocast): the integration
            calls it only where the dtypes already agree and autocast is off.

    Returns:
        ``[..., out]`` in ``gate``'s dtype.

    Raises:
        RuntimeError: what ``accel::swiglu`` raises for ``gate``/``up`` (shapes, dtypes or devices differ);
            ``F.linear``'s own errors for ``weight``/``bias``.
    """
    return _SwiGLULinear.apply(gate, up, weight, bias)
