"""Hugging Face ``transformers`` models on accel's ops: per instance, parameters and numerics kept.

Hugging Face's decoder models compute RMSNorm from primitives (19 ATen calls per norm), RoPE and SwiGLU as
separate elementwise ops, and the loss from materialised fp32 logits; none of it reaches an accel kernel.
:func:`patch` maps those modules onto accel's ops, which route through :mod:`accel.kernels` per vendor:

=====================  ===============================================  ==========================================
module                 accel op                                         rounding / condition
=====================  ===============================================  ==========================================
``*RMSNorm`` (Llama,   ``accel::rms_norm_hf`` (``unit_offset=False``)   fp32 normalise, cast to the input dtype,
Mistral, Qwen2/3,                                                       then x weight (the module's own)
Phi-3), T5LayerNorm
``Gemma*RMSNorm``      ``accel::rms_norm_hf`` (``unit_offset=True``)    ``1 + weight``, fp32, one cast at the end
``*MLP`` (gate/up)     ``accel::swiglu``                                only where the activation is SiLU
``*DecoderLayer``      ``accel::add_rms_norm_hf``: each residual add    the model's add, then its norm's rounding;
(Llama's code:         with the RMSNorm that reads the sum (the next    where the layer's norms are replaced and
Mistral, Qwen2/3,      layer's input norm, the model's final norm,      unhooked (else the layer's own code)
Gemma)                 the layer's post-attention norm)
``*Attention``         ``accel::rope`` (q and k in one call)            HF's ``apply_rotary_pos_emb`` semantics
(Llama's code: Llama,  and the whole block as one autograd node         in a training call with SDPA, no cache,
Gemma)                 (:mod:`._attention`)                             mask or dropout (else the copied code)
``*ForCausalLM``,      accel's chunked ``linear_cross_entropy`` (the    when ``labels`` are given; logits are then
``GPT2LMHeadModel``    logits are never stored; the loss in fp32)       ``None`` unless ``return_logits=True``
``nn.LayerNorm``       ``aten::native_layer_norm`` (no patch needed)    GPT-2, BERT: already routes
=====================  ===============================================  ==========================================

How a module is replaced: its class becomes an accel subclass of its own class (``module.__class__ =
AccelLlamaRMSNorm``, a class named like the original: transformers reads class names), so the module object, its ``Parameter`` objects, buffers, hooks, config and
``state_dict`` keys stay the same (optimizers and FSDP wrapping are unaffected); :func:`unpatch` sets the
class back. Nothing global changes: no modeling-module function or class is rebound. The attention's
subclass runs a copy of the class's own ``forward`` code whose global ``apply_rotary_pos_emb`` is accel's
(the copy has its own globals dict; the modeling module's is untouched); the causal LM's computes the loss
from the last hidden states. A replacement is made only where it is verified: each RMSNorm class and each
``apply_rotary_pos_emb`` is run once on small CPU tensors against accel's reference (bit for bit, fp32 and
bf16), the MLP's and the LM's ``forward`` must reference only the names of the pattern accel implements,
and the activation must compute SiLU. Everything else is left as it is, and :func:`report` says why.

:func:`enable` registers the same classes with transformers' own hook (``transformers.monkey_patching``,
transformers 5.17+), so ``from_pretrained`` / ``from_config`` build models whose norms, MLPs and attention
are accel's; the causal-LM class itself cannot be reached that way (transformers instantiates the class
``from_pretrained`` is called on before its hook applies), so the loss needs :func:`patch` on the built
model. :func:`disable` undoes :func:`enable`.

A replaced module calls its accel op only where an accel kernel takes the call (:func:`accel_takes`: the
registry's own decision, its ``cond``, size floor and tuning table); everywhere else (on CPU, without
``accel.kernels.install()``, below a kernel's size floor, for a dtype no kernel takes) it runs the model's own
code, bit for bit what the unpatched model runs (never an op's eager reference, which is slower than Hugging
Face's code: a custom op's dispatch and autograd cost more). The causal LM's loss then comes from its own
logits and ``loss_function`` (``logits`` are returned as always). With kernels installed on a GPU the same
calls run the fused kernels, and the loss is fp32 as Hugging Face's.

Example:
    >>> import torch, transformers
    >>> from accel.integrations import transformers as hf
    >>> cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                                num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    >>> model = hf.patch(transformers.LlamaForCausalLM(cfg))
    >>> hf.report(model).replaced["LlamaRMSNorm"]
    {'op': 'accel::rms_norm_hf', 'count': 5}
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _nn_module

if TYPE_CHECKING:
    # bound by import here as in Hugging Face's modeling modules: the compiler emits a call on an imported name
    # differently (LOAD_ATTR, not LOAD_METHOD), and _llama_attention_forward's bytecode must be theirs
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from accel import _caches, _compat
from accel._once import warn_once
from accel.errors import FeatureUnavailableError, IntegrationWarning
from accel.kernels.core.autograd import decide, decision_epoch
from accel.kernels.core.plans import signature
from accel.kernels.core.slot import dispatch_key, live_slot
from accel.kernels.ops.add_rms_norm_hf import op as add_rms_norm_ops
from accel.kernels.ops.rms_norm_hf import op as rms_norm_ops
from accel.kernels.ops.rms_norm_hf import reference as rms_norm_reference
from accel.kernels.ops.rope import op as rope_ops
from accel.kernels.ops.rope import reference as rope_reference
from accel.kernels.ops.swiglu import op as swiglu_ops
from accel.kernels.ops.swiglu.linear import swiglu_linear
from accel.kernels.ops.swiglu.mlp import swiglu_mlp
from accel.integrations._attention import self_attention
from accel.integrations._shared_linears import shared_input_linears

__all__ = ["FAMILIES", "ROUTES", "PatchReport", "accel_takes", "disable", "enable", "enabled", "patch", "report",
           "unpatch"]

#: Packages this module's docstring examples need (tests/cli/test_docs.py skips them without it).
__doctest_requires__ = ("transformers",)

RMS_NORM_OP, SWIGLU_OP, ROPE_OP, LCE_OP = ("accel::rms_norm_hf", "accel::swiglu", "accel::rope",
                                           "accel::linear_cross_entropy")
ADD_RMS_NORM_OP = "accel::add_rms_norm_hf"
#: Ops per role, as the report names them.
OPS = {"rms_norm": "accel::rms_norm_hf", "mlp": "accel::swiglu", "attention": "accel::rope",
       "causal_lm": "accel.nn.functional.linear_cross_entropy", "decoder_layer": "accel::add_rms_norm_hf"}
ROLES = tuple(OPS)


def _decoder(prefix: str, family: str, norm: str = "llama", mlp: str = "split",
             lm: str | None = None) -> tuple[str, dict[str, tuple[str, str | None]]]:
    module = f"transformers.models.{family}.modeling_{family}"
    return module, {f"{prefix}RMSNorm": ("rms_norm", norm), f"{prefix}MLP": ("mlp", mlp),
                    f"{prefix}Attention": ("attention", None), f"{prefix}DecoderLayer": ("decoder_layer", None),
                    lm or f"{prefix}ForCausalLM": ("causal_lm", None)}


#: Family -> (modeling module, {class name: (role, variant)}). Variants: the RMSNorm rounding (``"llama"``:
#: normalise in fp32, cast, x weight; ``"gemma"``: ``1 + weight`` in fp32, one cast), the MLP layout
#: (``"split"``: ``gate_proj``/``up_proj``; ``"fused"``: Phi-3's ``gate_up_proj`` halves). Each entry is
#: still verified before a replacement (module docstring).
FAMILIES: dict[str, tuple[str, dict[str, tuple[str, str | None]]]] = {
    "llama": _decoder("Llama", "llama"),
    "mistral": _decoder("Mistral", "mistral"),
    "qwen2": _decoder("Qwen2", "qwen2"),
    "qwen3": _decoder("Qwen3", "qwen3"),
    "gemma": _decoder("Gemma", "gemma", norm="gemma"),
    "gemma2": _decoder("Gemma2", "gemma2", norm="gemma"),
    "gemma3": _decoder("Gemma3", "gemma3", norm="gemma"),
    "phi3": _decoder("Phi3", "phi3", mlp="fused"),
    "gpt2": ("transformers.models.gpt2.modeling_gpt2", {"GPT2LMHeadModel": ("causal_lm", None)}),
    "bert": ("transformers.models.bert.modeling_bert", {}),
    "t5": ("transformers.models.t5.modeling_t5", {"T5LayerNorm": ("rms_norm", "llama")}),
}

#: Modules that reach accel's kernels through ATen without a patch: class -> the ATen op it calls.
ROUTES: dict[type, str] = {nn.LayerNorm: "aten::native_layer_norm", nn.RMSNorm: "aten::_fused_rms_norm"}

_BY_CLASS: dict[tuple[str, str], tuple[str, str, str | None]] = {
    (module, name): (family, role, variant)
    for family, (module, classes) in FAMILIES.items() for name, (role, variant) in classes.items()}
_MODULES = {module: family for family, (module, _) in FAMILIES.items()}

_LOCK = threading.RLock()
#: original class -> (accel subclass or None, reason it is None).
_VERDICTS: dict[type, tuple[type | None, str | None]] = {}
#: Activation classes verified to compute SiLU (the MLP replacement checks the instance's per call).
_SILU_TYPES: set[type] = {nn.SiLU}
_NOT_SILU: set[type] = set()
#: transformers' patch-mapping keys :func:`enable` registered -> the accel class.
_ENABLED: dict[str, type] = {}
#: Keys of the warnings already said (:func:`accel._once.warn_once`; once per process per key).
_SAID: set[str] = set()


# ------------------------------------------------------------------------------------------ the report
@dataclasses.dataclass
class PatchReport:
    """What :func:`patch` replaced in a model, what reaches accel without a patch, what it left and why.

    Attributes:
        model: the model's class name (its original class for a patched one).
        families: the model families found (``["llama"]``); empty for a model accel does not know.
        replaced: original class name -> ``{"op": accel op, "count": modules}``.
        routes: class name -> ``{"op": ATen op, "count": modules}`` for modules that already reach accel's
            kernels through ATen (``nn.LayerNorm``: GPT-2, BERT).
        left: class name -> ``{"count": modules, "reason": why it is not replaced}`` for modules of a
            known family that are not (or are not yet: ``"not patched"``).
    """

    model: str
    families: list[str]
    replaced: dict[str, dict[str, Any]]
    routes: dict[str, dict[str, Any]]
    left: dict[str, dict[str, Any]]

    @property
    def known(self) -> bool:
        """Whether the model has a module of a family accel knows (else :func:`patch` leaves it as it is)."""
        return bool(self.families)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``json.dumps(report.as_dict())``)."""
        return {"model": self.model, "known": self.known, "families": list(self.families),
                "replaced": self.replaced, "routes": self.routes, "left": self.left}

    def __str__(self) -> str:
        if not self.known:
            return (f"{self.model}: no module of a model family accel knows ({', '.join(FAMILIES)}); left as it "
                    f"is")
        lines = [f"{self.model} ({', '.join(self.families)}):"]
        lines += [f"  {name} x{e['count']} -> {e['op']}" for name, e in self.replaced.items()]
        lines += [f"  {name} x{e['count']} routes through {e['op']} already" for name, e in self.routes.items()]
        lines += [f"  {name} x{e['count']} left: {e['reason']}" for name, e in self.left.items()]
        return "\n".join(lines)


