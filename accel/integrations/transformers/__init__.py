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
``*MLP`` (gate/up)     ``accel::swiglu``                                where the activation computes SiLU
``Gemma*MLP``          ``accel::geglu``                                 where it computes ``gelu(approximate=
                                                                        "tanh")`` (each instance checked)
``*DecoderLayer``      ``accel::add_rms_norm_hf``: each residual add    the model's add, then its norm's rounding;
(Llama, Mistral,       with the RMSNorm that reads the sum (the next    where the layer's norms are replaced and
Qwen2/3, Gemma 1-3,    layer's input norm, the model's final norm;      unhooked (else the layer's own code)
Phi-3)                 the post-attention norm, Gemma 2/3's
                       pre-feed-forward norm)
``*Attention``         ``accel::rope`` (q and k in one call)            HF's ``apply_rotary_pos_emb`` semantics
(every decoder         and, where verified, the whole block as one      in a training call with SDPA, no cache,
family)                autograd node (:mod:`.._attention`)              mask or dropout (else the class's code)
``*ForCausalLM``,      accel's chunked loss (``lm_head_loss``: the      when ``labels`` are given; logits are then
``GPT2LMHeadModel``    logits are never stored; the loss in fp32;       ``None`` unless ``return_logits=True``
                       Gemma 2's final-logit softcap inside it)
``nn.LayerNorm``       ``aten::native_layer_norm`` (no patch needed)    GPT-2, BERT: already routes
=====================  ===============================================  ==========================================

How a module is replaced: its class becomes an accel subclass of its own class (``module.__class__ =
AccelLlamaRMSNorm``, a class named like the original: transformers reads class names), so the module object, its ``Parameter`` objects, buffers, hooks, config and
``state_dict`` keys stay the same (optimizers and FSDP wrapping are unaffected); :func:`unpatch` sets the
class back. Nothing global changes: no modeling-module function or class is rebound. The attention's
subclass runs a copy of the class's own ``forward`` code (its decorators kept) whose global
``apply_rotary_pos_emb`` is accel's (the copy has its own globals dict, taken at the first patch: a later
monkey patch of the modeling module does not reach it); the causal LM's computes the loss
from the last hidden states. A replacement is made only where it is verified by behaviour (:mod:`.verify`): each
RMSNorm class and each ``apply_rotary_pos_emb`` is run on small CPU tensors against accel's reference (bit for
bit, fp32 and bf16), and every other role's replacement, run on a tiny instance of the same class (the model's
own config kinds, tiny sizes, accel's references standing in for kernels), must give the class's own loss,
gradients and logits; the activation must compute SiLU (GELU-tanh for Gemma). Nothing is compared with a copy of one release's code,
so a transformers release that edits decorators or argument names keeps every role that still computes the
same. Everything else is left as it is, :func:`report` says why, and a role a family is expected to get but
loses on the installed release is said once (``IntegrationWarning``). Modules whose ``forward`` is set on the
instance (the ``kernels`` package's ``kernelize``, ``use_kernels=True``) are left to it.

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

import importlib

from .families import EXPECTED, FAMILIES, OPS, ROLES, ROUTES, TESTED
from .guards import accel_takes
from .hub import disable, enable, enabled
from .patching import patch, unpatch
from .report import PatchReport, report
from .verify import verdict

__all__ = ["EXPECTED", "FAMILIES", "OPS", "ROLES", "ROUTES", "TESTED", "PatchReport", "accel_takes", "disable",
           "enable", "enabled", "patch", "report", "unpatch"]

#: Packages this module's docstring examples need (tests/cli/test_docs.py skips them without it).
__doctest_requires__ = ("transformers",)


def __getattr__(name: str) -> type:
    """``AccelLlamaRMSNorm`` etc. by name, so that a pickled patched model (``torch.save(model)``) loads; and
    :class:`.callback.AccelCallback` (imported when asked for: it imports ``transformers``)."""
    if name == "AccelCallback":
        from .callback import AccelCallback

        return AccelCallback
    if name.startswith("Accel"):
        wanted = name.removeprefix("Accel")
        for family, (module_name, classes) in FAMILIES.items():
            for class_name, (role, variant) in classes.items():
                if class_name == wanted:
                    cls = getattr(importlib.import_module(module_name), class_name)
                    accel_cls, why = verdict(cls, role, variant)  # verified here too (a fresh process)
                    if accel_cls is not None:
                        return accel_cls
                    raise AttributeError(f"accel.integrations.transformers: {class_name} has no accel class here: "
                                         f"{why}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
