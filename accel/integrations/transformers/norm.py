"""The RMSNorm role: Hugging Face's ``*RMSNorm`` (and T5's ``T5LayerNorm``) on ``accel::rms_norm_hf``.

A class is taken where its own ``forward``, run on small CPU tensors, gives ``accel::rms_norm_hf``'s reference
bit for bit (fp32 and bf16; mixed input/weight dtypes recorded separately): Llama's rounding (normalise in fp32,
cast to the input dtype, then x weight) or Gemma's (``1 + weight`` in fp32, one cast at the end).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from accel.kernels.ops.rms_norm_hf import op as rms_norm_ops
from accel.kernels.ops.rms_norm_hf import reference as rms_norm_reference

from . import declines
from .code import functions, subclass
from .guards import PLAIN_TENSORS, decision, global_hooks, hooked, instance_forward, weight
from .handoff import HANDOFFS, RECIPES, RecomputeNorm

__all__ = ["OP", "build", "instance_reason", "plain"]

OP = "accel::rms_norm_hf"


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)`` where ``cls``'s forward computes ``variant``'s rounding bit for bit, else
    ``(None, reason)``."""
    names = {n for f in functions(cls) for n in f.__code__.co_names}
    eps_attr = next((n for n in ("variance_epsilon", "eps") if n in names), None)
    forward = getattr(cls, "forward", None)
    if eps_attr is None or not callable(forward):
        return None, "its forward is not the RMSNorm accel verifies (no eps or variance_epsilon attribute)"
    unit = variant == "gemma"
    probe = cls.__new__(cls)
    nn.Module.__init__(probe)
    setattr(probe, eps_attr, 1e-6)
    gen = torch.Generator().manual_seed(0)
    same = {}
    for x_dtype, w_dtype in ((torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                             (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)):
        probe.weight = nn.Parameter(torch.randn(32, generator=gen).to(w_dtype), requires_grad=False)
        x = (torch.randn(4, 32, generator=gen) * 3).to(x_dtype)
        with torch.no_grad():
            theirs = forward(probe, x)
        ours = rms_norm_reference.rms_norm_hf(x, probe.weight, 1e-6, unit)[0]
        same[x_dtype, w_dtype] = theirs.dtype == ours.dtype and torch.equal(theirs, ours)
    if not (same[torch.float32, torch.float32] and same[torch.bfloat16, torch.bfloat16]):
        return None, (f"its forward does not compute {'Gemma' if unit else 'Llama'}'s rounding bit for bit "
                      f"(checked against accel::rms_norm_hf's reference)")
    mixed_ok = same[torch.bfloat16, torch.float32] and same[torch.float32, torch.bfloat16]

    def forward_accel(self, hidden_states, *args, **kwargs):
        w = weight(self)
        eps = getattr(self, eps_attr)
        if not torch.compiler.is_compiling() and not (args or kwargs):  # (no table guard when traced)
            y = HANDOFFS.take(hidden_states, w, eps, unit)  # the decoder layer before computed it with its add
            if y is not None:  # (its recipe kept where it was made)
                return y
        # a tensor-subclass weight (fake quantisation, FSDP2's sharded DTensor) or activation (sequence
        # parallelism's DTensor) computes its own way: the model's code, not the op on raw values
        if (args or kwargs or type(w) not in PLAIN_TENSORS or type(hidden_states) is not torch.Tensor
                or not (mixed_ok or hidden_states.dtype == w.dtype)):
            return forward(self, hidden_states, *args, **kwargs)  # the model's own code
        if declines.declined(self, OP, hidden_states, w.dtype):
            return forward(self, hidden_states)
        answer = decision(OP, hidden_states, w, eps, unit)
        if not answer:
            declines.remember(self, OP, hidden_states, w.dtype)
            return forward(self, hidden_states)  # the model's own code
        y = rms_norm_ops.rms_norm(hidden_states, w, eps, unit, answer=answer)
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            # how to make y again: a consumer that keeps this instead of y recomputes it in backward (where
            # norm_recompute allows; the attention's projections read the entry either way)
            RECIPES.keep(y, RecomputeNorm(eps, unit), (hidden_states, w),
                         self.__dict__.get("accel_norm_recompute", True))
        return y

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__signature__ = inspect.signature(forward)  # what transformers' callers read, not (*args)
    return subclass(cls, "rms_norm", {"forward": forward_accel, "accel_unit_offset": unit,
                                      "accel_eps_attr": eps_attr, "accel_mixed_ok": mixed_ok}), None


def instance_reason(module: nn.Module) -> str | None:
    """Why this norm is not replaced although its class is verified, or ``None``."""
    w = module.__dict__["_parameters"].get("weight", getattr(module, "weight", None))
    if not isinstance(w, torch.Tensor) or w.dim() != 1:
        return "its weight is not a 1-d tensor"
    return instance_forward(module)


def plain(norm: Any) -> bool:
    """Whether ``norm`` is a replaced RMSNorm whose call is its ``forward`` alone (no hook of any kind, no
    replaced ``forward``): then calling accel's fused add + norm with its weight and eps is what calling it on
    the sum does."""
    return getattr(type(norm), "accel_role", None) == "rms_norm" and not (hooked(norm) or global_hooks())