def _known(cls: type) -> tuple[str, str, str | None] | None:
    """``(family, role, variant)`` of a transformers class accel covers, else ``None``."""
    return _BY_CLASS.get((cls.__module__, cls.__name__))


def _family_of(cls: type) -> str | None:
    module = cls.__module__
    return _MODULES.get(module)


def _original(cls: type) -> type:
    return cls.__dict__.get("accel_original", cls)


def report(model: nn.Module) -> PatchReport:
    """What :func:`patch` did (or would do) to ``model``, read from the model itself.

    Args:
        model: any ``nn.Module``; a Hugging Face model or not.

    Returns:
        A :class:`PatchReport` (``.as_dict()`` for JSON). Modules of known families that are not replaced are
        listed under ``left`` with the reason (``"not patched"`` where :func:`patch` would replace them).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    _check_module(model, "report")
    families: list[str] = []
    replaced: dict[str, dict[str, Any]] = {}
    routes: dict[str, dict[str, Any]] = {}
    left: dict[str, dict[str, Any]] = {}
    for module in model.modules():
        cls = type(module)
        original = _original(cls)
        family = _family_of(original)
        if family is not None and family not in families:
            families.append(family)
        if original is not cls:
            entry = replaced.setdefault(original.__name__, {"op": cls.accel_op, "count": 0})
            entry["count"] += 1
            continue
        route = next((op for base, op in ROUTES.items() if isinstance(module, base)), None)
        if route is not None:
            entry = routes.setdefault(cls.__name__, {"op": route, "count": 0})
            entry["count"] += 1
            continue
        known = _known(cls)
        if known is None:
            continue
        _, role, variant = known
        accel_cls, why = _verdict(cls, role, variant)
        if accel_cls is not None:
            why = _instance_reason(module, role) or "not patched"
        entry = left.setdefault(cls.__name__, {"count": 0, "reason": why})
        entry["count"] += 1
    return PatchReport(_original(type(model)).__name__, families, replaced, routes, left)


# --------------------------------------------------------------------------------------- patch / unpatch
def _check_module(model: Any, fn: str) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"accel.integrations.transformers.{fn}: model is {type(model).__name__}, not an nn.Module. "
                        f"Pass the model object (e.g. transformers.AutoModelForCausalLM.from_config(config)).")


def patch(model: nn.Module, *, norms: bool = True, mlp: bool = True, rope: bool = True, loss: bool = True,
          loss_options: Any = None, mlp_recompute: bool | None = None,
          norm_recompute: bool | None = None) -> nn.Module:
    """Make ``model``'s known modules use accel's ops, in place; returns ``model``.

    Each module accel covers and verifies (module docstring) gets an accel subclass of its own class as
    its class: the same object, the same ``Parameter`` objects and ``state_dict`` keys, the same numerics
    (on CPU and without kernels bit for bit: the ops' references are the modules' own arithmetic). A
    model of a family accel does not know is returned as it is; :func:`report` says what was replaced,
    what already routes (``nn.LayerNorm``) and what was left and why. Patching twice replaces nothing more;
    a second call's ``loss_options``, ``mlp_recompute`` and ``norm_recompute``, where given, replace the
    first's (:func:`unpatch` undoes the replacements).

    Args:
        model: an ``nn.Module`` (a Hugging Face model, or any module holding some).
        norms: replace the RMSNorm modules (``accel::rms_norm_hf``), and the decoder layers whose forward is
            Llama's (Mistral, Qwen2/3, Gemma: compared as bytecode), whose residual adds then run inside the norm
            that reads each sum (``accel::add_rms_norm_hf``: the sum and the normalised sum from one kernel,
            and in backward the norm's input gradient and the residual's summed in it; the same bits as the
            add and the norm). The MLP's add is fused with the next layer's input norm (the last layer's with
            the model's final norm), whose own call then returns the output computed with the add, unless the
            layer's output was changed or replaced since (a hook; a change through ``.data`` is invisible: pass
            ``norms=False`` there), the norm is hooked, or grad mode or activation checkpointing differ between
            the two. Under ``torch.compile``, non-reentrant activation checkpointing and other saved-tensor hooks
            the layers run their own code; in inference mode nothing is handed off; a sharded (FSDP2) or
            subclass weight keeps the model's own add and norm.
        mlp: replace the SwiGLU MLPs (``accel::swiglu``).
        rope: replace the attention modules' RoPE (``accel::rope``).
        loss: replace the causal LM's loss (``accel.nn.functional.linear_cross_entropy`` when ``labels`` are
            given; ``logits`` are then ``None`` unless the call passes ``return_logits=True``). Where an
            accel loss kernel is registered for the device (``accel.kernels.install()`` on a GPU), a
            training-mode call with ``labels``, no ``past_key_values`` and no ``use_cache`` builds no KV cache
            (``past_key_values`` is ``None``): Hugging Face builds one by default, a copy of each layer's
            keys and values that the step drops with the output (HF Llama on the H200: 16 ``cat`` kernels,
            0.95 ms per step). ``use_cache=True`` builds it. So does a call passing ``position_ids`` without
            an ``attention_mask``, whose mask Hugging Face builds differently without a cache (packed
            sequences get a block-diagonal mask). Without a cache Hugging Face checks its own
            ``position_ids`` for packing (one device-to-host read per forward).
        loss_options: the :class:`accel.nn.LinearCrossEntropyOptions` of the loss (torch's own class on
            torch 2.13+ is read field by field into accel's). Default ``None``: chunks of
            :func:`accel.nn.linear_cross_entropy.model_chunk_rows` rows (at least 1024 where there are as
            many tokens, up to 2048 while the chunk's buffers stay within the head weight's size, at most 1
            GiB of them), ``acc_policy="auto"`` (on a GPU ``"compact"``: the
            logits chunk and the head's weight gradient accumulate in the weight's dtype; ``"accurate"`` keeps
            both in fp32 for one ``[vocab, hidden]`` fp32 scratch more). The loss is fp32 either way, as
            Hugging Face's.
        mlp_recompute: ``True`` (what ``None`` means on a first patch): the replaced MLPs save ``gate`` and
            ``up`` only and recompute ``silu(gate) * up`` in backward, so one ``[tokens, intermediate]``
            tensor per layer is not kept between forward and backward, for one more elementwise pass in
            backward (HF Llama on the H200: 0.60 GiB less peak; ``benchmarks/results/h200/session15``). Where
            all three projections are plain ``nn.Linear`` (no hooks, in the activations' dtype, outside
            autocast) and a kernel serves the SwiGLU, the whole MLP is one autograd node
            (:func:`accel.kernels.ops.swiglu.mlp.swiglu_mlp`); with a fused ``gate_up_proj`` (Phi-3) the down
            projection alone (:func:`accel.kernels.ops.swiglu.linear.swiglu_linear`). The same bits either
            way but for the one-node MLP's input gradient, whose two terms are summed inside a GEMM (one
            rounding, not two). ``False``: the product is saved, as the model's code does (and double
            backward works). ``None`` on a model patched before: keep its setting.
        norm_recompute: ``True`` (what ``None`` means on a first patch): a replaced RMSNorm's output is not
            kept for backward by the modules it feeds; it is recomputed there from the norm's input and
            weight (which the norm keeps anyway), by the same kernel (the same bits): the MLP that takes it
            whole (``swiglu_mlp``) and the attention's q/k/v projections. Where those are plain ``nn.Linear``
            they run as one autograd node (:func:`accel.integrations._shared_linears.shared_input_linears`)
            whose backward sums their input gradients inside the GEMMs (two add kernels fewer per layer; one
            rounding of the sum, not two); else saved-tensor hooks around the attention's forward recompute
            the input for each projection. One ``[tokens, hidden]`` tensor per norm is not kept, for one norm
            forward more in backward. Neither one-node path has a double backward (``create_graph=True``
            raises): pass ``norm_recompute=False, mlp_recompute=False`` for that. An output (or the norm's
            input) changed in place before the consumer keeps it is kept as it is (a change through ``.data``
            is invisible: pass ``False`` there); under other saved-tensor hooks (non-reentrant activation
            checkpointing, offloading) nothing is recomputed and the MLP runs as modules. ``False``: the outputs are kept, as the model's code
            does. ``None`` on a model patched before: keep its setting.

    Returns:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, or ``loss_options`` cannot be read as
            :class:`accel.nn.LinearCrossEntropyOptions` (nothing is changed then).
    """
    _check_module(model, "patch")
    if loss_options is not None:  # checked before any module changes (not at the first training step)
        from accel.nn import linear_cross_entropy as lce

        loss_options = _as_options(lce, loss_options)
    _dispatch_keys()
    wanted = {"rms_norm": norms, "mlp": mlp, "attention": rope, "causal_lm": loss, "decoder_layer": norms}
    flags = {"mlp": mlp_recompute, "rms_norm": norm_recompute}
    with _LOCK:
        for module in model.modules():
            cls = type(module)
            known = _known(cls)
            if known is None and _original(cls) is not cls:  # patched before: only the options apply
                original = _known(_original(cls))
                if loss_options is not None and original is not None and original[1] == "causal_lm":
                    module.accel_loss_options = loss_options
                if original is not None and original[1] in _FLAGS:
                    _set_flag(module, _FLAGS[original[1]], flags[original[1]])
                continue
            if known is None or not wanted[known[1]]:
                continue
            accel_cls, _ = _verdict(cls, known[1], known[2])
            if accel_cls is not None and _instance_reason(module, known[1]) is None:
                module.__class__ = accel_cls
                if known[1] == "causal_lm" and loss_options is not None:
                    module.accel_loss_options = loss_options
                if known[1] in _FLAGS:
                    _set_flag(module, _FLAGS[known[1]], flags[known[1]])
        _link_layers(model)
    return model


def _link_layers(model: nn.Module) -> None:
    """Give each replaced decoder layer of a known base model (``layers`` then ``norm``, as Llama's forward runs
    them) the replaced RMSNorm that reads its output next: the next layer's input norm, the last layer the
    model's final norm (kept in a tuple, so that it is no submodule of the layer: ``state_dict`` and
    ``modules()`` are unchanged; ``copy.deepcopy`` of the model copies it as the sibling it is)."""
    for module in model.modules():
        layers = module._modules.get("layers")
        if _family_of(_original(type(module))) is None or not isinstance(layers, nn.ModuleList):
            continue
        nexts = [getattr(layer, "_modules", {}).get("input_layernorm") for layer in list(layers)[1:]]
        for layer, nxt in zip(layers, [*nexts, module._modules.get("norm")]):
            if getattr(type(layer), "accel_role", None) == "decoder_layer":
                if getattr(type(nxt), "accel_role", None) == "rms_norm":
                    vars(layer)["accel_next_norm"] = (nxt,)
                else:
                    vars(layer).pop("accel_next_norm", None)


#: The per-module switch of patch's recompute options, by role: the attribute the module's forward reads.
_FLAGS = {"mlp": "accel_mlp_recompute", "rms_norm": "accel_norm_recompute"}


def _set_flag(module: nn.Module, attr: str, value: bool | None) -> None:
    """Record one of ``patch``'s recompute options on a replaced module: ``None`` keeps what it has, ``True`` is
    the default (no attribute), ``False`` the attribute its forward reads."""
    if value is False:
        setattr(module, attr, False)
    elif value:
        vars(module).pop(attr, None)


def unpatch(model: nn.Module) -> nn.Module:
    """Give every module of ``model`` that :func:`patch` (or a model built under :func:`enable`) replaced its
    original class back, in place; returns ``model``. Parameters and state are untouched.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    _check_module(model, "unpatch")
    with _LOCK:
        for module in model.modules():
            original = _original(type(module))
            if original is not type(module):
                module.__class__ = original
                vars(module).pop("accel_loss_options", None)
                vars(module).pop("accel_next_norm", None)
                for attr in _FLAGS.values():
                    vars(module).pop(attr, None)
    return model


