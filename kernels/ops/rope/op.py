"""accel's RoPE ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::rope(q, k, cos, sin, unsqueeze_dim=1) -> (q_out, k_out)``: Hugging Face's
  ``apply_rotary_pos_emb`` (:mod:`.reference` states the shapes).
- ``accel::rope_backward(grad_q, grad_k, cos, sin, unsqueeze_dim=1) -> (grad_q_in, grad_k_in)``.

Both default kernels are the eager reference; accel's registry puts faster ones at a backend's dispatch key.
Autograd saves only ``cos`` and ``sin`` (the backward is the same rotation by the opposite angle, so ``q``
and ``k`` are not kept). ``cos`` and ``sin`` get no gradient: a call where either requires grad raises
(Hugging Face computes them under ``torch.no_grad``; a learned rotation needs the eager function).
"""

from __future__ import annotations

import torch

from accel.errors import UnsupportedOperationError
from accel.kernels.core.autograd import below_autograd, eager_autograd

from . import reference

__all__ = ["BACKWARD", "FORWARD", "apply_rope", "rope", "rope_backward"]

FORWARD = "accel::rope"
BACKWARD = "accel::rope_backward"


@torch.library.custom_op(FORWARD, mutates_args=())
def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_out, k_out)``: :func:`.reference.rope`."""
    reference.check(q, k, cos, sin, unsqueeze_dim)
    return reference.rope(q, k, cos, sin, unsqueeze_dim)


@rope.register_fake
def _(q, k, cos, sin, unsqueeze_dim=1):
    reference.check(q, k, cos, sin, unsqueeze_dim)
    return torch.empty_like(q), torch.empty_like(k)


@torch.library.custom_op(BACKWARD, mutates_args=())
def rope_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_q_in, grad_k_in)``: :func:`.reference.rope_backward`."""
    reference.check(grad_q, grad_k, cos, sin, unsqueeze_dim, BACKWARD)
    return reference.rope_backward(grad_q, grad_k, cos, sin, unsqueeze_dim)


@rope_backward.register_fake
def _(grad_q, grad_k, cos, sin, unsqueeze_dim=1):
    reference.check(grad_q, grad_k, cos, sin, unsqueeze_dim, BACKWARD)
    return torch.empty_like(grad_q), torch.empty_like(grad_k)


def _setup_context(ctx, inputs, output):
    _, _, cos, sin, unsqueeze_dim = inputs
    if cos.requires_grad or sin.requires_grad:
        raise UnsupportedOperationError(
            f"accel::rope: cos (requires_grad={cos.requires_grad}) or sin (requires_grad={sin.requires_grad}) "
            f"requires grad. The op differentiates q and k only. Compute cos and sin under torch.no_grad (as "
            f"Hugging Face's rotary embeddings do), or use the eager apply_rotary_pos_emb for a learned rotation.")
    ctx.save_for_backward(cos, sin)
    ctx.unsqueeze_dim = unsqueeze_dim


def _backward(ctx, grad_q, grad_k):
    cos, sin = ctx.saved_tensors
    need_q, need_k = ctx.needs_input_grad[:2]
    if not (need_q or need_k):
        return None, None, None, None, None
    dq, dk = below_autograd(torch.ops.accel.rope_backward.default, grad_q, grad_k, cos, sin, ctx.unsqueeze_dim)
    return (dq if need_q else None), (dk if need_k else None), None, None, None


rope.register_autograd(_backward, setup_context=_setup_context)
_rope = eager_autograd(torch.ops.accel.rope.default, _setup_context, _backward)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The call a model makes: ``accel::rope(q, k, cos, sin, unsqueeze_dim)``, eager through a plain
    autograd.Function with the op's own formula (:func:`accel.kernels.core.autograd.eager_autograd`: the same
    kernels and gradients, less host time), the op itself under ``torch.compile``.

    Args and returns: as :func:`rope`. Raises: :class:`~accel.errors.UnsupportedOperationError` when ``cos``
    or ``sin`` requires grad; the reference's errors for shapes it does not take.
    """
    return _rope(q, k, cos, sin, unsqueeze_dim)
