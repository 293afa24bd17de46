"""The MLP role: Hugging Face's gated MLPs (``down(act(gate(x)) * up(x))``, or Phi-3's ``gate_up_proj`` halves)
on ``accel::swiglu`` where the activation computes SiLU, and Gemma's (variant ``"geglu"``) on ``accel::geglu``
where it computes GELU's tanh approximation.

Where all three projections are plain ``nn.Linear`` and a kernel serves the SwiGLU, the whole MLP is one
autograd node (:func:`accel.kernels.ops.swiglu.mlp.swiglu_mlp`); with a fused ``gate_up_proj`` the down
projection alone (:func:`accel.kernels.ops.swiglu.linear.swiglu_linear`). GeGLU runs as the fused activation
between the model's own projections (``mlp_recompute`` does not apply to it).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accel.kernels.ops.geglu import op as geglu_ops
from accel.kernels.ops.swiglu import op as swiglu_ops
from accel.kernels.ops.swiglu.linear import swiglu_linear
from accel.kernels.ops.swiglu.mlp import swiglu_mlp

from . import declines
from .code import innermost, subclass
from .families import known, original
from .guards import (accel_takes, device_type, instance_forward, live, outer_saved_tensor_hooks, plain_linear,
                     transforms_active, weight)
from .handoff import RECIPES

__all__ = ["GEGLU_OP", "OP", "build", "instance_reason", "is_gelu_tanh", "is_silu"]

OP = "accel::swiglu"
GEGLU_OP = "accel::geglu"

#: The submodules (and the one method) each layout's forward uses.
_NAMES = {"split": {"down_proj", "act_fn", "gate_proj", "up_proj"},
          "fused": {"gate_up_proj", "chunk", "activation_fn", "down_proj"},
          "geglu": {"down_proj", "act_fn", "gate_proj", "up_proj"}}


def _gelu_tanh(t: torch.Tensor) -> torch.Tensor:
    return F.gelu(t, approximate="tanh")


class _Probe:
    """Whether an activation module computes ``fn`` bit for bit, checked once per instance on fp32 and bf16: a
    class may compute different functions per instance (transformers' ``GELUTanh`` is ``F.gelu(approximate=
    "tanh")`` or, with ``use_gelu_tanh_python=True``, a formula one bf16 step away from it; ``nn.GELU`` by its
    ``approximate``), so only the classes in ``known`` are taken on their class alone. The answer is kept on the
    instance (a plain attribute, ``attr``: ``torch.compile`` guards on it as on any module attribute)."""

    def __init__(self, fn: Any, known: set[type], attr: str) -> None:
        self.fn, self.known, self.attr = fn, frozenset(known), attr

    def __call__(self, act: Any) -> bool:
        if type(act) in self.known:
            return True
        if not isinstance(act, nn.Module):
            return False
        same = act.__dict__.get(self.attr)
        if same is None:
            t = torch.linspace(-8.0, 8.0, 97)
            try:
                with torch.no_grad():
                    same = all(torch.equal(act(t.to(dt)), self.fn(t.to(dt)))
                               for dt in (torch.float32, torch.bfloat16))
            except Exception:  # noqa: BLE001 - an activation that cannot run on a CPU vector is not taken for fn
                same = False
            act.__dict__[self.attr] = same
        return same


#: ``is_silu(act)``: whether ``act`` (an activation module) computes ``F.silu``.
is_silu = _Probe(F.silu, {nn.SiLU}, "_accel_is_silu")
#: ``is_gelu_tanh(act)``: whether ``act`` computes ``F.gelu(approximate="tanh")`` (Gemma's ``gelu_pytorch_tanh``).
is_gelu_tanh = _Probe(_gelu_tanh, set(), "_accel_is_gelu_tanh")


def instance_reason(module: nn.Module) -> str | None:
    """Why this MLP is not replaced although its class is verified, or ``None``."""
    k = known(original(type(module)))
    act = getattr(module, "act_fn", getattr(module, "activation_fn", None))
    if k is not None and k[2] == "geglu":
        if not is_gelu_tanh(act):
            return (f"activation {type(act).__name__} does not compute F.gelu(approximate='tanh') bit for bit: the "
                    f"gated MLP is not GeGLU")
    elif not is_silu(act):
        return f"activation {type(act).__name__} does not compute F.silu bit for bit: the gated MLP is not SwiGLU"
    return instance_forward(module)


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)``, or ``(None, reason)`` where the class's forward does not call the gated MLP's
    modules (the subclass is still verified by behaviour before any replacement: :mod:`.verify`)."""
    forward = getattr(cls, "forward", None)
    inner = innermost(forward)
    code = getattr(inner, "__code__", None)
    if code is None or not _NAMES[variant] <= set(code.co_names):
        return None, "its forward is not the gated MLP accel implements (it does not use " + \
            ", ".join(sorted(_NAMES[variant])) + ")"
    def down(self, gate, up):
        proj = self.down_proj
        if self.__dict__.get("accel_mlp_recompute", True) and plain_linear(gate, proj):
            return swiglu_linear(gate, up, proj.weight, proj.bias)  # the product is recomputed, not saved
        return proj(swiglu_ops.swiglu(gate, up))

    def fused(self, x, g, u, d) -> bool:
        """Whether the whole MLP runs as one node (:func:`swiglu_mlp`): recompute on, three plain linears, eager,
        no transform, and an accel kernel takes the SwiGLU of the gate F.linear will give (a stand-in of its
        shape, dtype and device: allocated, never written)."""
        if (not self.__dict__.get("accel_mlp_recompute", True) or torch.compiler.is_compiling()
                or transforms_active() or live(OP, device_type(x)) is None
                or outer_saved_tensor_hooks() or not plain_linear(x, g, u, d)):
            return False
        like = x.new_empty((*x.shape[:-1], g.out_features))
        return accel_takes(OP, like, like)

    if variant == "geglu":
        def forward_accel(self, x, *args, **kwargs):
            g = self._modules.get("gate_proj")
            if (args or kwargs or type(x) is not torch.Tensor or g is None
                    or not is_gelu_tanh(self._modules.get("act_fn"))):
                return forward(self, x, *args, **kwargs)
            g_dtype = weight(g).dtype
            if declines.declined(self, GEGLU_OP, x, g_dtype):  # the GeGLU kernel declined this shape before
                return forward(self, x)
            gate = self.gate_proj(x)
            if type(gate) is not torch.Tensor:
                return self.down_proj(self.act_fn(gate) * self.up_proj(x))  # the model's own code
            if not accel_takes(GEGLU_OP, gate, gate):  # (up: gate's shape and dtype)
                declines.remember(self, GEGLU_OP, x, g_dtype)
                return self.down_proj(self.act_fn(gate) * self.up_proj(x))
            up = self.up_proj(x)
            if gate.shape != up.shape or gate.dtype != up.dtype or type(up) is not torch.Tensor:
                return self.down_proj(self.act_fn(gate) * up)
            return self.down_proj(geglu_ops.geglu(gate, up))
    elif variant == "split":
        def forward_accel(self, x, *args, **kwargs):
            mods = self._modules
            if args or kwargs or not is_silu(mods.get("act_fn")):  # (a set lookup once the class is known)
                return forward(self, x, *args, **kwargs)
            g, u, d = mods.get("gate_proj"), mods.get("up_proj"), mods.get("down_proj")
            if type(x) is not torch.Tensor or g is None:
                return forward(self, x)
            g_dtype = weight(g).dtype  # (the gate's dtype: with autocast's, in the key, what the decision reads)
            if declines.declined(self, OP, x, g_dtype):  # the SwiGLU kernel declined this shape before
                return forward(self, x)
            if fused(self, x, g, u, d):
                gp, up, dp = g._parameters, u._parameters, d._parameters
                return swiglu_mlp(x, gp["weight"], up["weight"], dp["weight"], gp["bias"], up["bias"], dp["bias"],
                                  recompute=RECIPES.recipe(x))
            gate = self.gate_proj(x)
            if type(gate) is not torch.Tensor:
                return self.down_proj(self.act_fn(gate) * self.up_proj(x))  # the model's own code
            if not accel_takes(OP, gate, gate):  # (up: gate's shape and dtype)
                declines.remember(self, OP, x, g_dtype)
                return self.down_proj(self.act_fn(gate) * self.up_proj(x))
            up = self.up_proj(x)
            if gate.shape != up.shape or gate.dtype != up.dtype or type(up) is not torch.Tensor:
                return self.down_proj(self.act_fn(gate) * up)
            return down(self, gate, up)
    else:
        def forward_accel(self, hidden_states, *args, **kwargs):
            if args or kwargs or not is_silu(self.activation_fn):
                return forward(self, hidden_states, *args, **kwargs)
            up_states = self.gate_up_proj(hidden_states)
            gate, up = up_states.chunk(2, dim=-1)
            if gate.shape != up.shape or type(gate) is not torch.Tensor or not accel_takes(OP, gate, up):
                return self.down_proj(up * self.activation_fn(gate))  # the model's own code
            return down(self, gate, up)

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__signature__ = inspect.signature(forward)  # what transformers' callers read, not (*args)
    namespace = {"forward": forward_accel}
    if variant == "geglu":
        namespace["accel_op"] = GEGLU_OP
    return subclass(cls, "mlp", namespace), None
