"""A whole gated MLP, ``down(silu(gate(x)) * up(x))``, as one autograd node that saves the least it can.

Autograd through Hugging Face's Llama MLP (three ``nn.Linear`` and the SwiGLU) keeps ``x`` (for both input
projections), ``gate``, ``up`` and the product ``silu(gate) * up``; that is four nodes for autograd to run per
layer. :func:`swiglu_mlp` is one node that keeps ``gate``, ``up`` and the three weights: the product is
recomputed in backward (``accel::swiglu`` once more), and so, where the caller says how, is ``x`` itself
(``recompute``: the RMSNorm that made ``x``, from the norm's own input, which that norm keeps for its own
backward anyway). HF Llama (8192 tokens, d 2048, MLP 5632, bf16): 88 MiB of product and 32 MiB of ``x`` per
layer not kept. Where the registered SwiGLU backward kernel has the variant (:func:`.op.backward_with_product`:
the Triton kernel), the product comes out of the backward kernel itself, written over the gradient it
consumed: one elementwise pass for both (HF Llama on the H200: ``swiglu_fwd`` ran twice per layer). That
kernel also writes ``grad_gate`` and ``grad_up`` over ``gate`` and ``up``, the node's own tensors, unless the
backward keeps its graph (``retain_graph=True``): two buffers of their size (88 MiB each for HF Llama)
fewer at the backward's peak.

Same arithmetic as the modules' own but for one sum: each matmul, the SwiGLU and its backward are the ops
autograd would run, in its order; the gradient of ``x`` is ``grad_gate @ gate_w`` with ``grad_up @ up_w``
added inside the second GEMM (``addmm_``, beta 1: one rounding of the sum, where autograd rounds both
products and adds them in a separate kernel). Every other output is bit for bit the unfused model's (the
norm recomputed by the same kernel gives the same bits). The SwiGLU runs ``accel::swiglu`` /
``accel::swiglu_backward`` below autograd, so the registry's kernel (or the op's eager reference) answers, as
for :func:`.op.swiglu`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from accel.kernels.core.autograd import below_autograd, direct_apply, first_order, keeps_graph, shared_input_backward

from .linear import down_backward

__all__ = ["swiglu_mlp"]


def _swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return below_autograd(torch.ops.accel.swiglu.default, a, b)  # the backend kernel (accel's router)


def _swiglu_backward(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return below_autograd(torch.ops.accel.swiglu_backward.default, g, a, b)


def _projections(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
                 up_b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``gate`` and ``up`` as the forward computed them (the same ops, so the same bits)."""
    return F.linear(x, gate_w, gate_b), F.linear(x, up_w, up_b)


class _SwiGLUMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate_w, up_w, down_w, gate_b, up_b, down_b, recompute, *recompute_from):
        gate, up = _projections(x, gate_w, up_w, gate_b, up_b)
        out = F.linear(_swiglu(gate, up), down_w, down_b)
        ctx.recompute = recompute
        ctx.biases = (gate_b is not None, up_b is not None, down_b is not None)
        ctx.x_shape = x.shape
        ctx.save_for_backward(gate, up, gate_w, up_w, down_w, gate_b, up_b,
                              *((x,) if recompute is None else recompute_from))
        return out

    @staticmethod
    @first_order("swiglu_mlp", "accel.integrations.transformers.patch(model, mlp_recompute=False) runs the MLP "
                 "as modules.")  # its SwiGLU parts run below autograd
    def backward(ctx, grad_out):
        gate, up, gate_w, up_w, down_w, gate_b, up_b, *held = ctx.saved_tensors
        need = ctx.needs_input_grad
        grads: list = [None] * (8 + len(held) - (ctx.recompute is None))
        rows = grad_out.reshape(-1, grad_out.shape[-1])
        width = gate.shape[-1]
        if need[6] and ctx.biases[2]:
            grads[6] = rows.sum(0)
        inputs = need[0] or need[1] or need[2] or need[4] or need[5]
        x_again = (lambda: held[0]) if ctx.recompute is None else (lambda: ctx.recompute(*held))
        # gate and up are this node's own: without a kept graph, their memory takes their gradients
        again = None if keeps_graph() else (lambda: _projections(x_again(), gate_w, up_w, gate_b, up_b))
        grads[3], grad_gate, grad_up = down_backward(grad_out, rows, down_w, gate, up, need[3], inputs, _swiglu,
                                                     _swiglu_backward, again=again)
        if not inputs:
            return tuple(grads)
        del gate, up
        gg, gu = grad_gate.reshape(-1, width), grad_up.reshape(-1, width)
        # the gate and up projections read one input: their weight gradients, and x's summed inside the GEMM
        grad_x, (grads[1], grads[2]), (grads[4], grads[5]) = shared_input_backward(
            (gg, gu), (gate_w, up_w), (need[1], need[2]), (need[4] and ctx.biases[0], need[5] and ctx.biases[1]),
            need[0], x_again)
        if grad_x is not None:
            grads[0] = grad_x.reshape(ctx.x_shape)
        return tuple(grads)


_APPLY = direct_apply(_SwiGLUMLP)  # the node without autograd.Function.apply's Python wrapper


def swiglu_mlp(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor,
               gate_bias: torch.Tensor | None = None, up_bias: torch.Tensor | None = None,
               down_bias: torch.Tensor | None = None, *,
               recompute: tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]] | None = None) -> torch.Tensor:
    """``F.linear(silu(F.linear(x, gate_weight, gate_bias)) * F.linear(x, up_weight, up_bias), down_weight,
    down_bias)`` as one autograd node that saves ``gate``, ``up`` and the weights (module docstring).

    Args:
        x: ``[..., hidden]``, floating; the weights ``[inter, hidden]``, ``[inter, hidden]``, ``[hidden_out,
            inter]`` and the biases (or ``None``) in ``x``'s dtype and on its device. Not for autocast regions
            (the backward runs outside autocast) nor under ``torch.func`` transforms: the integration calls
            it only where the dtypes agree, autocast is off and no transform is active.
        recompute: ``(fn, tensors)`` where ``fn(*tensors)`` gives ``x`` again, bit for bit (for an RMSNorm's
            output: the norm and its input and weight), or ``None``. Given, ``tensors`` are kept for backward
            instead of ``x``, and their in-place modification before backward is caught as autograd catches it;
            ``x`` itself must be what ``fn(*tensors)`` gave (the integration checks the version counters).

    Returns:
        ``[..., hidden_out]`` in ``x``'s dtype.

    Raises:
        RuntimeError: ``F.linear``'s errors for mismatched shapes or dtypes; ``accel::swiglu``'s; at backward,
            autograd's error when a kept tensor was modified in place, and a refusal of double backward
            (``create_graph=True``: the backward's ops are not recorded).
    """
    fn, tensors = (None, ()) if recompute is None else recompute
    return _APPLY(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, fn, *tensors)
