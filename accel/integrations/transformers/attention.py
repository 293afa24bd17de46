"""The attention role: Hugging Face's attention on ``accel::rope`` (q and k in one call), its q/k/v projections
as one autograd node where they read a replaced RMSNorm's output, and, where verified, the whole block as one
autograd node (:func:`accel.integrations._attention.self_attention`: projections, RoPE, causal SDPA, output
projection).

The class's own ``forward`` runs, decorator chain and all (:func:`.code.rewrap`), with its module-level
``apply_rotary_pos_emb`` (a function, or on transformers 5.25+ the ``kernels`` package's module wrapping it)
replaced by accel's in a copy of its globals; the modeling module itself is untouched.
"""

from __future__ import annotations

import inspect
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from accel import _caches
from accel.integrations._attention import self_attention
from accel.integrations._shared_linears import shared_input_linears
from accel.kernels.core.autograd import decision_epoch
from accel.kernels.core.plans import signature
from accel.kernels.ops.rope import op as rope_ops
from accel.kernels.ops.rope import reference as rope_reference

from . import declines
from .code import RewrapError, innermost, rewrap, scope, subclass, with_globals
from .guards import (FORCED, accel_takes, device_type, instance_forward, live, outer_saved_tensor_hooks,
                     plain_linear, transforms_active)
from .handoff import RECIPES, RecomputedInput

__all__ = ["OP", "STATS", "build", "instance_reason"]

OP = "accel::rope"
_QKV = frozenset({"q_proj", "k_proj", "v_proj"})


class _Stats:
    """How often the one-node attention ran in this process (:mod:`.verify` asks whether it ran at all)."""

    one_node = 0


STATS = _Stats()


def instance_reason(module: nn.Module) -> str | None:
    """Why this attention is not replaced although its class is verified, or ``None``."""
    return instance_forward(module)


