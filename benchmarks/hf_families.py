"""The Hugging Face families :mod:`real_models` adds beside Llama, Qwen3 and GPT-2, and the model FLOPs its MFU
column counts.

Models (built from a config, no downloads; published small checkpoints' shapes with fewer layers, so that
every mode fits an 80 GB card with AdamW; ``--quick``: tiny versions):

- ``gemma2``: ``Gemma2ForCausalLM``, Gemma-2-2B's shapes (d 2304, 8 heads / 4 KV heads of 256, MLP 9216, vocab
  256000, final-logit softcap 30, attention-logit softcap 50, sliding window 4096) with 8 of its 26 layers,
  4 x 2048 tokens. Eager attention in every mode: transformers runs the attention softcap only there (SDPA
  cannot express it), so no mode runs without it;
- ``gemma3``: ``Gemma3ForCausalLM``, Gemma-3-1B's shapes (d 1152, 4 heads / 1 KV head of 256, MLP 6912, vocab
  262144, sliding window 512) with 8 of its 26 layers, SDPA, 4 x 2048 tokens;
- ``phi3``: ``Phi3ForCausalLM``, Phi-3-mini's shapes (d 3072, 32 heads of 96, MLP 8192, vocab 32064) with 8 of
  its 32 layers, 4 x 2048 tokens.
- ``qwen3_moe``: ``Qwen3MoeForCausalLM``, Qwen3-30B-A3B's expert shapes at d 2048 (8 layers, 32 heads / 4 KV
  heads of 128, 64 experts of 768, top-8, vocab 151936), 4 x 2048 tokens;
- ``mixtral``: ``MixtralForCausalLM``, Mixtral's layout at d 2048 (8 layers, 16 heads / 8 KV heads, 8 experts of
  5632, top-2, vocab 32000), 4 x 2048 tokens.
- ``qwen3_moe_bmm``, ``mixtral_bmm``: the same models with transformers' ``batched_mm`` experts implementation
  (the others run its default, ``grouped_mm``): the eager baseline is the faster of the two.

:func:`train_flops`: a training step's model FLOPs, ``6 * tokens * (weights of every nn.Linear)`` plus the
attention's score and value matmuls, ``12 * layers * heads * head_dim * tokens * seq / 2`` (causal: half the
scores; PaLM's appendix B counting, arXiv:2204.02311), no recomputation counted.
"""

from __future__ import annotations

from typing import Any

#: Dense bf16 peak (TFLOP/s) by GPU name fragment, from the vendors' datasheets (SXM parts).
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "B200": 2250.0, "MI300X": 1307.0}
#: Liger-Kernel's patch function per family.
LIGER = {"gemma2": "apply_liger_kernel_to_gemma2", "gemma3": "apply_liger_kernel_to_gemma3_text",
         "phi3": "apply_liger_kernel_to_phi3", "qwen3_moe": "apply_liger_kernel_to_qwen3_moe",
         "mixtral": "apply_liger_kernel_to_mixtral", "qwen3_moe_bmm": None, "mixtral_bmm": None}


def _quick(**extra: Any) -> dict[str, Any]:
    return {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 64, **extra}


def configs(quick: bool) -> dict[str, tuple[str, str, dict[str, Any], str]]:
    """Family -> (config class, causal-LM class, config arguments, attention implementation)."""
    return {
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", _quick(final_logit_softcapping=30.0,
                                                                attn_logit_softcapping=50.0, sliding_window=16)
                   if quick else
                   {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 8, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
                    "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "sliding_window": 4096},
                   "eager"),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", _quick(sliding_window=16) if quick else
                   {"hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 8, "num_attention_heads": 4,
                    "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144, "max_position_embeddings": 32768,
                    "sliding_window": 512}, "sdpa"),
        "phi3": ("Phi3Config", "Phi3ForCausalLM", _quick(pad_token_id=0, head_dim=None) if quick else
                 {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 8, "num_attention_heads": 32,
                  "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "pad_token_id": 0},
                 "sdpa"),
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      _quick(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32) if quick else
                      {"hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 4,
                       "head_dim": 128, "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                       "intermediate_size": 6144, "vocab_size": 151936, "max_position_embeddings": 4096,
                       "decoder_sparse_step": 1, "mlp_only_layers": []}, "sdpa"),
        "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                    _quick(num_local_experts=4, num_experts_per_tok=2, head_dim=None) if quick else
                    {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 8, "num_attention_heads": 16,
                     "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                     "max_position_embeddings": 4096}, "sdpa"),
    }


def build(family: str, quick: bool, device: Any, dtype: Any, make: Any) -> Any:
    """The family's benchmark model through ``make(cls_name, config, batch, seq, device, dtype, attn)``
    (:func:`real_models._hf_causal_lm`)."""
    import transformers

    experts = "batched_mm" if family.endswith("_bmm") else None
    cfg_name, cls_name, kwargs, attn = configs(quick)[family.removesuffix("_bmm")]
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    batch, seq = (2, 32) if quick else (4, 2048)
    config = getattr(transformers, cfg_name)(**kwargs)
    if experts is not None:
        config._experts_implementation = experts
    return make(cls_name, config, batch, seq, device, dtype, attn)


def train_flops(model: Any, tokens: int, seq: int) -> float | None:
    """Model FLOPs of one training step (forward and backward) of a causal LM over ``tokens`` tokens in rows of
    ``seq``, or ``None`` where the model has no transformers config to read the attention's shape from."""
    from torch import nn

    config = getattr(model, "config", None)
    if config is None:
        return None
    config = getattr(config, "text_config", config)
    linear = sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear))
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not (heads and layers and hidden):
        return None
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    # routed experts (3-D parameters, not nn.Linear): each token runs top_k experts' gate, up and down GEMMs
    top_k = getattr(config, "num_experts_per_tok", None)
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts") and hasattr(m, "down_proj")]
    if top_k and experts:
        per_expert = sum(p[0].numel() for p in (experts[0].gate_up_proj, experts[0].down_proj))
        linear += top_k * per_expert * len(experts)
    return 6.0 * tokens * linear + 12.0 * layers * heads * head_dim * tokens * seq / 2


def peak_tflops(device_name: str) -> float | None:
    """The datasheet bf16 dense peak of the GPU named ``device_name`` (:data:`PEAK_BF16_TFLOPS`), or ``None``."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device_name), None)


def gemm_tflops(device: Any, dtype: Any, n: int = 8192, reps: int = 10) -> float | None:
    """The bf16 GEMM rate measured here (``[n, n] @ [n, n]``, median of ``reps``; CUDA only), TFLOP/s."""
    import statistics

    import torch

    if device.type != "cuda":
        return None
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=out)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * n**3 / (statistics.median(times) * 1e-3) / 1e12