# ------------------------------------------------------------------------------ kernel or the model's code
def _dispatch_keys() -> None:
    """Look up the dispatch key of every device type accel's backends run (once, eagerly: the lookup reads
    entry points, which ``torch.compile`` cannot trace; a model moved to another device after :func:`patch`
    finds its key cached)."""
    for device_type in ("cpu", "cuda", "xpu", "mps"):
        dispatch_key(device_type)


def accel_takes(op: str, *args: Any) -> bool:
    """Whether an accel kernel registered for ``op`` would answer ``op(*args)`` here (not the op's default
    kernel, its eager reference).

    A replaced module calls its accel op only where this is true and otherwise runs the model's own code,
    so that accel never makes a model slower by running a reference (a custom op's dispatch, and autograd
    through it, cost more than Hugging Face's own elementwise code; below the kernels' size floor, on a
    device with no kernel, for a dtype no kernel takes). Eager: the registry's own per-call decision for the
    live overrides of ``op`` at the arguments' dispatch key (their ``cond``, the tuning table, a shape that
    failed before), as the call would get it. Under ``torch.compile`` (the arguments are fake tensors, and a
    call into the registry would break the graph): a live override at that key is enough, and its ``cond``
    decides at run time inside the opaque op. Eager under a ``torch.func`` transform (grad, vmap), where
    accel's autograd nodes cannot run: ``False``.

    Args:
        op: the accel op's qualified name (``"accel::swiglu"``).
        *args: the op's arguments, tensors first, as the module would pass them.

    Returns:
        ``True`` where a kernel takes the call, else ``False`` (no registration at this device's key, all
        of them off, every ``cond`` declines, or a ``torch.func`` transform runs). A declined call counts in
        the override's ``declined``.
    """
    return bool(_decision(op, *args, answer=False))


def _decision(op: str, *args: Any, answer: bool = True) -> Any:
    """:func:`accel_takes`'s answer as the registry gives it (:func:`accel.kernels.core.autograd.decide`): the
    decided call (an ``Answer``, which the op's ``answer=`` argument runs without routing the call again),
    ``True`` or ``False``."""
    slot = live_slot(op, _device_type(args[0]))
    if slot is None:
        return False
    if torch.compiler.is_compiling():
        return True
    if _transforms_active():
        return False
    return decide(slot, args, answer)


# -------------------------------------------------------------------------------------- verification
def _verdict(cls: type, role: str, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)`` for a class accel verified, else ``(None, reason)``; once per class."""
    with _LOCK:
        found = _VERDICTS.get(cls)
        if found is None:
            try:
                found = _BUILDERS[role](cls, variant)
            except Exception as exc:  # noqa: BLE001 - a class accel cannot verify is left as it is, with the reason
                found = (None, f"could not be verified ({type(exc).__name__}: {exc})")
            _VERDICTS[cls] = found
        return found


def _instance_reason(module: nn.Module, role: str) -> str | None:
    """Why this instance of a verified class is not replaced, or ``None``."""
    if role == "rms_norm":
        w = getattr(module, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() != 1:
            return "its weight is not a 1-d tensor"
    elif role == "mlp":
        act = getattr(module, "act_fn", getattr(module, "activation_fn", None))
        if not _is_silu(act):
            return f"activation {type(act).__name__} is not SiLU: the gated MLP is not SwiGLU"
    elif role == "causal_lm":
        head = getattr(module, "lm_head", None)
        if not isinstance(head, nn.Linear):
            return "lm_head is not an nn.Linear"
        cap = getattr(getattr(module, "config", None), "final_logit_softcapping", None)
        if cap is not None:
            return f"config.final_logit_softcapping={cap}: the logits are capped before the loss"
    return None


def _is_silu(act: Any) -> bool:
    """Whether ``act`` (an activation module) computes ``F.silu``: checked once per class on fp32 and bf16."""
    cls = type(act)
    if cls in _SILU_TYPES:
        return True
    if cls in _NOT_SILU or not isinstance(act, nn.Module):
        return False
    t = torch.linspace(-8.0, 8.0, 97)
    try:
        with torch.no_grad():
            same = all(torch.equal(act(t.to(dt)), F.silu(t.to(dt))) for dt in (torch.float32, torch.bfloat16))
    except Exception:  # noqa: BLE001 - an activation that cannot run on a CPU vector is not taken for SiLU
        same = False
    (_SILU_TYPES if same else _NOT_SILU).add(cls)
    return same


def _functions(cls: type) -> Iterable[types.FunctionType]:
    for klass in cls.__mro__:
        if klass is nn.Module or klass is object:
            break
        yield from (f for f in vars(klass).values() if isinstance(f, types.FunctionType))


def _plain_forward(cls: type) -> types.FunctionType | None:
    """The class's ``forward`` as written (``None`` where a decorator wraps it)."""
    fwd = getattr(cls, "forward", None)
    if not isinstance(fwd, types.FunctionType) or hasattr(fwd, "__wrapped__"):
        return None
    return fwd


