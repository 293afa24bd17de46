"""accel's SwiGLU ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::swiglu(a, b) -> y``: ``y = silu(a) * b``, ``a`` and ``b`` of one shape and floating dtype (any
  layout: the gate and up halves of Phi-3's fused projection are strided views).
- ``accel::swiglu_backward(grad_out, a, b) -> (grad_a, grad_b)``.

Both default kernels (every device) are the eager reference (:mod:`.reference`); accel's registry puts
faster ones at a backend's dispatch key (the op family of this folder). :func:`backward_with_product` is the
backward that also gives ``silu(a) * b`` (a gated MLP's backward needs both), where a registered kernel has
that variant. Autograd saves ``a`` and ``b``
(eager autograd of ``F.silu(a) * b`` keeps ``silu(a)`` too). Outputs are laid out like ``a`` (``b`` for
``grad_b``), as ``torch.empty_like`` lays them out.
"""

from __future__ import annotations

import torch

from accel.kernels.core import plans
from accel.kernels.core.slot import live_slot
from accel.kernels.core.state import STATE

from . import reference

__all__ = ["BACKWARD", "FORWARD", "WITH_PRODUCT", "backward_with_product", "swiglu", "swiglu_backward"]

FORWARD = "accel::swiglu"
BACKWARD = "accel::swiglu_backward"


@torch.library.custom_op(FORWARD, mutates_args=())
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` (:func:`.reference.swiglu`): ``a``, ``b`` of one shape, dtype and device."""
    reference.check(a, b)
    return reference.swiglu(a, b)


@swiglu.register_fake
def _(a, b):
    reference.check(a, b)
    return torch.empty_like(a)


@torch.library.custom_op(BACKWARD, mutates_args=())
def swiglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of :func:`swiglu` (:func:`.reference.swiglu_backward`)."""
    reference.check(a, b, BACKWARD)
    reference.check(grad_out, a, BACKWARD)
    return reference.swiglu_backward(grad_out, a, b)


@swiglu_backward.register_fake
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
    grad_a, grad_b = torch.ops.accel.swiglu_backward(grad_out, a, b)
    return (grad_a if need_a else None), (grad_b if need_b else None)


swiglu.register_autograd(_backward, setup_context=_setup_context)


#: An impl of ``accel::swiglu_backward`` -> its variant ``(grad_out, a, b) -> (grad_a, grad_b)`` that also writes
#: ``silu(a) * b`` over ``grad_out`` (filled by the impl modules that have one: the Triton impl's
#: :func:`.triton_impl.swiglu_backward_product`).
WITH_PRODUCT: dict = {}


def backward_with_product(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(grad_a, grad_b)`` of ``silu(a) * b``, with ``silu(a) * b`` written over ``grad_out``, where the first
    live override of ``accel::swiglu_backward`` at ``grad_out``'s dispatch key that takes ``(grad_out, a, b)``
    (its cond, the tuning table) has a :data:`WITH_PRODUCT` variant; else ``None`` and nothing is written (the
    caller computes the two separately). The call is booked and fail-safe as a routed call of the op: where
    the variant raises (a launch that fails writes nothing), the op's reference answers with ``grad_out`` as it
    was, and the third element says so.

    Args:
        grad_out: ``[..., N]``, the caller's own temporary (overwritten); ``a``, ``b``: as for
            :func:`swiglu_backward`.

    Returns:
        ``None`` where no such kernel takes the call (also with grad mode on: a backward recorded for double
        backward; under ``torch.compile`` or a ``torch.func`` transform; inside one of the op's impls; in verify
        mode, whose comparison would read the overwritten ``grad_out``); else
        ``(grad_a, grad_b, written)``, ``written`` ``False`` where the fail-safe answered instead.
    """
    if (not WITH_PRODUCT or STATE.verify or torch.is_grad_enabled() or torch.compiler.is_compiling()
            or type(grad_out) is not torch.Tensor or torch._C._functorch.peek_interpreter_stack() is not None):
        return None
    slot = live_slot(BACKWARD, grad_out.device.type)
    if slot is None or slot.reentered():
        return None
    args = (grad_out, a, b)
    sig = plans.signature(args)
    for ov in slot.live:
        fn = ov.take(args, {}, sig)
        if fn is None:
            continue
        # by identity: a user's impl need not be hashable
        variant = next((v for impl, v in WITH_PRODUCT.items() if ov.impl is impl), None)
        if fn is plans.FALLBACK or variant is None:
            return None
        written: list[bool] = []

        def run(g, x, y, variant=variant, written=written):
            out = variant(g, x, y)
            written.append(True)
            return out

        grad_a, grad_b = slot.run_guarded(ov, args, {}, run)
        return grad_a, grad_b, bool(written)
    return None
