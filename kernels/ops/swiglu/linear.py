"""``linear(silu(gate) * up, weight, bias)`` whose backward recomputes the SwiGLU product instead of saving it.

The down projection of a gated MLP saves its input, ``silu(gate) * up`` (``[tokens, intermediate]``: 88 MiB
per layer in bf16 at HF Llama's 8192 x 5632), while :func:`.op.swiglu` already saves ``gate`` and ``up``.
:func:`swiglu_linear` saves ``gate``, ``up`` and ``weight`` only; its backward gets the product for the
weight's gradient from the SwiGLU backward kernel where it has the variant (:func:`down_backward`), else by
running ``accel::swiglu`` once more (one elementwise pass over the three tensors). Same
numerics as ``F.linear(swiglu(gate, up), weight, bias)``: the same ops in the same order, so the same bits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from accel.kernels.core.autograd import direct_apply

from . import op as swiglu_ops

__all__ = ["down_backward", "swiglu_linear"]


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
        if need_b and ctx.has_bias:
            grad_b = rows.sum(0)
        grad_w, grad_gate, grad_up = down_backward(grad_out, rows, weight, gate, up, need_w, need_gate or need_up,
                                                   swiglu_ops.swiglu, torch.ops.accel.swiglu_backward)
        return (grad_gate if need_gate else None), (grad_up if need_up else None), grad_w, grad_b


_APPLY = direct_apply(_SwiGLULinear)  # the node without autograd.Function.apply's Python wrapper


def down_backward(grad_out: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, gate: torch.Tensor,
                  up: torch.Tensor, need_w: bool, need_inputs: bool, swiglu: Callable, swiglu_backward: Callable,
                  *, again: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(grad_weight, grad_gate, grad_up)`` of ``F.linear(swiglu(gate, up), weight)`` for ``grad_out``
    (``rows``: its ``[-1, out]`` view; ``None`` for what is not needed): the weight's gradient from the
    product, the two others from the SwiGLU backward of ``grad_out @ weight``. Where a kernel has the variant
    (:func:`.op.backward_with_product`), one launch gives both gradients and the product; else the product
    is recomputed by ``swiglu`` and freed before ``swiglu_backward`` allocates its two gradients. The same
    bits either way.

    ``again``: given, ``gate`` and ``up`` are the caller's own and dead after this call, and the variant writes
    the two gradients over them (no two new buffers of their size); ``again()`` gives them once more, bit for
    bit, for the case where the variant failed after it may have written them.
    """
    width = gate.shape[-1]
    grad_w = grad_gate = grad_up = grad_product = None
    if need_inputs:
        grad_product = grad_out.matmul(weight)
        grads, written = (swiglu_ops.backward_with_product(grad_product, gate, up, consume=again is not None)
                          if need_w else (None, False))
        if grads is not None:  # the kernel wrote silu(gate) * up over grad_product
            return rows.t().mm(grad_product.reshape(-1, width)), *grads
        if written:  # the variant failed after it may have written: its inputs again
            grad_product = grad_out.matmul(weight)
            if again is not None:
                gate, up = again()
    if need_w:  # the product is a temporary: freed before swiglu_backward allocates its two gradients
        grad_w = rows.t().mm(swiglu(gate, up).reshape(-1, width))
    if need_inputs:
        grad_gate, grad_up = swiglu_backward(grad_product, gate, up)
    return grad_w, grad_gate, grad_up


def swiglu_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(silu(gate) * up, weight, bias)``, saving ``gate``, ``up`` and ``weight`` for backward, not the
    product (there from the SwiGLU backward kernel, or recomputed by ``accel::swiglu``: :func:`down_backward`).

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
    return _APPLY(gate, up, weight, bias)
