"""Linears that read one input (an attention's q, k and v projections) as one autograd node whose backward
sums the input's gradient inside the GEMMs.

Autograd through ``q_proj(x)``, ``k_proj(x)`` and ``v_proj(x)`` gives each projection's ``grad @ W`` its own
``[tokens, hidden]`` buffer and sums the three with two add kernels (HF Llama, 8192 tokens x 2048 in bf16: 32
MiB written and 64 MiB read per add, two per layer). :func:`shared_input_linears` runs the same forward
``F.linear`` calls and in backward adds each further ``grad @ W`` into the first inside its GEMM
(``addmm_``, beta 1): no temporary and no add kernel, and one rounding of the sum where autograd rounds each
term first. Weight and bias gradients are the ops autograd runs for ``F.linear``, bit for bit.

Where the caller says how (``recompute``: the RMSNorm that made ``x``, from the norm's input and weight that
the norm keeps anyway), ``x`` is not kept but made again once in backward for the three weight gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from accel.kernels.core.autograd import direct_apply, first_order, shared_input_backward

__all__ = ["shared_input_linears"]


class _SharedInputLinears(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, count, recompute, *tensors):
        weights, biases, held = tensors[:count], tensors[count:2 * count], tensors[2 * count:]
        outs = tuple(F.linear(x, w, b) for w, b in zip(weights, biases))
        ctx.count, ctx.recompute, ctx.x_shape = count, recompute, x.shape
        ctx.has_bias = tuple(b is not None for b in biases)
        ctx.set_materialize_grads(False)  # an output nobody used gets no gradient and costs no GEMM
        ctx.save_for_backward(*weights, *((x,) if recompute is None else held))
        return outs

    @staticmethod
    @first_order("shared_input_linears", "accel.integrations.transformers.patch(model, norm_recompute=False) "
                 "runs the attention's projections as modules.")
    def backward(ctx, *grads):
        count = ctx.count
        weights, held = ctx.saved_tensors[:count], ctx.saved_tensors[count:]
        need = ctx.needs_input_grad  # x, count, recompute, weights, biases, the recompute's tensors
        out: list = [None] * len(need)
        rows = [None if g is None else g.reshape(-1, g.shape[-1]) for g in grads]
        grad_x, out[3:3 + count], out[3 + count:3 + 2 * count] = shared_input_backward(
            rows, weights, need[3:3 + count], [n and b for n, b in zip(need[3 + count:3 + 2 * count], ctx.has_bias)],
            need[0], lambda: held[0] if ctx.recompute is None else ctx.recompute(*held))
        if grad_x is not None:
            out[0] = grad_x.reshape(ctx.x_shape)
        return tuple(out)


_APPLY = direct_apply(_SharedInputLinears)  # the node without autograd.Function.apply's Python wrapper


def shared_input_linears(x: torch.Tensor, weights: Sequence[torch.Tensor],
                         biases: Sequence[torch.Tensor | None], *,
                         recompute: tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]] | None = None,
                         ) -> tuple[torch.Tensor, ...]:
    """``tuple(F.linear(x, w, b) for w, b in zip(weights, biases))`` as one autograd node (module docstring).

    Args:
        x: ``[..., in_features]``, floating; each weight ``[out_i, in_features]`` and each bias ``[out_i]`` (or
            ``None``) in ``x``'s dtype and on its device. Not for autocast regions (the backward runs outside
            autocast) nor under ``torch.func`` transforms: the integration calls it only where the dtypes agree,
            autocast is off and no transform is active.
        recompute: ``(fn, tensors)`` where ``fn(*tensors)`` gives ``x`` again, bit for bit, or ``None``. Given,
            ``tensors`` are kept for backward instead of ``x`` (their in-place modification before backward is
            autograd's error, as for any saved tensor); ``x`` must be what ``fn(*tensors)`` gave.

    Returns:
        One ``[..., out_i]`` tensor per weight, in ``x``'s dtype.

    Raises:
        ValueError: ``weights`` and ``biases`` differ in length, or are empty.
        RuntimeError: ``F.linear``'s errors for mismatched shapes or dtypes; at backward, autograd's error when
            a kept tensor was modified in place, and a refusal of double backward (``create_graph=True``: the
            backward's GEMMs are not recorded).
    """
    if len(weights) != len(biases) or not weights:
        raise ValueError(f"shared_input_linears: {len(weights)} weights and {len(biases)} biases. Pass one bias "
                         f"(or None) per weight, at least one weight.")
    fn, tensors = (None, ()) if recompute is None else recompute
    return _APPLY(x, len(weights), fn, *weights, *biases, *tensors)