def _subclass(cls: type, role: str, namespace: dict[str, Any]) -> type:
    """The accel subclass of ``cls``: named like it (transformers reads class names: ``save_pretrained`` writes
    ``config.architectures`` from it, weight init matches ``"RMSNorm"`` in it), found as ``Accel<name>`` in this
    module (its ``__qualname__``: what pickle looks up, :func:`__getattr__`)."""
    namespace = {"accel_original": cls, "accel_op": OPS[role], "accel_role": role, "__module__": __name__,
                 "__qualname__": f"Accel{cls.__name__}",
                 "__doc__": f"{cls.__name__} on {OPS[role]} (accel.integrations.transformers).", **namespace}
    return type(cls.__name__, (cls,), namespace)


def _build_rms_norm(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    names = {n for f in _functions(cls) for n in f.__code__.co_names}
    eps_attr = next((n for n in ("variance_epsilon", "eps") if n in names), None)
    forward = _plain_forward(cls)
    if eps_attr is None or forward is None:
        return None, "its forward is not the RMSNorm accel verifies (no eps attribute, or a wrapped forward)"
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
        weight = _weight(self)
        eps = getattr(self, eps_attr)
        if not torch.compiler.is_compiling() and _HANDOFFS and not (args or kwargs):  # (no dict guard when traced)
            y = _handed_off(hidden_states, weight, eps, unit)  # the decoder layer before computed it with its add
            if y is not None:  # (its recipe kept where it was made)
                return y
        if (args or kwargs or not (mixed_ok or hidden_states.dtype == weight.dtype)
                or not (answer := _decision(RMS_NORM_OP, hidden_states, weight, eps, unit))):
            return forward(self, hidden_states, *args, **kwargs)  # the model's own code
        y = rms_norm_ops.rms_norm(hidden_states, weight, eps, unit, answer=answer)
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            # how to make y again: a consumer that keeps this instead of y recomputes it in backward (where
            # norm_recompute allows; the attention's projections read the entry either way)
            _keep_recipe(y, _RecomputeNorm(eps, unit), (hidden_states, weight),
                         self.__dict__.get("accel_norm_recompute", True))
        return y

    forward_accel.__doc__ = forward.__doc__
    return _subclass(cls, "rms_norm", {"forward": forward_accel, "accel_unit_offset": unit,
                                       "accel_eps_attr": eps_attr, "accel_mixed_ok": mixed_ok}), None


class _RecomputeNorm:
    """``accel::rms_norm_hf``'s ``y`` again from its input and weight: the same op, routed as the first call was,
    so the same kernel and the same bits."""

    __slots__ = ("eps", "unit")

    def __init__(self, eps: float, unit: bool) -> None:
        self.eps, self.unit = eps, unit

    def __call__(self, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm_ops.rms_norm(input, weight, self.eps, self.unit)


#: ``id(y)`` of a replaced RMSNorm's live output (accel's kernel computed it) -> ``(weakref to y, y's version
#: then, fn, weakrefs to fn's tensors, their versions then, whether norm_recompute allows recomputing)``: how to
#: make ``y`` again. Weak on both sides, so the entry neither travels with ``y`` (pickling, a returned
#: ``last_hidden_state``) nor keeps the norm's input alive; dropped when ``y`` dies.
_RECIPES: dict[int, tuple] = {}


def _keep_recipe(y: torch.Tensor, fn: Any, tensors: tuple, recompute: bool) -> None:
    key = id(y)
    _RECIPES[key] = (weakref.ref(y, lambda _ref: _RECIPES.pop(key, None)), y._version, fn,
                     tuple(weakref.ref(t) for t in tensors), tuple(t._version for t in tensors), recompute)


def _norm_output(x: torch.Tensor) -> tuple | None:
    """The entry of ``x`` where it is a replaced RMSNorm's output, unchanged in place since the norm ran."""
    entry = _RECIPES.get(id(x))
    if entry is None or entry[0]() is not x or x._version != entry[1]:
        return None
    return entry


def _recipe(x: torch.Tensor, entry: tuple | None = None) -> tuple | None:
    """``(fn, tensors)`` making ``x`` again where ``x`` is a replaced RMSNorm's output (``entry``: its
    :func:`_norm_output`, looked up where not given), the norm's ``norm_recompute`` is on and neither ``x`` nor
    the norm's input and weight were changed in place since the norm ran (their version counters), all alive;
    else ``None`` (the consumer keeps ``x``). A change through ``.data`` is invisible to version counters:
    ``patch(model, norm_recompute=False)`` for models whose hooks write that way."""
    entry = _norm_output(x) if entry is None else entry
    if entry is None or not entry[5]:
        return None
    tensors = tuple(r() for r in entry[3])
    if any(t is None for t in tensors) or tuple(t._version for t in tensors) != entry[4]:
        return None
    return entry[2], tensors


def _outer_saved_tensor_hooks() -> bool:
    """Whether saved-tensor hooks are active (non-reentrant activation checkpointing, offloading) or disabled
    (``disable_saved_tensors_hooks``): then nothing is recomputed here and the MLP runs as modules, so that a
    checkpoint's recomputation saves what the forward saved and the outer hooks see every saved tensor."""
    return (torch._C._autograd._top_saved_tensors_default_hooks(False) is not None
            or not torch._C._autograd._saved_tensors_hooks_is_enabled())


def _transforms_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap) is running: an old-style autograd.Function cannot run there."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def _plain_linear(x: torch.Tensor, *projs: Any) -> bool:
    """Whether calling ``F.linear`` with each of ``projs``' parameters is what calling it on ``x`` does: an
    ``nn.Linear`` itself, no hook of any kind (its own, global, or accelerate's offload hook and replaced
    ``forward``), its weight in ``x``'s dtype and on its device, and no autocast (whose cast the recomputing
    backward would not repeat), and weight and bias plain tensors (a subclass's ``__torch_function__``, a
    fake-quantised weight say, changes what ``F.linear`` computes, and the fused backward's GEMMs on the raw
    values would not follow it). Read from the modules' ``__dict__`` and ``_parameters`` (this runs on every
    MLP call: ``hasattr`` and ``Module.__getattr__`` cost more than the checks)."""
    if _global_hooks() or torch.is_autocast_enabled(_device_type(x)):
        return False
    dtype, device = x.dtype, x.device
    for proj in projs:
        if type(proj) is not nn.Linear or _hooked(proj):
            return False
        params = proj.__dict__["_parameters"]
        weight, bias = params.get("weight"), params.get("bias")
        if (type(weight) not in _PLAIN_TENSORS or weight.dtype != dtype or weight.device != device
                or (bias is not None and type(bias) not in _PLAIN_TENSORS)):
            return False
    return True


def _hooked(module: nn.Module) -> bool:
    """Whether calling ``module`` runs more than its class's ``forward``: a hook of its own of any kind, or a
    replaced ``forward`` or accelerate's offload hook (plain attributes: ``module._hf_hook = hook``). Read
    from the module's ``__dict__`` (``hasattr`` and ``Module.__getattr__`` cost more than the checks)."""
    attrs = module.__dict__
    return bool("forward" in attrs or "_hf_hook" in attrs or attrs.get("_forward_hooks")
                or attrs.get("_forward_pre_hooks") or attrs.get("_backward_hooks") or attrs.get("_backward_pre_hooks"))


def _global_hooks() -> bool:
    """Whether any global module hook is registered (``nn.modules.module.register_module_forward_hook`` and
    its kin): they run on every module call, so a module's code cannot be replaced by a direct op call."""
    return bool(_nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks
                or _nn_module._global_backward_hooks or _nn_module._global_backward_pre_hooks)


def _device_type(t: torch.Tensor) -> str:
    """``t.device.type`` (a CUDA tensor's without building its ``torch.device``: 0.1 against 0.55 µs)."""
    return "cuda" if t.is_cuda else t.device.type


_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)


def _weight(module: nn.Module) -> Any:
    """``module.weight``, read from its ``_parameters`` where it is one (``Module.__getattr__`` costs 0.7 µs)."""
    weight = module._parameters.get("weight")
    return weight if weight is not None else module.weight


_MLP_NAMES = {"split": {"down_proj", "act_fn", "gate_proj", "up_proj"},
              "fused": {"gate_up_proj", "chunk", "activation_fn", "down_proj"}}


