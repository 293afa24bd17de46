"""The decoder-layer role: a pre-norm layer (``h = x + attn(norm1(x)); out = h + mlp(norm2(h))``: Llama, Mistral,
Qwen2/3, Gemma) whose residual adds run inside the RMSNorm that reads each sum (``accel::add_rms_norm_hf``): the
post-attention norm, and the next layer's input norm (or the model's final norm) through a hand-off
(:class:`.handoff.Handoffs`). Variant ``"sandwich"`` (Gemma 2 and 3: a norm before and after each branch,
``h = x + norm2(attn(norm1(x))); out = h + norm4(mlp(norm3(h)))``): the first add runs inside the
pre-feed-forward norm, the second inside the next layer's input norm. Variant ``"dropout"`` (Phi-3: each
branch's output through a residual dropout before its add): the pre-norm layer's fusions, the dropouts called
where the model calls them.

The layer's attention gets every argument of the layer's own call by name, defaults filled in, as Llama's code
passes them (whatever the release calls the cache: ``past_key_values`` or ``cache``); whether that computes what
the class's own ``forward`` computes is verified by behaviour (:mod:`.verify`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from accel.kernels.ops.add_rms_norm_hf import op as add_rms_norm_ops

from . import declines
from .code import innermost, subclass
from .families import known, original
from .guards import PLAIN_TENSORS, decision, instance_forward, outer_saved_tensor_hooks, transforms_active, weight
from .handoff import HANDOFFS, RECIPES, RecomputeNorm
from .norm import plain

__all__ = ["OP", "build", "instance_reason", "link_layers"]

OP = "accel::add_rms_norm_hf"
#: The submodules of a pre-norm layer, and nothing else.
_CHILDREN = frozenset({"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"})
#: ... of a sandwich-norm layer (Gemma 2 and 3), and of a pre-norm layer with a dropout on each branch (Phi-3).
_SANDWICH = _CHILDREN | {"pre_feedforward_layernorm", "post_feedforward_layernorm"}
_DROPOUT = _CHILDREN | {"resid_attn_dropout", "resid_mlp_dropout"}
_LAYOUTS = {None: _CHILDREN, "sandwich": _SANDWICH, "dropout": _DROPOUT}


def instance_reason(module: nn.Module) -> str | None:
    """Why this layer is not replaced although its class is verified, or ``None``."""
    k = known(original(type(module)))
    children = _LAYOUTS.get(k[2] if k is not None else None, _CHILDREN)
    extra = sorted(set(module._modules) - children)
    if extra or not children <= set(module._modules):
        return (f"its modules are not a pre-norm layer's ({', '.join(sorted(children))}): it holds "
                f"{', '.join(extra) or 'fewer'}")
    return instance_forward(module)


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)``, or ``(None, reason)`` where the class's forward does not call the pre-norm
    layer's modules or takes no ``hidden_states`` and ``**kwargs``."""
    forward = getattr(cls, "forward", None)
    inner = innermost(forward)
    code = getattr(inner, "__code__", None)
    children = _LAYOUTS.get(variant, _CHILDREN)
    if code is None or not children <= set(code.co_names):
        return None, "its forward does not call the layer's modules (" + ", ".join(sorted(children)) + ")"
    params = list(inspect.signature(inner).parameters.values())
    if (len(params) < 2 or params[1].name != "hidden_states"
            or not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)):
        return None, "its forward does not take hidden_states first and **kwargs"
    # what the layer's own call passes its attention where the caller leaves an argument out
    defaults = {p.name: p.default for p in params[2:]
                if p.kind is not inspect.Parameter.VAR_KEYWORD and p.default is not inspect.Parameter.empty}

    forward_accel = _layer_forward(forward, defaults, {p.name for p in params}, variant)
    forward_accel.__doc__ = forward.__doc__
    forward_accel.__signature__ = inspect.signature(forward)  # what transformers' callers read, not (*args)
    forward_accel.__qualname__ = f"Accel{cls.__name__}.forward"
    return subclass(cls, "decoder_layer", {"forward": forward_accel}), None


