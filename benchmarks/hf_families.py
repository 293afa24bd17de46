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
         "phi3": "apply_liger_kernel_to_phi3"}


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
    }


def build(family: str, quick: bool, device: Any, dtype: Any, make: Any) -> Any:
    """The family's benchmark model through ``make(cls_name, config, batch, seq, device, dtype, attn)``
    (:func:`real_models._hf_causal_lm`)."""
    import transformers

    cfg_name, cls_name, kwargs, attn = configs(quick)[family]
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    batch, seq = (2, 32) if quick else (4, 2048)
    return make(cls_name, getattr(transformers, cfg_name)(**kwargs), batch, seq, device, dtype, attn)


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