def _build_mlp(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    forward = _plain_forward(cls)
    if forward is None or set(forward.__code__.co_names) != _MLP_NAMES[variant]:
        return None, "its forward is not the gated MLP accel implements (names it uses differ)"
    silu = _SILU_TYPES

    def down(self, gate, up):
        proj = self.down_proj
        if self.__dict__.get("accel_mlp_recompute", True) and _plain_linear(gate, proj):
            return swiglu_linear(gate, up, proj.weight, proj.bias)  # the product is recomputed, not saved
        return proj(swiglu_ops.swiglu(gate, up))

    def fused(self, x, g, u, d) -> bool:
        """Whether the whole MLP runs as one node (:func:`swiglu_mlp`): recompute on, three plain linears, eager,
        no transform, and an accel kernel takes the SwiGLU of the gate F.linear will give (a stand-in of its
        shape, dtype and device: allocated, never written). (Read through the module's ``__dict__``: this runs on
        every call, and ``Module.__getattr__`` costs about 0.7 µs a name, 2 µs for a missing one.)"""
        if (not self.__dict__.get("accel_mlp_recompute", True) or torch.compiler.is_compiling()
                or _transforms_active() or live_slot(SWIGLU_OP, _device_type(x)) is None
                or _outer_saved_tensor_hooks() or not _plain_linear(x, g, u, d)):
            return False
        like = x.new_empty((*x.shape[:-1], g.out_features))
        return accel_takes(SWIGLU_OP, like, like)

    if variant == "split":
        def forward_accel(self, x, *args, **kwargs):
            mods = self._modules
            if args or kwargs or type(mods.get("act_fn")) not in silu:
                return forward(self, x, *args, **kwargs)
            g, u, d = mods.get("gate_proj"), mods.get("up_proj"), mods.get("down_proj")
            if fused(self, x, g, u, d):
                gp, up, dp = g._parameters, u._parameters, d._parameters
                return swiglu_mlp(x, gp["weight"], up["weight"], dp["weight"], gp["bias"], up["bias"], dp["bias"],
                                  recompute=_recipe(x))
            gate = self.gate_proj(x)
            if not accel_takes(SWIGLU_OP, gate, gate):  # (up has gate's shape, dtype and device)
                return self.down_proj(self.act_fn(gate) * self.up_proj(x))  # the model's own code
            up = self.up_proj(x)
            if gate.shape != up.shape or gate.dtype != up.dtype:
                return self.down_proj(self.act_fn(gate) * up)
            return down(self, gate, up)
    else:
        def forward_accel(self, hidden_states, *args, **kwargs):
            if args or kwargs or type(self.activation_fn) not in silu:
                return forward(self, hidden_states, *args, **kwargs)
            up_states = self.gate_up_proj(hidden_states)
            gate, up = up_states.chunk(2, dim=-1)
            if gate.shape != up.shape or not accel_takes(SWIGLU_OP, gate, up):
                return self.down_proj(up * self.activation_fn(gate))  # the model's own code
            return down(self, gate, up)

    forward_accel.__doc__ = forward.__doc__
    return _subclass(cls, "mlp", {"forward": forward_accel}), None


def _rope_probe(fn: Any) -> bool:
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


def _rope_function(original: Any) -> Any:
    """``apply_rotary_pos_emb`` on ``accel::rope`` where it takes the arguments, else ``original``."""

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        unsqueeze_dim = kwargs.get("unsqueeze_dim", 1)
        if (args or set(kwargs) - {"unsqueeze_dim"} or not rope_reference.accepts(q, k, cos, sin, unsqueeze_dim)
                or not accel_takes(ROPE_OP, q, k, cos, sin, unsqueeze_dim)):
            return original(q, k, cos, sin, *args, **kwargs)  # the model's own code
        return rope_ops.apply_rope(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.__doc__ = getattr(original, "__doc__", None)
    apply_rotary_pos_emb.accel_original = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _scope(globals_: dict[str, Any], replace: dict[str, Any]) -> dict[str, Any]:
    """A copy of a modeling module's globals with ``replace`` in it, as the ``__dict__`` of a module of its own in
    ``sys.modules`` (``accel.integrations.transformers.scopes.<modeling module>``): the modeling module's globals
    stay as they are, and ``torch.compile`` (which names a function's globals by their module's ``__name__`` and
    re-imports it for its guards) finds the copy's objects, not the modeling module's."""
    name = f"{__name__}.scopes.{globals_['__name__']}"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, globals_.get("__doc__"))
        sys.modules[name] = module
    module.__dict__.update({k: v for k, v in globals_.items() if k not in ("__name__", "__spec__", "__loader__")})
    module.__dict__.update(replace)
    return module.__dict__


def _build_attention(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    forward = _plain_forward(cls)
    if forward is None or "apply_rotary_pos_emb" not in forward.__code__.co_names:
        return None, "its forward does not call a module-level apply_rotary_pos_emb"
    original = forward.__globals__.get("apply_rotary_pos_emb")
    if original is None or not _rope_probe(original):
        return None, ("its module's apply_rotary_pos_emb is not Hugging Face's rotate-half RoPE (checked against "
                      "accel::rope's reference)")
    scope = _scope(forward.__globals__, {"apply_rotary_pos_emb": _rope_function(original)})
    forward_copy = types.FunctionType(forward.__code__, scope, forward.__name__, forward.__defaults__,
                                      forward.__closure__)
    forward_copy.__kwdefaults__ = forward.__kwdefaults__

    shared = _QKV <= set(forward.__code__.co_names)  # the forward calls q_proj, k_proj and v_proj
    # Llama's own code (compared as bytecode): the whole block can run as one node (_one_node_attention)
    whole = _same_code(forward, _llama_attention_forward) and _sdpa_functions() is not None

    def forward_accel(self, hidden_states, *args, **kwargs):
        if torch.compiler.is_compiling() or not torch.is_grad_enabled() or _outer_saved_tensor_hooks():
            return forward_copy(self, hidden_states, *args, **kwargs)
        # only where the input is a replaced RMSNorm's output that accel's kernel computed do the projections
        # change (where no kernel takes a call the model's own code runs, bit for bit)
        entry = _norm_output(hidden_states)
        if entry is None:
            return forward_copy(self, hidden_states, *args, **kwargs)
        recipe = _recipe(hidden_states, entry)
        if shared and not _transforms_active():
            mods = self._modules
            projs = (mods.get("q_proj"), mods.get("k_proj"), mods.get("v_proj"))
            if None not in projs and _plain_linear(hidden_states, *projs):
                if whole and not args:
                    out = _one_node_attention(self, hidden_states, kwargs, projs, recipe)
                    if out is not None:
                        return out, None
                view = _SharedProjections(self, hidden_states, projs, recipe)
                return forward_copy(view, hidden_states, *args, **kwargs)
        if recipe is None:
            return forward_copy(self, hidden_states, *args, **kwargs)
        with torch.autograd.graph.saved_tensors_hooks(*_RecomputedInput(hidden_states, recipe).hooks()):
            return forward_copy(self, hidden_states, *args, **kwargs)

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__qualname__ = f"Accel{cls.__name__}.forward"
    return _subclass(cls, "attention", {"forward": forward_accel}), None


_QKV = frozenset({"q_proj", "k_proj", "v_proj"})


def _llama_attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None,
                             past_key_values=None, **kwargs):
    # Hugging Face's Llama attention (transformers 5.x), kept as written: a class's forward runs as one node
    # (_one_node_attention) where its bytecode is this function's (_same_code)
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)

    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)  # noqa: F821

    if past_key_values is not None:
        key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward  # noqa: F821
    )

    attn_output, attn_weights = attention_interface(
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        **kwargs,
    )

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights


@_caches.detection_cache
def _sdpa_functions() -> tuple | None:
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


#: What a decoder layer passes its attention that transformers' SDPA path ignores without a cache or a mask.
_ATTENTION_KWARGS = frozenset({"position_embeddings", "attention_mask", "past_key_values", "position_ids",
                               "use_cache", "cache_position"})


def _one_node_attention(module: nn.Module, x: torch.Tensor, kwargs: dict[str, Any], projs: tuple,
                        recipe: tuple | None) -> torch.Tensor | None:
    """The attention's output from :func:`._attention.self_attention` (one autograd node) where that is what its
    Llama code computes here: the configured interface is transformers' ``sdpa_attention_forward``, no cache,
    no mask, no dropout, causal, more than one query, the output projection a plain linear, ``cos``/``sin``
    plain tensors without grad, GQA done by SDPA itself where heads are shared (``use_gqa_in_sdpa``), and
    accel's RoPE kernel takes the shapes; else ``None`` (the model's code runs)."""
    if (x.dim() != 3 or x.shape[1] < 2 or not kwargs.keys() <= _ATTENTION_KWARGS
            or kwargs.get("attention_mask") is not None or kwargs.get("past_key_values") is not None):
        return None
    pe = kwargs.get("position_embeddings")
    if type(pe) is not tuple or len(pe) != 2:
        return None
    cos, sin = pe
    if type(cos) is not torch.Tensor or type(sin) is not torch.Tensor or cos.requires_grad or sin.requires_grad:
        return None
    attrs = module.__dict__
    o_proj = attrs["_modules"].get("o_proj")
    if ((attrs.get("training") and attrs.get("attention_dropout")) or not attrs.get("is_causal", True)
            or o_proj is None or not _plain_linear(x, o_proj)):
        return None
    functions, sdpa_forward, use_gqa = _sdpa_functions()
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
    return self_attention(x, cos, sin, tuple(w["weight"] for w in weights), tuple(w["bias"] for w in weights),
                          head_dim=head_dim, scaling=attrs["scaling"], enable_gqa=groups > 1, recompute=recipe)


