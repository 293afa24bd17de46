"""A Llama-style attention block, from its input to its output projection, as one autograd node.

Hugging Face's ``LlamaAttention.forward`` records about a dozen autograd nodes per call (three projections and
their views, RoPE, SDPA, the transpose and its copy, the output projection) and runs its own Python around
them (the attention interface's lookup, ``sdpa_attention_forward``'s checks): host time in every layer's
forward. :func:`self_attention` runs the same ops in the same order under one ``autograd.Function``:

- forward: ``q, k, v = x @ Wq^T, x @ Wk^T, x @ Wv^T`` (viewed ``[B, H, S, D]``), ``accel::rope`` on ``q`` and
  ``k``, causal SDPA, then ``o_proj`` on the heads laid out ``[B, S, H * D]``;
- backward: the same gradients as autograd computes them through those ops: the output projection's
  (``grad @ Wo``, ``grad^T @ attn``), SDPA's own backward (its autograd formula, run on a graph kept for that
  one op), ``accel::rope_backward``, and the three projections' with the input gradient summed inside the GEMMs
  (:func:`accel.kernels.core.autograd.shared_input_backward`, as the integration's shared-projection node does).

Saved for backward: the four weights, ``cos`` and ``sin``, the input ``x`` (or what makes it again, where the
caller says how) and SDPA's own saved tensors (``q``, ``k`` after RoPE, ``v``, its output and log-sum-exp).
The ``[B, S, H * D]`` copy of SDPA's output that the output projection reads is not kept: the backward makes it
again from SDPA's output (one copy kernel), one activation of ``B * S * H * D`` elements fewer per layer than
autograd keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from accel.kernels.core.autograd import (below_autograd, direct_apply, first_order, graph_grad, keeps_graph,
                                        shared_input_backward)
from accel.kernels.ops.rope import op as rope_ops

__all__ = ["self_attention"]

_ROPE = rope_ops.rope._opoverload
_ROPE_BACKWARD = rope_ops.rope_backward._opoverload


class _SelfAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, head_dim, scaling, enable_gqa, recompute, *tensors):
        wq, wk, wv, wo, bq, bk, bv, bo = tensors[:8]
        held = tensors[8:]
        b, s = x.shape[0], x.shape[1]
        q = F.linear(x, wq, bq).view(b, s, -1, head_dim).transpose(1, 2)
        k = F.linear(x, wk, bk).view(b, s, -1, head_dim).transpose(1, 2)
        v = F.linear(x, wv, bv).view(b, s, -1, head_dim).transpose(1, 2)
        q, k = below_autograd(_ROPE, q, k, cos, sin, 1)
        # SDPA keeps its own graph: its backward is whichever kernel's (cuDNN, flash, math) autograd would run
        with torch.enable_grad():
            q, k, v = q.requires_grad_(), k.requires_grad_(), v.requires_grad_()  # made under no_grad: leaves
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, scale=scaling, is_causal=True,
                                               enable_gqa=enable_gqa)
        out = F.linear(o.transpose(1, 2).reshape(b, s, -1), wo, bo)  # grad mode is off again: not recorded
        ctx.graph = (o, q, k, v)
        ctx.recompute, ctx.x_shape, ctx.head_dim = recompute, x.shape, head_dim
        ctx.has_bias = tuple(t is not None for t in (bq, bk, bv, bo))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(wq, wk, wv, wo, cos, sin, *((x,) if recompute is None else held))
        return out

    @staticmethod
    @first_order("accel.integrations.transformers self-attention",
                 "accel.integrations.transformers.patch(model, norm_recompute=False) runs the attention's own code.")
    def backward(ctx, grad):
        if grad is None:
            return (None,) * len(ctx.needs_input_grad)
        graph = ctx.graph
        if graph is None:
            raise RuntimeError("accel.integrations.transformers: backward through a patched attention a second "
                               "time, after its graph was freed. Pass retain_graph=True to the first backward.")
        if not keeps_graph():  # a kept graph keeps SDPA's too
            ctx.graph = None
        o, q, k, v = graph
        wq, wk, wv, wo, cos, sin = ctx.saved_tensors[:6]
        held = ctx.saved_tensors[6:]
        need = ctx.needs_input_grad  # x, cos, sin, head_dim, scaling, enable_gqa, recompute, 4 weights, 4 biases
        b, s = grad.shape[0], grad.shape[1]
        has_bias = ctx.has_bias
        rows = grad.reshape(-1, grad.shape[-1])
        grad_attn, grad_wo, grad_bo = shared_input_backward(
            [rows], [wo], [need[10]], [need[14] and has_bias[3]], True,
            lambda: o.transpose(1, 2).reshape(b, s, -1))
        grad_o = grad_attn.view(b, s, -1, ctx.head_dim).transpose(1, 2)
        grad_q, grad_k, grad_v = graph_grad(o, (q, k, v), grad_o, ctx.graph is not None)
        graph = o = q = k = v = None  # SDPA's saved tensors go with its graph
        grad_q, grad_k = below_autograd(_ROPE_BACKWARD, grad_q, grad_k, cos, sin, 1)
        heads = [g.transpose(1, 2).reshape(b * s, -1) for g in (grad_q, grad_k, grad_v)]
        grad_x, grad_w, grad_b = shared_input_backward(
            heads, [wq, wk, wv], need[7:10], [n and h for n, h in zip(need[11:14], has_bias[:3])], need[0],
            lambda: held[0] if ctx.recompute is None else ctx.recompute(*held))
        out: list[Any] = [None] * len(need)
        if grad_x is not None:
            out[0] = grad_x.reshape(ctx.x_shape)
        out[7:10] = grad_w
        out[10] = grad_wo[0]
        out[11:14] = grad_b
        out[14] = grad_bo[0]
        return tuple(out)


_APPLY = direct_apply(_SelfAttention)  # the node without autograd.Function.apply's Python wrapper


def self_attention(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, weights: tuple, biases: tuple, *,
                   head_dim: int, scaling: float, enable_gqa: bool,
                   recompute: tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]] | None = None,
                   ) -> torch.Tensor:
    """Hugging Face's Llama attention without cache, mask or dropout (causal SDPA), as one autograd node (module
    docstring).

    Args:
        x: ``[B, S, hidden]``, floating. ``weights``: ``(Wq, Wk, Wv, Wo)`` as ``nn.Linear`` weights
            (``[Hq * D, hidden]``, ``[Hk * D, hidden]`` twice, ``[hidden_out, Hq * D]``); ``biases`` the four
            biases or ``None``s; all in ``x``'s dtype and on its device. Not for autocast regions nor under
            ``torch.func`` transforms (the integration calls it only where neither is active).
        cos, sin: ``[B or 1, S, D]`` in ``x``'s dtype, not requiring grad (Hugging Face's rotary embedding).
        head_dim: ``D``. scaling: SDPA's ``scale``. enable_gqa: SDPA's ``enable_gqa`` (``Hq != Hk``).
        recompute: ``(fn, tensors)`` where ``fn(*tensors)`` gives ``x`` again bit for bit (an RMSNorm's output,
            from the norm's input and weight), kept for backward in place of ``x``; or ``None``.

    Returns:
        ``[B, S, hidden_out]`` in ``x``'s dtype: what ``LlamaAttention.forward`` returns as its first output.

    Raises:
        RuntimeError: ``F.linear``'s and SDPA's errors; at backward, autograd's error for a kept tensor modified
            in place, a second backward after the first freed the graph (without ``retain_graph=True``), and a
            refusal of double backward (``create_graph=True``: the backward's ops are not recorded).
    """
    fn, tensors = (None, ()) if recompute is None else recompute
    return _APPLY(x, cos, sin, head_dim, scaling, enable_gqa, fn, *weights, *biases, *tensors)
