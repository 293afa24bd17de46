"""The model families accel's transformers integration knows: which classes play which role, and what each family
is expected to get (data; the lookups below are one line each).

A class is known by its modeling module and name (``transformers.models.llama.modeling_llama.LlamaRMSNorm``);
knowing it only says which role it could play: each class is still verified by behaviour before a replacement
(:mod:`.verify`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["EXPECTED", "FAMILIES", "FROM_5", "expected", "OPS", "ROLES", "ROUTES", "TESTED", "TINY", "family_of", "known", "original"]

#: The op each role's replacement calls, as :func:`report` names it.
OPS = {"rms_norm": "accel::rms_norm_hf", "mlp": "accel::swiglu", "attention": "accel::rope",
       "causal_lm": "accel.nn.functional.linear_cross_entropy", "decoder_layer": "accel::add_rms_norm_hf",
       "experts": "accel.nn.moe.experts"}
ROLES = tuple(OPS)

#: The transformers releases the integration is tested on (tox envs ``transformers457``, ``cpu`` and
#: ``transformers525``): oldest, the one the GPU image has, newest. Outside this range every role is still
#: verified by behaviour before it is replaced; ``accel doctor`` says the release is untested.
TESTED = ("4.57.6", "5.17.0", "5.25.0")


def _decoder(prefix: str, family: str, norm: str = "llama", mlp: str = "split", layer: str | None = None,
             lm: str | None = None) -> tuple[str, dict[str, tuple[str, str | None]]]:
    module = f"transformers.models.{family}.modeling_{family}"
    return module, {f"{prefix}RMSNorm": ("rms_norm", norm), f"{prefix}MLP": ("mlp", mlp),
                    f"{prefix}Attention": ("attention", None), f"{prefix}DecoderLayer": ("decoder_layer", layer),
                    lm or f"{prefix}ForCausalLM": ("causal_lm", None)}


def _moe(prefix: str, family: str, mlp: bool = False) -> tuple[str, dict[str, tuple[str, str | None]]]:
    """A mixture-of-experts decoder family: the decoder's classes with ``<prefix>Experts`` (transformers 5.x) in
    the MLP's place (``mlp``: a dense ``<prefix>MLP`` too, in Qwen3-MoE's ``mlp_only_layers``)."""
    module, classes = _decoder(prefix, family)
    classes[f"{prefix}Experts"] = ("experts", None)
    if not mlp:
        del classes[f"{prefix}MLP"]
    return module, classes


#: Family -> (modeling module, {class name: (role, variant)}). Variants: the RMSNorm rounding (``"llama"``:
#: normalise in fp32, cast, x weight; ``"gemma"``: ``1 + weight`` in fp32, one cast), the MLP layout
#: (``"split"``: ``gate_proj``/``up_proj``; ``"fused"``: Phi-3's ``gate_up_proj`` halves).
FAMILIES: dict[str, tuple[str, dict[str, tuple[str, str | None]]]] = {
    "llama": _decoder("Llama", "llama"),
    "mistral": _decoder("Mistral", "mistral"),
    "qwen2": _decoder("Qwen2", "qwen2"),
    "qwen3": _decoder("Qwen3", "qwen3"),
    "gemma": _decoder("Gemma", "gemma", norm="gemma", mlp="geglu"),
    "gemma2": _decoder("Gemma2", "gemma2", norm="gemma", mlp="geglu", layer="sandwich"),
    "gemma3": _decoder("Gemma3", "gemma3", norm="gemma", mlp="geglu", layer="sandwich"),
    "phi3": _decoder("Phi3", "phi3", mlp="fused", layer="dropout"),
    "qwen3_moe": _moe("Qwen3Moe", "qwen3_moe", mlp=True),
    "olmoe": _moe("Olmoe", "olmoe"),
    "mixtral": _moe("Mixtral", "mixtral"),
    "gpt_oss": _moe("GptOss", "gpt_oss"),
    "gpt2": ("transformers.models.gpt2.modeling_gpt2", {"GPT2LMHeadModel": ("causal_lm", None)}),
    "bert": ("transformers.models.bert.modeling_bert", {}),
    "t5": ("transformers.models.t5.modeling_t5", {"T5LayerNorm": ("rms_norm", "llama")}),
}

#: The roles each family gets on every tested release (with the configs of :data:`TINY`): a role of this set that
#: a class loses (its verification fails) is said once as an ``IntegrationWarning``; the others are only listed
#: by :func:`report` (Gemma's MLP is GeGLU, ``accel::geglu``; Gemma 2 and 3 layers are sandwich-norm layers, Phi-3's
#: hold a dropout on each branch; Gemma 2's capped logits are the loss op's softcap).
_DENSE = frozenset(ROLES) - {"experts"}
EXPECTED: dict[str, frozenset[str]] = {
    **{f: _DENSE for f in ("llama", "mistral", "qwen2", "qwen3")},
    **{f: _DENSE for f in ("gemma", "gemma2", "gemma3", "phi3")},
    **{f: frozenset(ROLES) - {"mlp"} for f in ("qwen3_moe", "olmoe", "mixtral")},
    # GPT-OSS: its RMSNorm rounds otherwise than Llama's, and its attention (sinks, its own RoPE) is not the pattern
    "gpt_oss": frozenset({"experts", "decoder_layer", "causal_lm"}),
    "gpt2": frozenset({"causal_lm"}), "bert": frozenset(), "t5": frozenset({"rms_norm"}),
}

_DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64}

#: ``(family, role)`` pairs a family gets from transformers 5.0 on only (4.x has no class of the experts role:
#: its experts are ``nn.ModuleList``s, GPT-OSS's an undecorated class; its MoE blocks return ``(hidden,
#: router_logits)``, which the decoder layer's replacement does not compute; OLMoE's 4.x attention normalises the
#: whole q/k projections before the head split): :func:`expected` leaves them out on 4.x.
FROM_5 = frozenset({*((f, "experts") for f in ("qwen3_moe", "olmoe", "mixtral", "gpt_oss")),
                    *((f, "decoder_layer") for f in ("qwen3_moe", "olmoe", "mixtral")), ("olmoe", "attention")})


def expected(family: str | None, major: int) -> frozenset[str]:
    """The roles of :data:`EXPECTED` that ``family`` gets on a transformers release of major version ``major``."""
    roles = EXPECTED.get(family or "", frozenset())
    return roles if major >= 5 else frozenset(r for r in roles if (family, r) not in FROM_5)


_EXPERTS = {"num_experts": 4, "num_experts_per_tok": 2}

#: Family -> (the config class in ``transformers``, the causal-LM class verification builds, tiny config
#: arguments): the instance a role is verified on where the model's own config cannot be made tiny.
TINY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER),
    "mistral": ("MistralConfig", "MistralForCausalLM", _DECODER),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _DECODER),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_DECODER, "head_dim": 8}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_DECODER, "head_dim": 8}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**_DECODER, "head_dim": 8}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {**_DECODER, "head_dim": 8}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_DECODER, "pad_token_id": 0}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {**_DECODER, **_EXPERTS, "head_dim": 8,
                                                             "moe_intermediate_size": 16, "decoder_sparse_step": 1,
                                                             "mlp_only_layers": [1]}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", {**_DECODER, **_EXPERTS, "intermediate_size": 16}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**_DECODER, **_EXPERTS, "num_local_experts": 4}),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", {**_DECODER, **_EXPERTS, "head_dim": 8, "num_local_experts": 4,
                                                      "intermediate_size": 16}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 64,
                                               "n_positions": 64}),
}

#: Modules that reach accel's kernels through ATen without a patch: class -> the ATen op it calls.
ROUTES: dict[type, str] = {nn.LayerNorm: "aten::native_layer_norm", nn.RMSNorm: "aten::_fused_rms_norm"}

_BY_CLASS: dict[tuple[str, str], tuple[str, str, str | None]] = {
    (module, name): (family, role, variant)
    for family, (module, classes) in FAMILIES.items() for name, (role, variant) in classes.items()}
_MODULES = {module: family for family, (module, _) in FAMILIES.items()}


def known(cls: type) -> tuple[str, str, str | None] | None:
    """``(family, role, variant)`` of a transformers class accel covers, else ``None``."""
    return _BY_CLASS.get((cls.__module__, cls.__name__))


def family_of(cls: type) -> str | None:
    """The family whose modeling module defines ``cls``, else ``None``."""
    return _MODULES.get(cls.__module__)


def original(cls: type) -> type:
    """The class an accel subclass replaced (``cls`` itself for any other class)."""
    return cls.__dict__.get("accel_original", cls)