#: The one-node attention's positive decisions (:func:`_rope_takes`): per key, the registry's decision epoch.
_ROPE_TAKES: dict[tuple, tuple] = {}


def _rope_takes(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, hq: int, hk: int, head_dim: int,
                groups: int, use_gqa: Callable) -> bool:
    """Whether the attention's q and k, as its code lays them out from ``x`` (``[B, H, S, D]`` views of the
    projections' ``[B, S, H * D]`` outputs), go to accel's RoPE kernel with ``cos`` and ``sin`` (and SDPA does
    GQA itself where heads are shared). Decided on stand-ins of q and k (allocated, never written) and kept
    per shape, dtype, device and ``cos``/``sin`` signature while the registry's decision epoch holds
    (:func:`accel.kernels.core.autograd.decision_epoch`): a kept answer spares each layer's call the stand-ins
    and the registry's lookup. Only a yes is kept, so every declined call is still counted."""
    slot = live_slot(ROPE_OP, _device_type(x))
    if slot is None:
        return False
    b, s = x.shape[0], x.shape[1]
    pe = signature((cos, sin))
    key = (b, s, x.dtype, x.device, hq, hk, head_dim, groups, pe)
    epoch = None if pe is None else decision_epoch(slot)
    if epoch is not None and _ROPE_TAKES.get(key) == epoch:
        return True
    q_like = x.new_empty((b, s, hq)).view(b, s, -1, head_dim).transpose(1, 2)
    k_like = x.new_empty((b, s, hk)).view(b, s, -1, head_dim).transpose(1, 2)
    if groups > 1 and not use_gqa(None, k_like, k_like):
        return False  # the model's code repeats k and v per head group
    if not (rope_reference.accepts(q_like, k_like, cos, sin, 1) and accel_takes(ROPE_OP, q_like, k_like, cos, sin, 1)):
        return False
    if epoch is not None:
        if len(_ROPE_TAKES) >= 64:
            _ROPE_TAKES.clear()
        _ROPE_TAKES[key] = epoch
    return True


class _SharedProjections:
    """The attention module as its own forward code sees it during one call, its ``q_proj``, ``k_proj`` and
    ``v_proj`` answered by one :func:`._shared_linears.shared_input_linears` node: the first of them called on
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


class _RecomputedInput:
    """Saved-tensor hooks that keep, in place of the attention's input ``y`` (an RMSNorm's output, which its
    q/k/v projections each save), the recipe that makes it again; unpacked, ``y`` is recomputed once and
    shared by every projection's backward (freed with the last of them).

    A saved tensor is ``y`` when it starts where ``y`` does and has its dtype and size (the projections save
    ``y``'s 2-D view); every other saved tensor is kept as autograd keeps it (the hooks are installed only
    where no other saved-tensor hooks are active). The recipe's tensors (the norm's input and weight) are
    checked at unpack for in-place changes since the forward, as autograd checks its own saved tensors."""

    __slots__ = ("dtype", "fn", "numel", "ptr", "tensors", "value", "version", "versions")

    def __init__(self, y: torch.Tensor, recipe: tuple) -> None:
        self.ptr, self.numel, self.dtype, self.version = y.data_ptr(), y.numel(), y.dtype, y._version
        self.fn, self.tensors = recipe
        self.versions = tuple(t._version for t in self.tensors)  # as the norm left them (_recipe checked)
        self.value = None

    def hooks(self) -> tuple:
        def pack(t):
            if (t.data_ptr() == self.ptr and t.numel() == self.numel and t.dtype == self.dtype
                    and t._version == self.version):  # y's own view (views share y's counter), unchanged since
                return (self, t.shape, t.stride())  # the same start, so no offset
            return t

        def unpack(packed):
            if type(packed) is not tuple:
                return packed
            holder, shape, stride = packed
            return holder.get().as_strided(shape, stride)

        return pack, unpack

    def get(self) -> torch.Tensor:
        if self.value is None:
            if tuple(t._version for t in self.tensors) != self.versions:
                raise RuntimeError("accel.integrations.transformers: a tensor the attention's input is recomputed "
                                   "from (the RMSNorm's input or weight) was modified by an inplace operation "
                                   "between forward and backward; patch(model, norm_recompute=False) keeps the "
                                   "input itself instead.")
            with torch.no_grad():
                self.value = self.fn(*self.tensors)
        return self.value


#: What a causal LM's forward may reference for accel's loss path to compute what it computes (the Llama
#: pattern: base model, ``lm_head`` on the last hidden states, ``loss_function``; GPT-2's adds cross
#: attentions). Gemma 2/3's softcapping names are allowed: the path is taken only without softcapping.
_LM_NAMES = {"CausalLMOutputWithPast", "CausalLMOutputWithCrossAttentions", "attentions", "config", "hidden_states",
             "int", "isinstance", "last_hidden_state", "lm_head", "loss_function", "model", "transformer",
             "past_key_values", "slice", "vocab_size", "cross_attentions", "final_logit_softcapping", "tanh", "torch"}
_LM_ARGS = ("labels", "logits_to_keep", "kwargs")


def _can_return_tuple_code() -> Any:
    from transformers.utils.generic import can_return_tuple

    return can_return_tuple(lambda self: None).__code__


def _build_causal_lm(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    outer = cls.forward
    inner = getattr(outer, "__wrapped__", None)
    if inner is None or outer.__code__ is not _can_return_tuple_code() or hasattr(inner, "__wrapped__"):
        return None, "its forward is not wrapped the way the Llama pattern's is (can_return_tuple alone)"
    names = set(inner.__code__.co_names)
    if not names <= _LM_NAMES or not {"lm_head", "loss_function", getattr(cls, "base_model_prefix", "")} <= names:
        return None, f"its forward uses names outside the causal-LM pattern ({', '.join(sorted(names - _LM_NAMES))})"
    signature = inspect.signature(inner)
    params = list(signature.parameters)
    if not all(a in params for a in _LM_ARGS):
        return None, "its forward lacks labels, logits_to_keep or **kwargs"
    out_cls = signature.return_annotation
    fields = getattr(out_cls, "__dataclass_fields__", {})
    if "loss" not in fields or "logits" not in fields:
        return None, "its forward's return annotation is not a ModelOutput with loss and logits"
    try:
        from accel.nn import linear_cross_entropy as lce
    except ImportError as exc:
        return None, f"accel.nn.functional.linear_cross_entropy is not available here ({exc})"
    rest = [f for f in fields if f not in ("loss", "logits")]
    cache_param = "use_cache" in params and "past_key_values" in params

    def forward_accel(self, *args, return_logits: bool = False, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        a = bound.arguments
        extra = dict(a.get("kwargs", {}))
        labels = a.get("labels")
        head = self.lm_head
        keep = a.get("logits_to_keep", 0)
        cap = getattr(self.config, "final_logit_softcapping", None)
        if (labels is None or cap is not None or not isinstance(head, nn.Linear) or not isinstance(keep, int)
                or keep != 0 or getattr(self.loss_function, "__name__", "") != "ForCausalLMLoss"):
            return outer(self, *args, **kwargs)  # the class's own forward, unchanged (logits as always)
        return_dict = self.config.return_dict if hasattr(self, "config") else True
        passed = extra.pop("return_dict", return_dict)
        if passed is not None:
            return_dict = passed
        base_args = {k: v for k, v in a.items() if k not in ("self", *_LM_ARGS)}
        if (cache_param and self.training and a.get("use_cache") is None and a.get("past_key_values") is None
                and not (a.get("position_ids") is not None and a.get("attention_mask") is None)
                and live_slot(LCE_OP, head.weight.device.type)):
            # a training step's cache is dropped with the output: not built, unless use_cache=True is passed
            base_args["use_cache"] = False
        outputs = getattr(self, self.base_model_prefix)(**base_args, **extra)
        hidden = outputs.last_hidden_state
        loss = _causal_lm_loss(hidden, head, labels, extra, lce, getattr(self, "accel_loss_options", None))
        if loss is None:  # no accel kernel takes the loss here: the model's own code (logits, loss_function)
            logits = head(hidden)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **extra)
        else:
            logits = head(hidden) if return_logits else None
        out = out_cls(loss=loss, logits=logits, **{f: getattr(outputs, f, None) for f in rest})
        return out if return_dict else out.to_tuple()

    forward_accel.__doc__ = (f"{cls.__name__}.forward, with the loss from accel's chunked linear cross-entropy "
                             f"when labels are given and an accel kernel takes it: logits are then None unless "
                             f"return_logits=True. Elsewhere the model's own logits and loss_function. In "
                             f"training mode with labels and no past_key_values, no KV cache is built (nor "
                             f"returned) unless use_cache=True is passed.")
    return _subclass(cls, "causal_lm", {"forward": forward_accel}), None


def _loss_options(lce: Any, options: Any, n: int, d: int, c: int, dtype: torch.dtype, device: torch.device) -> Any:
    """accel's ``LinearCrossEntropyOptions`` for one loss call: ``options`` as given (torch's own class, which
    :mod:`accel.nn` hands out on torch 2.13+, converted field by field), or, for ``None``, chunks of
    :func:`accel.nn.linear_cross_entropy.model_chunk_rows` rows (not the aspect-ratio rule's: 64-row chunks
    for Qwen3's vocabulary)."""
    if options is None:
        return lce.LinearCrossEntropyOptions(batch_chunk_size=lce.model_chunk_rows(n, d, c, dtype, device),
                                             chunking_method=None)
    return _as_options(lce, options)


def _as_options(lce: Any, options: Any) -> Any:
    """``options`` as accel's ``LinearCrossEntropyOptions`` (torch's own class read field by field).

    Raises:
        TypeError: ``options`` cannot be read as one (a field missing or out of range).
    """
    ours = lce.LinearCrossEntropyOptions
    if isinstance(options, ours):
        return options
    fields = [f.name for f in dataclasses.fields(ours)]
    try:
        return ours(**{f: getattr(options, f) for f in fields})
    except Exception as exc:  # noqa: BLE001 - said as a typed error with what was passed (a field missing too)
        raise TypeError(f"accel.integrations.transformers: loss_options {options!r} cannot be read as "
                        f"LinearCrossEntropyOptions ({type(exc).__name__}: {exc}). Pass "
                        f"accel.nn.LinearCrossEntropyOptions(...).") from exc


def _causal_lm_loss(hidden: torch.Tensor, head: nn.Linear, labels: torch.Tensor, extra: dict[str, Any],
                    lce: Any, options: Any) -> torch.Tensor | None:
    """``ForCausalLMLoss`` (transformers' default) on the last hidden states, without the logits: the labels
    shifted by one (or ``shift_labels``), mean over non-ignored tokens or sum / ``num_items_in_batch``. The
    loss is fp32, as HF's (:func:`accel.nn.linear_cross_entropy.linear_cross_entropy_fp32`: accel's chunked op
    on every torch, whose loss is computed in fp32 and not rounded to the input's dtype). ``None`` where no accel
    kernel takes the call (:func:`accel_takes`): the caller runs the model's own loss."""
    if not live_slot(LCE_OP, hidden.device.type):  # before any op: the model's own loss runs exactly as without accel
        return None
    ignore_index = extra.get("ignore_index", -100)
    num_items = extra.get("num_items_in_batch")
    shift_labels = extra.get("shift_labels")
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    x = hidden.reshape(-1, hidden.shape[-1])
    w, b = head.weight, head.bias
    if _is_sharded(w):
        warn_once(_SAID, "lm_head-dtensor",
                  "accel.integrations.transformers: lm_head.weight is a sharded DTensor when the loss reads it (an "
                  "FSDP2 group of its own gathers it only when lm_head's forward runs, which the fused loss never "
                  "calls), so the model's own logits and loss run: keep lm_head in the root module's group "
                  "(fully_shard(model) after the decoder layers, not fully_shard(model.lm_head)) to get accel's loss",
                  IntegrationWarning, stacklevel=2)
        return None
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):  # as F.linear would run under autocast: low precision operands
        dtype = torch.get_autocast_dtype(device_type)
        x, w, b = x.to(dtype), w.to(dtype), (None if b is None else b.to(dtype))
    elif w.dtype != x.dtype:
        w, b = w.to(x.dtype), (None if b is None else b.to(x.dtype))
    target = shift_labels.reshape(-1).to(x.device)
    reduction = "sum" if num_items is not None else "mean"
    opts = _loss_options(lce, options, x.shape[0], x.shape[1], w.shape[0], x.dtype, x.device)
    r = opts.resolve(x.shape[0], x.shape[1], w.shape[0], x.dtype, x.device)
    grad = torch.is_grad_enabled()
    if not accel_takes(LCE_OP, x, w, target, b, None, reduction, ignore_index, 0.0, r.batch_chunk_size,
                       r.acc_policy, r.acc_dtype, r.allow_retain_graph, x.requires_grad and grad,
                       w.requires_grad and grad, b is not None and b.requires_grad and grad):
        return None
    # no host-side range check (a device-to-host read per step: a stall); a label outside the vocabulary gives a
    # NaN loss (HF's eager cross_entropy asserts on the device)
    loss = lce.linear_cross_entropy_fp32(x, w, target, linear_bias=b, reduction=reduction, ignore_index=ignore_index,
                                         options=opts, check_target_range=False)
    if reduction == "sum":
        loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
    return loss


