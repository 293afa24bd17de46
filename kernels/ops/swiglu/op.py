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

import functools
from typing import Any

import torch

from accel.kernels.core import plans
from accel.kernels.core.slot import live_slot
from accel.kernels.core.state import STATE

from . import reference

__all__ = ["BACKWARD", "FORWARD", "WITH_PRODUCT", "backward_with_product", "gated_ops", "swiglu", "swiglu_backward"]

FORWARD = "accel::swiglu"
BACKWARD = "accel::swiglu_backward"


def gated_ops(forward: str, backward: str, ref: Any) -> tuple[Any, Any]:
    """Define the custom ops of one gated activation, ``forward(a, b) -> y`` and ``backward(grad_out, a, b) ->
    (grad_a, grad_b)``, with fake kernels and autograd (``a`` and ``b`` saved): their default kernels are ``ref``'s
    (a reference module with ``check``, the forward and the backward, named after the ops: ``ref.swiglu``,
    ``ref.swiglu_backward``). SwiGLU's here; GeGLU's (:mod:`accel.kernels.ops.geglu.op`) the same way."""
    name = forward.split("::")[1]
    fwd_ref, bwd_ref = getattr(ref, name), getattr(ref, f"{name}_backward")

    @torch.library.custom_op(forward, mutates_args=())
    def fwd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ref.check(a, b, forward)
        return fwd_ref(a, b)

    @fwd.register_fake
    def _(a, b):
        ref.check(a, b, forward)
        return torch.empty_like(a)

    @torch.library.custom_op(backward, mutates_args=())
    def bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ref.check(a, b, backward)
        ref.check(grad_out, a, backward)
        return bwd_ref(grad_out, a, b)

    @bwd.register_fake
    def _(grad_out, a, b):
        ref.check(a, b, backward)
        ref.check(grad_out, a, backward)
        return torch.empty_like(a), torch.empty_like(b)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def differentiate(ctx, grad_out):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        if not (need_a or need_b):
            return None, None
        grad_a, grad_b = bwd(grad_out, a, b)
        return (grad_a if need_a else None), (grad_b if need_b else None)

    fwd.register_autograd(differentiate, setup_context=setup_context)
    return fwd, bwd


#: ``silu(a) * b`` (:func:`.reference.swiglu`) and its gradients (:func:`.reference.swiglu_backward`): ``a``, ``b``
#: of one shape, dtype and device.
swiglu, swiglu_backward = gated_ops(FORWARD, BACKWARD, reference)


#: An impl of ``accel::swiglu_backward`` -> ``(variant, forward)``: ``variant(grad_out, a, b, consume=False) ->
#: (grad_a, grad_b)`` also writes ``silu(a) * b`` over ``grad_out``, with the arithmetic of ``forward``, an impl of
#: ``accel::swiglu`` (filled by the impl modules that have one: the Triton impl's
#: :func:`.triton_impl.swiglu_backward_product`, whose product is :func:`.triton_impl.swiglu`'s bits);
#: ``consume=True`` (only for contiguous ``a`` and ``b``) writes the two gradients over ``a`` and ``b``.
WITH_PRODUCT: dict = {}


def _first_taking(qualname: str, device_type: str, args: tuple) -> tuple:
    """``(slot, override, planned function)`` of the first live override of ``qualname`` at ``device_type``'s
    key that takes ``args`` (the router's choice), or ``(slot, None, None)``; ``slot`` ``None`` where none is
    live or a kernel registered above accel's router answers the key instead."""
    slot = live_slot(qualname, device_type)
    if slot is None or slot.reentered():
        return None, None, None
    # a router that is called without the dispatcher anyway (accel's own ops: no other library registers a
    # kernel above it) needs no look at the key's kernel, a torch.library.get_kernel per call
    shadowed = getattr(slot.path, "shadowed_by", None) if slot.direct is None else None
    if shadowed is not None and shadowed(slot) is not None:
        return None, None, None
    sig = plans.signature(args)
    for ov in slot.live:
        fn = ov.take(args, {}, sig)
        if fn is not None:
            return slot, ov, fn
    return slot, None, None


def backward_with_product(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, consume: bool = False
                          ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, bool]:
    """``(grads, written)``: ``grads`` is ``(grad_a, grad_b)`` of ``silu(a) * b`` with ``silu(a) * b`` written
    over ``grad_out``, where the override of ``accel::swiglu_backward`` that the router would pick for
    ``(grad_out, a, b)`` (its cond, the tuning table) has a :data:`WITH_PRODUCT` variant and the override of
    ``accel::swiglu`` it would pick for ``(a, b)`` is that variant's forward (so the product has the bits
    ``accel::swiglu`` gives); else ``None`` and the caller computes the two separately. ``written`` says
    whether ``grad_out`` may have been written: ``True`` also where the variant ran and failed (it raised or
    its result failed the output check: booked and warned as a failed call of the override, whose shapes it
    is denied from then on), so the caller computes ``grad_out`` again.

    Args:
        grad_out: ``[..., N]``, contiguous: the caller's own temporary (overwritten); ``a``, ``b``: as for
            :func:`swiglu_backward`.
        consume: where ``a`` and ``b`` are contiguous, the gradients are written over them (the caller's own,
            dead after: no two new ``[..., N]`` buffers) and ``grads`` is ``(a, b)``; ``written`` then also
            means that ``a`` and ``b`` may have been written.

    ``None`` also with grad mode on (a backward recorded for double backward), under ``torch.compile``, a
    ``torch.func`` transform or a ``TorchDispatchMode`` (which would not see the op), inside one of the op's
    impls, and in verify mode (whose comparison would read the overwritten ``grad_out``).
    """
    if (not WITH_PRODUCT or STATE.verify or torch.is_grad_enabled() or torch.compiler.is_compiling()
            or type(grad_out) is not torch.Tensor or not grad_out.is_contiguous()
            or torch._C._functorch.peek_interpreter_stack() is not None
            or torch._C._len_torch_dispatch_stack() > 0):
        return None, False
    device_type = grad_out.device.type
    slot, ov, fn = _first_taking(BACKWARD, device_type, (grad_out, a, b))
    if ov is None or fn is plans.FALLBACK:
        return None, False
    # by identity: a user's impl need not be hashable
    entry = next((e for impl, e in WITH_PRODUCT.items() if ov.impl is impl), None)
    if entry is None:
        return None, False
    variant, forward = entry
    _, fwd_ov, fwd_fn = _first_taking(FORWARD, device_type, (a, b))
    if fwd_ov is None or fwd_ov.impl is not forward or fwd_fn is plans.FALLBACK:
        return None, False
    inside = slot.inside
    inside.on = True
    try:
        if consume and a.is_contiguous() and b.is_contiguous():
            return ov.run_in_place((grad_out, a, b), functools.partial(variant, consume=True)), True
        return ov.run_in_place((grad_out, a, b), variant), True
    finally:
        inside.on = False