def rope_probe(fn: Any) -> bool:
    """Whether ``fn(q, k, cos, sin)`` is Hugging Face's rotate-half RoPE, bit for bit against the reference."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        q, k = torch.randn(2, 3, 5, 8, generator=gen).to(dtype), torch.randn(2, 1, 5, 8, generator=gen).to(dtype)
        cos, sin = torch.randn(2, 5, 8, generator=gen).to(dtype), torch.randn(2, 5, 8, generator=gen).to(dtype)
        with torch.no_grad():
            theirs = fn(q, k, cos, sin)
        ours = rope_reference.rope(q, k, cos, sin, 1)
        if not all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(theirs, ours)):
            return False
    return True


def partial_probe(fn: Any) -> bool:
    """Whether ``fn(q, k, cos, sin)`` rotates only the first ``cos.shape[-1]`` features of each head and passes the
    rest through (Phi-3's ``apply_rotary_pos_emb``, for ``partial_rotary_factor < 1``: Phi-4-mini), bit for bit
    against the reference on the rotated part; a function that cannot take such tables is not."""
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        q, k = torch.randn(2, 3, 5, 16, generator=gen).to(dtype), torch.randn(2, 1, 5, 16, generator=gen).to(dtype)
        cos, sin = torch.randn(2, 5, 8, generator=gen).to(dtype), torch.randn(2, 5, 8, generator=gen).to(dtype)
        try:
            with torch.no_grad():
                theirs = fn(q, k, cos, sin)
        except Exception:  # noqa: BLE001 - a function for whole heads only fails on partial tables
            return False
        qr, kr = rope_reference.rope(q[..., :8], k[..., :8], cos, sin, 1)
        ours = (torch.cat([qr, q[..., 8:]], -1), torch.cat([kr, k[..., 8:]], -1))
        if not all(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(theirs, ours)):
            return False
    return True


def _plain(*tensors: Any) -> bool:
    """Whether every argument is a plain tensor (a ``DTensor`` of tensor or sequence parallelism, or another
    subclass, runs the model's own code, which its dispatch serves)."""
    return all(type(t) is torch.Tensor for t in tensors)


def _rope_key(k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int) -> tuple:
    """What besides q's own layout a RoPE call's kernel decision reads (:func:`.declines.key`'s extras)."""
    return (k.shape, k.stride(), cos.shape, cos.stride(), cos.dtype, sin.stride(), unsqueeze_dim)


def rope_function(original: Any) -> Any:
    """``apply_rotary_pos_emb`` on ``accel::rope`` where it takes the arguments, else ``original``. Where
    ``original`` rotates a leading part of each head (:func:`partial_probe`) and the tables are that narrow, the
    op rotates that part (a view) and the rest is passed through, as the model's own code does."""

    memo = declines.Memo()  # this function's declined calls (declines.py)
    partial = partial_probe(original)

    def takes(q, k, cos, sin, unsqueeze_dim) -> bool:
        if memo.__dict__ and declines.declined(memo, OP, q, *_rope_key(k, cos, sin, unsqueeze_dim)):
            return False
        if not rope_reference.accepts(q, k, cos, sin, unsqueeze_dim):
            return False
        if not accel_takes(OP, q, k, cos, sin, unsqueeze_dim):
            declines.remember(memo, OP, q, *_rope_key(k, cos, sin, unsqueeze_dim))
            return False
        return True

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        unsqueeze_dim = kwargs.get("unsqueeze_dim", 1)
        if args or set(kwargs) - {"unsqueeze_dim"} or not _plain(q, k, cos, sin):
            return original(q, k, cos, sin, *args, **kwargs)  # the model's own code
        rot = cos.shape[-1] if cos.dim() == 3 else 0
        if partial and q.dim() == 4 and k.dim() == 4 and 0 < rot < q.shape[-1] == k.shape[-1]:
            qr, kr = q[..., :rot], k[..., :rot]  # the rotated part (views: unit stride on the features kept)
            if not takes(qr, kr, cos, sin, unsqueeze_dim):
                return original(q, k, cos, sin, *args, **kwargs)
            qe, ke = rope_ops.apply_rope(qr, kr, cos, sin, unsqueeze_dim)
            return torch.cat([qe, q[..., rot:]], dim=-1), torch.cat([ke, k[..., rot:]], dim=-1)
        if not takes(q, k, cos, sin, unsqueeze_dim):
            return original(q, k, cos, sin, *args, **kwargs)
        return rope_ops.apply_rope(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.__doc__ = getattr(original, "__doc__", None)
    apply_rotary_pos_emb.accel_original = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)``, or ``(None, reason)`` where the class's forward does not call a module-level
    ``apply_rotary_pos_emb`` that is Hugging Face's RoPE. An instance takes the one-node path only where
    ``patch`` set its ``accel_one_node`` (:mod:`.verify` saw the path run and match for its config kind)."""
    forward = getattr(cls, "forward", None)
    inner = innermost(forward)
    code = getattr(inner, "__code__", None)
    if code is None or "apply_rotary_pos_emb" not in code.co_names:
        return None, "its forward does not call a module-level apply_rotary_pos_emb"
    original = inner.__globals__.get("apply_rotary_pos_emb")
    if original is None or not rope_probe(original):
        return None, ("its module's apply_rotary_pos_emb is not Hugging Face's rotate-half RoPE (checked against "
                      "accel::rope's reference)")
    inner_copy = with_globals(inner, scope(inner.__globals__, {"apply_rotary_pos_emb": rope_function(original)}))
    try:
        forward_copy = rewrap(forward, inner_copy)
    except RewrapError as exc:
        return None, f"its forward's decorators cannot be kept around accel's copy ({exc})"
    shared = _QKV <= set(code.co_names)  # the forward calls q_proj, k_proj and v_proj

    def forward_accel(self, hidden_states, *args, **kwargs):
        if torch.compiler.is_compiling() or not torch.is_grad_enabled() or outer_saved_tensor_hooks():
            return forward_copy(self, hidden_states, *args, **kwargs)
        # only where the input is a replaced RMSNorm's output that accel's kernel computed do the projections
        # change (where no kernel takes a call the model's own code runs, bit for bit)
        entry = RECIPES.output(hidden_states)
        if entry is None:
            return forward_copy(self, hidden_states, *args, **kwargs)
        recipe = RECIPES.recipe(hidden_states, entry)
        if shared and not transforms_active():
            mods = self._modules
            projs = (mods.get("q_proj"), mods.get("k_proj"), mods.get("v_proj"))
            if None not in projs and plain_linear(hidden_states, *projs):
                if self.__dict__.get("accel_one_node") and not args:  # set by patch where verified
                    out = _one_node_attention(self, hidden_states, kwargs, projs, recipe)
                    if out is not None:
                        return out, None
                view = _SharedProjections(self, hidden_states, projs, recipe)
                return forward_copy(view, hidden_states, *args, **kwargs)
        if recipe is None:
            return forward_copy(self, hidden_states, *args, **kwargs)
        with torch.autograd.graph.saved_tensors_hooks(*RecomputedInput(hidden_states, recipe).hooks()):
            return forward_copy(self, hidden_states, *args, **kwargs)

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__signature__ = inspect.signature(forward)  # what transformers' callers read, not (*args)
    forward_accel.__qualname__ = f"Accel{cls.__name__}.forward"
    return subclass(cls, "attention", {"forward": forward_accel}), None


@_caches.detection_cache
def sdpa_functions() -> tuple | None:
    """``(ALL_ATTENTION_FUNCTIONS, sdpa_attention_forward, use_gqa_in_sdpa)`` of the installed transformers, or
    ``None`` where it has not all three."""
    try:
        from transformers.integrations import sdpa_attention
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        return None
    forward = getattr(sdpa_attention, "sdpa_attention_forward", None)
    gqa = getattr(sdpa_attention, "use_gqa_in_sdpa", None)
    return None if forward is None or gqa is None else (ALL_ATTENTION_FUNCTIONS, forward, gqa)


#: What a decoder layer passes its attention that transformers' SDPA path ignores without a cache or a mask
#: (``cache`` is ``past_key_values``' name from transformers 5.25 on).
_ATTENTION_KWARGS = frozenset({"position_embeddings", "attention_mask", "past_key_values", "cache", "position_ids",
                               "use_cache", "cache_position"})


def _one_node_attention(module: nn.Module, x: torch.Tensor, kwargs: dict[str, Any], projs: tuple,
                        recipe: tuple | None) -> torch.Tensor | None:
    """The attention's output from :func:`.._attention.self_attention` (one autograd node) where that is what its
    code computes here: the module holds only its four projections, the configured interface is transformers'
    ``sdpa_attention_forward``, no cache, no mask, no dropout, causal, more than one query, the output projection a
    plain linear, ``cos``/``sin`` plain tensors without grad, GQA done by SDPA itself where heads are shared
    (``use_gqa_in_sdpa``), and accel's RoPE kernel takes the shapes; else ``None`` (the model's code runs)."""
    if (x.dim() != 3 or x.shape[1] < 2 or not kwargs.keys() <= _ATTENTION_KWARGS
            or kwargs.get("attention_mask") is not None or kwargs.get("past_key_values") is not None
            or kwargs.get("cache") is not None):
        return None
    pe = kwargs.get("position_embeddings")
    if type(pe) is not tuple or len(pe) != 2:
        return None
    cos, sin = pe
    if type(cos) is not torch.Tensor or type(sin) is not torch.Tensor or cos.requires_grad or sin.requires_grad:
        return None
    attrs = module.__dict__
    mods = attrs["_modules"]
    o_proj = mods.get("o_proj")
    if ((attrs.get("training") and attrs.get("attention_dropout")) or not attrs.get("is_causal", True)
            or len(mods) != 4 or o_proj is None or not plain_linear(x, o_proj)):
        return None
    functions, sdpa_forward, use_gqa = sdpa_functions()
    config = attrs.get("config")
    if config is None or functions.get_interface(config._attn_implementation, None) is not sdpa_forward:
        return None
    head_dim, groups = attrs.get("head_dim"), attrs.get("num_key_value_groups", 1)
    weights = [p.__dict__["_parameters"] for p in (*projs, o_proj)]
    hq, hk = weights[0]["weight"].shape[0], weights[1]["weight"].shape[0]
    if type(head_dim) is not int or hq % head_dim or hk % head_dim or weights[2]["weight"].shape[0] != hk:
        return None
    if not _rope_takes(x, cos, sin, hq, hk, head_dim, groups, use_gqa):
        return None
    STATS.one_node += 1
    return self_attention(x, cos, sin, tuple(w["weight"] for w in weights), tuple(w["bias"] for w in weights),
                          head_dim=head_dim, scaling=attrs["scaling"], enable_gqa=groups > 1, recompute=recipe)


#: The one-node attention's positive decisions (:func:`_rope_takes`): per key, the registry's decision epoch.
_ROPE_TAKES: dict[tuple, tuple] = {}
#: How many positive decisions are kept at most (a model has a handful of attention shapes).
_ROPE_TAKES_MAX = 64


def _rope_takes(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, hq: int, hk: int, head_dim: int,
                groups: int, use_gqa: Callable) -> bool:
    """Whether the attention's q and k, as its code lays them out from ``x`` (``[B, H, S, D]`` views of the
    projections' ``[B, S, H * D]`` outputs), go to accel's RoPE kernel with ``cos`` and ``sin`` (and SDPA does
    GQA itself where heads are shared). Decided on stand-ins of q and k (allocated, never written) and kept
    per shape, dtype, device and ``cos``/``sin`` signature while the registry's decision epoch holds
    (:func:`accel.kernels.core.autograd.decision_epoch`): a kept answer spares each layer's call the stand-ins
    and the registry's lookup. Only a yes is kept, so every declined call is still counted."""
    slot = live(OP, device_type(x))
    if slot is None:
        return False
    b, s = x.shape[0], x.shape[1]
    pe = signature((cos, sin))
    key = (b, s, x.dtype, x.device, hq, hk, head_dim, groups, pe)
    epoch = None if pe is None or slot is FORCED else decision_epoch(slot)
    if epoch is not None and _ROPE_TAKES.get(key) == epoch:
        return True
    q_like = x.new_empty((b, s, hq)).view(b, s, -1, head_dim).transpose(1, 2)
    k_like = x.new_empty((b, s, hk)).view(b, s, -1, head_dim).transpose(1, 2)
    if groups > 1 and not use_gqa(None, k_like, k_like):
        return False  # the model's code repeats k and v per head group
    if not (rope_reference.accepts(q_like, k_like, cos, sin, 1) and accel_takes(OP, q_like, k_like, cos, sin, 1)):
        return False
    if epoch is not None:
        if len(_ROPE_TAKES) >= _ROPE_TAKES_MAX:
            _ROPE_TAKES.clear()
        _ROPE_TAKES[key] = epoch
    return True


class _SharedProjections:
    """The attention module as its own forward code sees it during one call, its ``q_proj``, ``k_proj`` and
    ``v_proj`` answered by one :func:`.._shared_linears.shared_input_linears` node: the first of them called on
    the attention's input runs all three (their input gradient is then summed inside the backward's GEMMs, and
    the input, an RMSNorm's output, is recomputed from the norm's where ``recipe`` says how); each then
    returns its own output, once. Any other call (another tensor, a second call) runs the module itself.
    Every other attribute is the module's: read and written through to it."""

    __slots__ = ("_accel_module", "_accel_answers", "q_proj", "k_proj", "v_proj")

    def __init__(self, module: nn.Module, x: torch.Tensor, projs: tuple, recipe: tuple | None) -> None:
        object.__setattr__(self, "_accel_module", module)
        answers = _Answers(x, projs, recipe)
        object.__setattr__(self, "_accel_answers", answers)
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            object.__setattr__(self, name, functools.partial(answers, i))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._accel_module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._accel_module, name, value)


class _Answers:
    __slots__ = ("outs", "projs", "recipe", "taken", "x")

    def __init__(self, x: torch.Tensor, projs: tuple, recipe: tuple | None) -> None:
        self.x, self.projs, self.recipe, self.outs, self.taken = x, projs, recipe, None, [False, False, False]

    def __call__(self, index: int, t: torch.Tensor) -> torch.Tensor:
        if t is not self.x or self.taken[index]:
            return self.projs[index](t)
        if self.outs is None:
            self.outs = shared_input_linears(t, [p.weight for p in self.projs], [p.bias for p in self.projs],
                                             recompute=self.recipe)
        self.taken[index] = True
        return self.outs[index]