def _is_sharded(t: torch.Tensor) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (a parameter of an FSDP2 group not gathered now)."""
    dtensor = _compat.dtensor_class()  # resolved once (a detection cache: accel.clear_cache forgets it)
    return dtensor is not None and isinstance(t, dtensor)


def _llama_decoder_layer_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                                 use_cache=False, position_embeddings=None, **kwargs):
    # Hugging Face's Llama decoder layer (transformers 5.x), kept as written: a class's forward is taken for this
    # pattern where its bytecode is this function's (_same_code)
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    # Self Attention
    hidden_states, _ = self.self_attn(
        hidden_states=hidden_states,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        **kwargs,
    )
    hidden_states = residual + hidden_states

    # Fully Connected
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = self.mlp(hidden_states)
    hidden_states = residual + hidden_states
    return hidden_states


def _same_code(fn: types.FunctionType, pattern: types.FunctionType) -> bool:
    """Whether ``fn`` compiles to ``pattern``'s bytecode: the same instructions on the same names, locals and
    constants, the same parameters and defaults (line numbers, comments and annotations aside)."""
    a, b = fn.__code__, pattern.__code__
    return (a.co_code == b.co_code and a.co_names == b.co_names and a.co_varnames == b.co_varnames
            and a.co_consts == b.co_consts and a.co_argcount == b.co_argcount
            and a.co_kwonlyargcount == b.co_kwonlyargcount and fn.__defaults__ == pattern.__defaults__
            and not fn.__closure__)


def _build_decoder_layer(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    forward = _plain_forward(cls)
    if forward is None or not _same_code(forward, _llama_decoder_layer_forward):
        return None, ("its forward is not the Llama decoder layer accel implements (pre-norm attention and MLP, "
                      "each added to its residual; compared as bytecode)")

    def forward_accel(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                      use_cache=False, position_embeddings=None, **kwargs):
        mods = self._modules
        post = mods.get("post_attention_layernorm")
        if (torch.compiler.is_compiling() or _transforms_active() or _outer_saved_tensor_hooks()
                or not _plain_norm(post)):
            return forward(self, hidden_states, attention_mask, position_ids, past_key_values, use_cache,
                           position_embeddings, **kwargs)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_ids=position_ids, past_key_values=past_key_values,
                                          use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
        residual, hidden_states = _add_norm(post, hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return _add_handing_off(self, hidden_states, residual)

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__qualname__ = f"Accel{cls.__name__}.forward"
    return _subclass(cls, "decoder_layer", {"forward": forward_accel}), None


def _plain_norm(norm: Any) -> bool:
    """Whether ``norm`` is a replaced RMSNorm whose call is its ``forward`` alone (no hook of any kind, no
    replaced ``forward``): then calling accel's fused add + norm with its weight and eps is what calling it on
    the sum does."""
    return getattr(type(norm), "accel_role", None) == "rms_norm" and not (_hooked(norm) or _global_hooks())


def _fused_add_norm(norm: nn.Module, h: torch.Tensor, residual: torch.Tensor,
                    hand_off: bool = False) -> tuple | None:
    """``(residual + h, norm(residual + h))`` from accel's fused kernel where one takes the call, else ``None``.
    ``hand_off``: the norm output is also kept for the norm's own call on the sum (:func:`_handed_off`)."""
    weight = _weight(norm)
    eps = getattr(norm, type(norm).accel_eps_attr)
    unit = type(norm).accel_unit_offset
    # plain tensors only: a sharded weight (FSDP2's DTensor while its layer is not running) or a DTensor
    # activation keeps the model's own add and norm, which FSDP's hooks and DTensor's dispatch serve
    if (type(weight) not in _PLAIN_TENSORS or type(h) is not torch.Tensor or type(residual) is not torch.Tensor
            or h.shape != residual.shape or h.dtype != residual.dtype
            or not (type(norm).accel_mixed_ok or h.dtype == weight.dtype)
            or not (answer := _decision(ADD_RMS_NORM_OP, h, residual, weight, eps, unit))):
        return None
    s, y = add_rms_norm_ops.add_rms_norm(h, residual, weight, eps, unit, answer=answer)
    grad = torch.is_grad_enabled()
    if grad:
        _keep_recipe(y, _RecomputeNorm(eps, unit), (s, weight), norm.__dict__.get("accel_norm_recompute", True))
    if hand_off:
        key = id(s)
        _HANDOFFS[key] = (weakref.ref(s, lambda _ref: _HANDOFFS.pop(key, None)), s._version, weight, weight._version,
                          eps, unit, y, grad)
    return s, y