def _layer_forward(forward: Any, defaults: dict[str, Any], names: set[str], variant: str | None) -> Any:
    """The layer's forward on accel's fused adds, for its layout: ``None`` (pre-norm: the attention's add inside
    ``post_attention_layernorm``), ``"sandwich"`` (Gemma 2/3: each branch's output normed first, the attention's
    add inside ``pre_feedforward_layernorm``) or ``"dropout"`` (Phi-3: each branch's output through its residual
    dropout first, the same modules called in the same order, so the same random draws). The MLP's add goes to
    the next layer's input norm (:func:`_add_handing_off`). transformers 4.x's sandwich layers also take
    ``output_attentions`` and return a tuple, and 4.x's Gemma 3 layer picks its RoPE tables by the attention's
    kind (``position_embeddings_global`` / ``_local``): both are followed where the signature has them."""
    tuple_out = "output_attentions" in names
    local_global = {"position_embeddings_global", "position_embeddings_local"} <= names
    sandwich, dropout = variant == "sandwich", variant == "dropout"
    norm_name = "pre_feedforward_layernorm" if sandwich else "post_attention_layernorm"

    def forward_accel(self, hidden_states, *args, **kwargs):
        norm = self._modules.get(norm_name)
        if args or type(hidden_states) is not torch.Tensor or norm is None:
            return forward(self, hidden_states, *args, **kwargs)
        w_dtype = weight(norm).dtype
        if (declines.declined(self, OP, hidden_states, w_dtype)  # the adds' kernel declined this shape before
                or torch.compiler.is_compiling() or transforms_active() or outer_saved_tensor_hooks()
                or not plain(norm)):
            return forward(self, hidden_states, *args, **kwargs)
        attn_kwargs = {**defaults, **kwargs}
        if local_global:
            glob = attn_kwargs.pop("position_embeddings_global", None)
            loc = attn_kwargs.pop("position_embeddings_local", None)
            attn_kwargs["position_embeddings"] = loc if self.self_attn.is_sliding else glob
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, weights = self.self_attn(hidden_states=hidden_states, **attn_kwargs)
        if sandwich:
            hidden_states = self.post_attention_layernorm(hidden_states)
        elif dropout:
            hidden_states = self.resid_attn_dropout(hidden_states)
        fused = fused_add_norm(norm, hidden_states, residual)
        if fused:
            residual, hidden_states = fused
        else:
            if fused is False:  # the registry declined the add + norm of this shape: the layer's own code next time
                declines.remember(self, OP, residual, w_dtype)
            residual = residual + hidden_states
            hidden_states = norm(residual)
        hidden_states = self.mlp(hidden_states)
        if sandwich:
            hidden_states = self.post_feedforward_layernorm(hidden_states)
        elif dropout:
            hidden_states = self.resid_mlp_dropout(hidden_states)
        out = _add_handing_off(self, hidden_states, residual)
        if tuple_out:
            return (out, weights) if attn_kwargs.get("output_attentions") else (out,)
        return out

    return forward_accel


def link_layers(model: nn.Module, is_known) -> None:
    """Give each replaced decoder layer of a known base model (``layers`` then ``norm``, as Llama's forward runs
    them) the replaced RMSNorm that reads its output next: the next layer's input norm, the last layer the
    model's final norm (kept in a tuple, so that it is no submodule of the layer: ``state_dict`` and
    ``modules()`` are unchanged; ``copy.deepcopy`` of the model copies it as the sibling it is). ``is_known``:
    whether a module's class belongs to a known family."""
    for module in model.modules():
        layers = module._modules.get("layers")
        if not is_known(module) or not isinstance(layers, nn.ModuleList):
            continue
        nexts = [getattr(layer, "_modules", {}).get("input_layernorm") for layer in list(layers)[1:]]
        for layer, nxt in zip(layers, [*nexts, module._modules.get("norm")]):
            if getattr(type(layer), "accel_role", None) == "decoder_layer":
                if getattr(type(nxt), "accel_role", None) == "rms_norm":
                    vars(layer)["accel_next_norm"] = (nxt,)
                else:
                    vars(layer).pop("accel_next_norm", None)


def fused_add_norm(norm: nn.Module, h: torch.Tensor, residual: torch.Tensor,
                   hand_off: bool = False) -> tuple | bool | None:
    """``(residual + h, norm(residual + h))`` from accel's fused kernel where one takes the call, else ``False``
    where the registry declined it and ``None`` where the call is not one the kernel may take (a subclass tensor,
    mixed dtypes). ``hand_off``: the norm output is also offered to the norm's own call on the sum
    (:class:`.handoff.Handoffs`)."""
    w = weight(norm)
    eps = getattr(norm, type(norm).accel_eps_attr)
    unit = type(norm).accel_unit_offset
    # plain tensors only: a sharded weight (FSDP2's DTensor while its layer is not running) or a DTensor
    # activation keeps the model's own add and norm, which FSDP's hooks and DTensor's dispatch serve
    if (type(w) not in PLAIN_TENSORS or type(h) is not torch.Tensor or type(residual) is not torch.Tensor
            or h.shape != residual.shape or h.dtype != residual.dtype
            or not (type(norm).accel_mixed_ok or h.dtype == w.dtype)):
        return None
    answer = decision(OP, h, residual, w, eps, unit)
    if not answer:
        return False
    s, y = add_rms_norm_ops.add_rms_norm(h, residual, w, eps, unit, answer=answer)
    if torch.is_grad_enabled():
        RECIPES.keep(y, RecomputeNorm(eps, unit), (s, w), norm.__dict__.get("accel_norm_recompute", True))
    if hand_off:
        HANDOFFS.offer(s, w, eps, unit, y)
    return s, y


def _add_handing_off(layer: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The layer's output ``residual + h``; where the layer is linked to the norm that reads its output next
    (:func:`link_layers`) and accel's fused kernel takes the call, that norm's output is computed with the add and
    offered to the norm's own call."""
    link = layer.__dict__.get("accel_next_norm")
    nxt = link[0] if link else None
    if nxt is not None and not torch.is_inference_mode_enabled() and plain(nxt):
        fused = fused_add_norm(nxt, h, residual, hand_off=True)
        if fused:
            return fused[0]
    return residual + h
