"""accel's GeGLU ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::geglu(a, b) -> y``: ``y = gelu(a, approximate="tanh") * b``, ``a`` and ``b`` of one shape and floating
  dtype (any layout).
- ``accel::geglu_backward(grad_out, a, b) -> (grad_a, grad_b)``.

Both default kernels (every device) are the eager reference (:mod:`.reference`); accel's registry puts faster
ones at a backend's dispatch key (the op family of this folder). Autograd saves ``a`` and ``b`` (eager autograd of
``F.gelu(a) * b`` keeps ``gelu(a)`` too). Outputs are laid out like ``a`` (``b`` for ``grad_b``), as
``torch.empty_like`` lays them out.
"""

from __future__ import annotations

import torch

from . import BWD_OP, FWD_OP, reference

__all__ = ["BACKWARD", "FORWARD", "geglu", "geglu_backward"]

FORWARD, BACKWARD = FWD_OP, BWD_OP


@torch.library.custom_op(FORWARD, mutates_args=())
def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(a) * b`` (:func:`.reference.geglu`): ``a``, ``b`` of one shape, dtype and device."""
    reference.check(a, b)
    return reference.geglu(a, b)


@geglu.register_fake
def _(a, b):
    reference.check(a, b)
    return torch.empty_like(a)


@torch.library.custom_op(BACKWARD, mutates_args=())
def geglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of :func:`geglu` (:func:`.reference.geglu_backward`)."""
    reference.check(a, b, BACKWARD)
    reference.check(grad_out, a, BACKWARD)
    return reference.geglu_backward(grad_out, a, b)


@geglu_backward.register_fake
def _(grad_out, a, b):
    reference.check(a, b, BACKWARD)
    reference.check(grad_out, a, BACKWARD)
    return torch.empty_like(a), torch.empty_like(b)


def _setup_context(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)


def _backward(ctx, grad_out):
    a, b = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad
    if not (need_a or need_b):
        return None, None
    grad_a, grad_b = torch.ops.accel.geglu_backward(grad_out, a, b)
    return (grad_a if need_a else None), (grad_b if need_b else None)


geglu.register_autograd(_backward, setup_context=_setup_context)