def _add_norm(norm: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's ``residual + h`` and ``norm`` of it: one kernel where accel's takes it, else the model's code."""
    fused = _fused_add_norm(norm, h, residual)
    if fused is not None:
        return fused
    s = residual + h
    return s, norm(s)


def _add_handing_off(layer: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The layer's output ``residual + h``; where :func:`patch` linked the layer to the norm that reads its output
    next (the next layer's input norm, or the model's final norm) and accel's fused kernel takes the call, that
    norm's output is computed with the add and handed to the norm's own call (:func:`_handed_off`)."""
    link = layer.__dict__.get("accel_next_norm")
    nxt = link[0] if link else None
    if nxt is not None and not torch.is_inference_mode_enabled() and _plain_norm(nxt):
        fused = _fused_add_norm(nxt, h, residual, hand_off=True)
        if fused is not None:
            return fused[0]
    return residual + h


#: ``id(s)`` of a decoder layer's output -> ``(weakref to s, s's version then, the next norm's weight, its version
#: then, eps, unit_offset, y, grad mode then)``: that norm's output, computed with the add that made ``s``. Taken
#: (and dropped) by the norm's call on ``s``; dropped with ``s`` where no such call comes.
_HANDOFFS: dict[int, tuple] = {}


def _handed_off(x: torch.Tensor, weight: torch.Tensor, eps: float, unit: bool) -> torch.Tensor | None:
    """The norm output handed off for ``x`` (:func:`_add_handing_off`) where it is this norm's (the same weight
    object and eps), neither ``x`` nor the weight changed in place since (a change through ``.data`` is
    invisible: ``patch(model, norms=False)`` there), grad mode is what it was and no saved-tensor hooks
    (activation checkpointing) run; else ``None``."""
    entry = _HANDOFFS.pop(id(x), None)
    if (entry is None or entry[0]() is not x or x._version != entry[1] or entry[2] is not weight
            or weight._version != entry[3] or entry[4] != eps or entry[5] != unit):
        return None
    # made in another autograd context: under no_grad (a reentrant checkpoint's forward) y has no graph for a
    # norm running with grad; inside a non-reentrant checkpoint the recomputation would find no handoff and
    # save what the forward did not
    if entry[7] != torch.is_grad_enabled() or _outer_saved_tensor_hooks():
        return None
    return entry[6]


_BUILDERS = {"rms_norm": _build_rms_norm, "mlp": _build_mlp, "attention": _build_attention,
             "causal_lm": _build_causal_lm, "decoder_layer": _build_decoder_layer}


# ------------------------------------------------------------------------------- transformers' own hook
def _monkey_patching() -> Any:
    try:
        return importlib.import_module("transformers.monkey_patching")
    except ImportError as exc:
        installed = importlib.util.find_spec("transformers") is not None
        raise FeatureUnavailableError(
            f"accel.integrations.transformers.enable: transformers.monkey_patching is missing "
            f"({'transformers is installed but has no patch hook' if installed else 'transformers is not installed'}"
            f": {exc}). enable() needs transformers 5.17 or newer (pip install 'transformers>=5.17'); on older "
            f"versions call patch(model) on each built model.") from None


def _key(name: str) -> str:
    """The patch-mapping key of a class name: transformers matches keys as regular expressions with
    ``re.search``, so an anchored key (``^LlamaRMSNorm$``) keeps ``T5LayerNorm`` from matching ``MT5LayerNorm``."""
    return f"^{name}$"


def enable(*, families: Iterable[str] | None = None, norms: bool = True, mlp: bool = True,
           rope: bool = True) -> dict[str, dict[str, str]]:
    """Register accel's classes with transformers' own patch hook: models that ``from_pretrained`` /
    ``from_config`` build from now on have accel's norms, MLPs and attention.

    ``transformers.monkey_patching.register_patch_mapping`` (transformers 5.17+) swaps the named classes
    only while transformers builds a model; no class is patched globally. The causal-LM class cannot be
    reached that way (transformers instantiates the class ``from_pretrained`` is called on before its hook
    applies): call :func:`patch` on the built model for the loss. A class another library has already
    registered a replacement for is left to it. Calling ``enable`` again adds what is missing.

    Args:
        families: the families to cover (names of :data:`FAMILIES`; default all).
        norms, mlp, rope: which roles to register.

    Returns:
        ``{"registered": {class name: accel op}, "skipped": {class name: reason}}``.

    Raises:
        FeatureUnavailableError: transformers (5.17+, with ``transformers.monkey_patching``) is not installed.
        ValueError: ``families`` names a family accel does not know.
    """
    mp = _monkey_patching()
    _dispatch_keys()
    chosen = list(FAMILIES) if families is None else list(families)
    unknown = sorted(set(chosen) - set(FAMILIES))
    if unknown:
        raise ValueError(f"accel.integrations.transformers.enable: unknown families {unknown}. Known: "
                         f"{', '.join(FAMILIES)}.")
    wanted = {"rms_norm": norms, "mlp": mlp, "attention": rope, "causal_lm": False, "decoder_layer": norms}
    registered: dict[str, str] = {}
    skipped: dict[str, str] = {}
    with _LOCK:
        existing = mp.get_patch_mapping()
        mapping: dict[str, type] = {}
        for family in chosen:
            module_name, classes = FAMILIES[family]
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                skipped.update({name: f"{module_name} does not import ({exc})" for name in classes})
                continue
            for name, (role, variant) in classes.items():
                cls = getattr(module, name, None)
                if role == "causal_lm":
                    skipped[name] = ("the loss needs patch(model): transformers' hook cannot replace the class "
                                     "from_pretrained is called on")
                    continue
                if not wanted[role]:
                    continue
                if cls is None:
                    skipped[name] = f"{module_name} has no {name}"
                    continue
                key = _key(name)
                if key in _ENABLED:
                    registered[name] = OPS[role]
                    continue
                if key in existing or name in existing:
                    skipped[name] = "another replacement is registered for it in transformers' patch mapping"
                    continue
                accel_cls, why = _verdict(cls, role, variant)
                if accel_cls is None:
                    skipped[name] = why
                    continue
                mapping[key] = accel_cls
                registered[name] = OPS[role]
        if mapping:
            mp.register_patch_mapping(mapping)
            try:  # transformers 5.17's hook imports every module alias it finds (image processors: torchvision)
                with mp.apply_patches():
                    pass
            except Exception as exc:
                mp.unregister_patch_mapping(list(mapping))
                _undo_partial_patches(set(mapping.values()))
                raise FeatureUnavailableError(
                    f"accel.integrations.transformers.enable: transformers' patch hook fails in this environment "
                    f"({type(exc).__name__}: {exc}): with any class registered, every from_pretrained/from_config "
                    f"would fail the same way (transformers.monkey_patching.apply_patches lists every transformers "
                    f"module, importing their aliases). Nothing was registered. Install what the error names "
                    f"(torchvision for the image-processor aliases), or call patch(model) on each built "
                    f"model.") from exc
            _ENABLED.update(mapping)
    return {"registered": registered, "skipped": skipped}


def _undo_partial_patches(classes: set[type]) -> None:
    """Put the original classes back where a failed ``apply_patches`` left accel's in a transformers module
    (it restores only after its block, which a failure in its set-up never reaches)."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("transformers") or getattr(module, "__file__", "") is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in classes:
                setattr(module, attr, value.accel_original)


def enabled() -> dict[str, str]:
    """The classes :func:`enable` has registered with transformers' hook: class name -> accel op."""
    with _LOCK:
        return {key.strip("^$"): cls.accel_op for key, cls in _ENABLED.items()}


def disable() -> list[str]:
    """Undo :func:`enable`: unregister accel's classes from transformers' patch hook. Models built while it
    was on keep their accel modules (:func:`unpatch` gives them the originals back).

    transformers' hook also points the models' class-level output recorders (``_can_record_outputs``: which
    module classes ``output_attentions`` records) at the replacement classes when it builds a model; they are
    pointed back at the original classes here, so unpatched models record their attentions again.

    Returns:
        The class names unregistered (empty when nothing was enabled).
    """
    with _LOCK:
        if not _ENABLED:
            return []
        mp = _monkey_patching()
        ours = dict(_ENABLED)
        current = mp.get_patch_mapping()
        keys = [k for k, cls in ours.items() if current.get(k) is cls]
        if keys:
            mp.unregister_patch_mapping(keys)
        _ENABLED.clear()
        _restore_recorders(set(ours.values()))
    return [k.strip("^$") for k in ours]


def _restore_recorders(classes: set[type]) -> None:
    """Point ``_can_record_outputs`` entries of loaded transformers models at the original classes again."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("transformers.models."):
            continue
        for value in list(vars(module).values()):
            recorders = vars(value).get("_can_record_outputs") if isinstance(value, type) else None
            if not isinstance(recorders, dict):
                continue
            for output, spec in list(recorders.items()):
                recorders[output] = _restored(spec, classes)


def _restored(spec: Any, classes: set[type]) -> Any:
    if isinstance(spec, list):
        return [_restored(s, classes) for s in spec]
    if isinstance(spec, type) and spec in classes:
        return spec.accel_original
    target = getattr(spec, "target_class", None)
    if isinstance(target, type) and target in classes:
        spec.target_class = target.accel_original
    return spec


def __getattr__(name: str) -> type:
    """``AccelLlamaRMSNorm`` etc. by name, so that a pickled patched model (``torch.save(model)``) loads."""
    if name.startswith("Accel"):
        wanted = name.removeprefix("Accel")
        for (module_name, class_name), (_, role, variant) in _BY_CLASS.items():
            if class_name == wanted:
                cls = getattr(importlib.import_module(module_name), class_name)
                accel_cls, why = _verdict(cls, role, variant)
                if accel_cls is not None:
                    return accel_cls
                raise AttributeError(f"accel.integrations.transformers: {class_name} has no accel class here: {why}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
