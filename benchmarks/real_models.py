"""Whole models, one training step (forward, backward, optimizer step), per mode, each model x mode in its own process.

Models (bf16 on a GPU; ``--quick``: tiny versions in fp32 on whatever device there is, for a smoke test):

- ``hf_llama``: Hugging Face ``LlamaForCausalLM``, 8 layers, d 2048, GQA 16/8 heads, MLP 5632, vocab 32000,
  4 x 2048 tokens (issue 22's model);
- ``titan_llama``: the same model written with ``nn.RMSNorm`` + SDPA (torchtitan style, defined here);
- ``vit_b16``: timm ``vit_base_patch16_224``, batch 256, 1000 classes;
- ``gpt2``: Hugging Face ``GPT2LMHeadModel``, d 1536, 12 layers, 12 heads, vocab 50257, 8 x 1024 tokens;
- ``qwen3``: Hugging Face ``Qwen3ForCausalLM``, Qwen3-0.6B-style (d 1024, 12 layers, 16/8 heads of 128,
  MLP 3072, vocab 151936, tied embeddings), 4 x 2048 tokens;
- ``gemma2``, ``gemma3``, ``phi3``: Gemma-2-2B, Gemma-3-1B and Phi-3-mini shapes with 8 layers, 4 x 2048 tokens
  (:mod:`hf_families`: Gemma 2 with its attention softcapping, eager attention, in every mode).

Every line of a causal LM also carries its MFU: the step's model FLOPs (:func:`hf_families.train_flops`) over
its time and the GPU's datasheet bf16 dense peak (``mfu``), and the same FLOP rate over a bf16 GEMM's measured
in the same process (``pct_gemm``).

Modes:

- ``eager``: the model as written;
- ``accel``: ``accel.kernels.install()`` and ``accel.integrations.transformers.patch(model)`` (Hugging Face
  models; the others have nothing to patch and get the kernels alone);
- ``liger``: Liger-Kernel's ``apply_liger_kernel_to_<family>()`` before the model is built (it patches the
  modeling classes globally: one more reason for one process per mode); models Liger has no function for
  are skipped with the reason;
- ``compile``: ``torch.compile(model)``;
- ``accel_compile``: the ``accel`` set-up, then ``accel.compile(model)`` (accel's ops are custom ops: they
  stay in the compiled graph as opaque calls that route to accel's kernels).

Per run: the median ms per step over ``--steps`` (default 20, at least 15) steps after ``--warmup`` (default
5) steps, each step timed from its start to a device synchronise after the optimizer step; the peak memory
(``torch.cuda.max_memory_allocated`` over the whole run, weights and optimizer state included); the loss of
the first step (every mode starts from the same seed, weights and batch) and every step's loss (the curve,
``losses``). The same fixed batch is used every step. ``--optimizer``: ``adamw`` (the default; fused on CUDA,
two state tensors per parameter) or ``sgd`` (SGD with momentum 0.9, fused on CUDA: one state tensor per
parameter, so every mode's peak is one parameter-sized copy lower; issue 22's table of peaks matches this
basis: its eager, Liger and ``torch.compile`` peaks are ours under AdamW less 0.96-0.98 GiB, and HF Llama's
parameters take 0.95 GiB in bf16).

Usage::

    python benchmarks/real_models.py --model hf_llama --mode accel           # one run, one JSON line on stdout
    python benchmarks/real_models.py --all --out benchmarks/results/h200/runs/<name>/real_models.jsonl
    python benchmarks/real_models.py --all --models hf_llama,qwen3 --modes eager,accel --out FILE
    python benchmarks/real_models.py --all --quick --out /tmp/real_models.jsonl   # CPU smoke test
    python benchmarks/real_models.py --ops                                    # each accel op alone, fwd+bwd

``--all`` spawns one fresh process per model x mode (eager first, so that every other line can carry
``speedup_vs_eager``) and appends one JSON line per run to ``--out``: ``model, mode, ms, speedup_vs_eager,
peak_gib, loss`` and ``losses, steps, warmup, dtype, device, torch, transformers, patch`` (what ``patch``
replaced), or ``skipped``/``error`` with the reason. A child that fails or runs out of time gives an
``error`` line; the driver goes on with the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ``python benchmarks/real_models.py`` puts this folder first on sys.path; this script imports nothing from it (a
# module here named like a distribution would shadow it: ``kernels``, which transformers 5.25+ imports)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]

MODELS = ("hf_llama", "titan_llama", "titan_llama_lm", "titan_llama_128k", "vit_b16", "gpt2", "qwen3", "gemma2", "gemma3", "phi3", "qwen3_moe", "mixtral",
          "qwen3_moe_bmm", "mixtral_bmm")
MODES = ("eager", "accel", "liger", "compile", "accel_compile")
#: What ``accel.integrations.transformers.patch`` may replace (its keyword arguments), all by default.
PATCH_ROLES = ("norms", "mlp", "rope", "loss")
#: the fewest back-to-back steps (after the timed ones) that ``ms_pipelined`` is reported from
PIPELINED_MIN_STEPS = 10
OPTIMIZERS = ("adamw", "sgd")
#: Liger-Kernel's patch function per model (``None``: Liger has none).
LIGER = {"hf_llama": "apply_liger_kernel_to_llama", "qwen3": "apply_liger_kernel_to_qwen3", "titan_llama": None,
         "titan_llama_lm": None, "titan_llama_128k": None,
         "vit_b16": None, "gpt2": None, "gemma2": "apply_liger_kernel_to_gemma2",
         "gemma3": "apply_liger_kernel_to_gemma3_text", "phi3": "apply_liger_kernel_to_phi3",
         "qwen3_moe": "apply_liger_kernel_to_qwen3_moe", "mixtral": "apply_liger_kernel_to_mixtral",
         "qwen3_moe_bmm": None, "mixtral_bmm": None}


def _families():
    """:mod:`hf_families`, loaded from this file's folder (which this script keeps off ``sys.path``)."""
    spec = importlib.util.spec_from_file_location("hf_families", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "hf_families.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Bench:
    """One model ready to train: the module, its fixed batch, and the loss of one forward."""

    model: Any
    batch: dict[str, Any]
    loss: Callable[[Any, dict[str, Any]], Any]
    hf: bool  # a Hugging Face model: accel's patch applies


# ------------------------------------------------------------------------------------------------ models
def _hf_causal_lm(cls_name: str, config: Any, batch: int, seq: int, device, dtype, attn: str = "sdpa") -> Bench:
    import torch
    import transformers

    config._attn_implementation = attn
    model = getattr(transformers, cls_name)(config).to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g).to(device)

    def loss(model, b):
        return model(input_ids=b["ids"], labels=b["ids"]).loss

    return Bench(model, {"ids": ids}, loss, hf=True)


def build_hf_llama(quick: bool, device, dtype) -> Bench:
    import transformers

    size = ({"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 64} if quick else
            {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 8, "num_attention_heads": 16,
             "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048})
    batch, seq = (2, 32) if quick else (4, 2048)
    return _hf_causal_lm("LlamaForCausalLM", transformers.LlamaConfig(**size), batch, seq, device, dtype)


def build_qwen3(quick: bool, device, dtype) -> Bench:
    import transformers

    size = ({"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 64} if quick else
            {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 2048})
    batch, seq = (2, 32) if quick else (4, 2048)
    config = transformers.Qwen3Config(**size, tie_word_embeddings=True)
    return _hf_causal_lm("Qwen3ForCausalLM", config, batch, seq, device, dtype)


def build_gpt2(quick: bool, device, dtype) -> Bench:
    import transformers

    size = ({"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 320, "n_positions": 64} if quick else
            {"n_embd": 1536, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024})
    batch, seq = (2, 32) if quick else (8, 1024)
    return _hf_causal_lm("GPT2LMHeadModel", transformers.GPT2Config(**size), batch, seq, device, dtype)


def build_vit_b16(quick: bool, device, dtype) -> Bench:
    import timm
    import torch
    import torch.nn.functional as F

    if quick:
        model = timm.models.vision_transformer.VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2,
                                                                 num_heads=4, num_classes=10)
    else:
        model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000)
    model = model.to(device=device, dtype=dtype)
    batch, size, classes = (4, 32, 10) if quick else (256, 224, 1000)
    g = torch.Generator().manual_seed(1)
    images = torch.randn(batch, 3, size, size, generator=g).to(device=device, dtype=dtype)
    labels = torch.randint(0, classes, (batch,), generator=g).to(device)

    def loss(model, b):
        return F.cross_entropy(model(b["images"]).float(), b["labels"])

    return Bench(model, {"images": images, "labels": labels}, loss, hf=False)


def build_titan_llama(quick: bool, device, dtype, vocab_size: int | None = None, loss_inside: bool = False) -> Bench:
    """torchtitan-style Llama (8 x d2048, vocab 32000 or ``vocab_size``); ``loss_inside``: its ``forward`` returns
    the shifted cross-entropy (the compiled unit holds head and loss, as ``accel.compile``'s loss pass needs),
    else the loss is computed outside the model."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, layers, heads, kv, ffn, vocab = (64, 2, 4, 2, 176, 320) if quick else (2048, 8, 16, 8, 5632, 32000)
    vocab = vocab_size if vocab_size and not quick else vocab
    batch, seq = (2, 32) if quick else (4, 2048)
    head = d // heads

    def rotate(x, cos, sin):  # rotate-half RoPE, as the HF model computes it
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(d, heads * head, bias=False)
            self.wk = nn.Linear(d, kv * head, bias=False)
            self.wv = nn.Linear(d, kv * head, bias=False)
            self.wo = nn.Linear(heads * head, d, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, heads, head).transpose(1, 2)
            k = self.wk(x).view(b, s, kv, head).transpose(1, 2)
            v = self.wv(x).view(b, s, kv, head).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.wo(out.transpose(1, 2).reshape(b, s, heads * head))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
            self.attention = Attention()
            self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
            self.w2 = nn.Linear(ffn, d, bias=False)

        def forward(self, x, cos, sin):
            x = x + self.attention(self.attention_norm(x), cos, sin)
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.output = nn.Linear(d, vocab, bias=False)
            inv = 1.0 / (10000.0 ** (torch.arange(0, head, 2).float() / head))
            ang = torch.outer(torch.arange(seq).float(), inv)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, ids, labels=None):
            h = self.tok_embeddings(ids)
            cos, sin = self.cos.to(h.dtype), self.sin.to(h.dtype)
            for layer in self.layers:
                h = layer(h, cos, sin)
            logits = self.output(self.norm(h))
            if labels is None:
                return logits
            return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())

    model = Transformer().to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g).to(device)

    def loss(model, b):
        if loss_inside:
            return model(b["ids"], b["ids"])
        logits = model(b["ids"])
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), b["ids"][:, 1:].flatten())

    return Bench(model, {"ids": ids}, loss, hf=False)


def _family_builder(family: str) -> Callable[..., Bench]:
    def build(quick: bool, device, dtype) -> Bench:
        return _families().build(family, quick, device, dtype, _hf_causal_lm)
    return build


BUILDERS = {"hf_llama": build_hf_llama, "titan_llama": build_titan_llama, "vit_b16": build_vit_b16,
            "titan_llama_lm": lambda q, dev, dt: build_titan_llama(q, dev, dt, loss_inside=True),
            "titan_llama_128k": lambda q, dev, dt: build_titan_llama(q, dev, dt, vocab_size=128256, loss_inside=True),
            "gpt2": build_gpt2, "qwen3": build_qwen3,
            **{f: _family_builder(f) for f in ("gemma2", "gemma3", "phi3", "qwen3_moe", "mixtral", "qwen3_moe_bmm",
                                               "mixtral_bmm")}}
NEEDS = {"hf_llama": "transformers", "qwen3": "transformers", "gpt2": "transformers", "vit_b16": "timm",
         "titan_llama": None, "titan_llama_lm": None, "titan_llama_128k": None, **{f: "transformers" for f in ("gemma2", "gemma3", "phi3", "qwen3_moe", "mixtral",
                                                              "qwen3_moe_bmm", "mixtral_bmm")}}


# ------------------------------------------------------------------------------------------- one run
def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("torch", "transformers", "timm", "liger-kernel", "triton"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


# Kernel-name patterns of the profile's families, first match wins (cuDNN/flash attention, cuBLAS/CUTLASS
# names, the fused AdamW, ATen's copy/reduce/elementwise templates).
FAMILIES = (("attention", ("flash", "fmha", "cudnn", "attention")),  # before matmul: FA2 names hold "cutlass"
            ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas")),
            ("optimizer", ("multi_tensor", "adam")),
            ("copy/cast", ("copy", "cat_", "catarray")),
            ("reduction", ("reduce",)),
            ("elementwise", ("elementwise", "vectorized")))


def profile_steps(step: Callable[[], Any], steps: int, device) -> dict[str, Any]:
    """``steps`` more training steps under ``torch.profiler``: per step, the device time of each kernel name
    (CPU op self time on a CPU device), the top 30 with their calls per step, the totals per
    :data:`FAMILIES` family, in ms, and ``launches``: kernels (CPU ops) per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    per_name: dict[str, list[float]] = {}
    for ev in prof.key_averages():
        us = ev.self_device_time_total if cuda else ev.self_cpu_time_total
        if us > 0 and (not cuda or ev.device_type == torch.autograd.DeviceType.CUDA):
            entry = per_name.setdefault(ev.key, [0.0, 0.0])
            entry[0] += us / 1e3 / steps
            entry[1] += ev.count / steps
    families: dict[str, float] = {}
    for name, (ms, _) in per_name.items():
        low = name.lower()
        fam = next((f for f, keys in FAMILIES if any(k in low for k in keys)), "other")
        families[fam] = families.get(fam, 0.0) + ms
    top = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:30]
    return {"steps": steps, "total_ms": round(sum(v[0] for v in per_name.values()), 3),
            "launches": round(sum(v[1] for v in per_name.values()), 1),
            "families_ms": {f: round(v, 3) for f, v in sorted(families.items(), key=lambda kv: -kv[1])},
            "top": [[name[:120], round(ms, 3), round(calls, 2)] for name, (ms, calls) in top]}


def _utilisation(bench: Bench, ms: float, device, dtype) -> dict[str, Any]:
    """``flops`` (model FLOPs per step), ``mfu`` (their rate over the GPU's datasheet bf16 peak) and ``pct_gemm``
    (over a bf16 GEMM's rate measured now, ``gemm_tflops``), each ``None`` where it cannot be had."""
    import torch

    families = _families()
    ids = bench.batch["ids"]
    flops = families.train_flops(bench.model, ids.numel(), ids.shape[-1])
    if flops is None:
        return {}
    rate = flops / (ms * 1e-3) / 1e12
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    peak = families.peak_tflops(name)
    gemm = families.gemm_tflops(device, dtype)
    return {"flops": flops, "tflops": round(rate, 1), "mfu": None if peak is None else round(rate / peak, 4),
            "gemm_tflops": None if gemm is None else round(gemm, 1),
            "pct_gemm": None if gemm is None else round(100 * rate / gemm, 1)}


def run_one(model_name: str, mode: str, *, quick: bool, steps: int, warmup: int, device_spec: str | None,
            eager_ms: float | None, loss_chunk: int | None = None, curve_steps: int = 50,
            compile_backend: str = "inductor", profile: int = 0, mlp_recompute: bool = True,
            trace: bool = False, host_profile: int = 0, patch_roles: tuple[str, ...] = PATCH_ROLES,
            optimizer: str = "adamw") -> dict[str, Any]:
    """One model x mode in this process: the JSON-ready result (``skipped`` with a reason where it cannot run).

    Runs ``max(warmup + steps, curve_steps)`` training steps on the fixed batch: the ``steps`` after ``warmup``
    are timed (median ``ms``), every step's loss is kept (``losses``: the loss curve). ``profile`` > 0: that many
    more steps under the profiler (:func:`profile_steps`, as ``profile`` in the result). ``trace`` (CUDA): one
    more step under the profiler with its phases labelled (:func:`step_trace.trace`, as ``trace``) and one
    with the memory allocated and the peak after each phase (``memory_phases``, GiB)."""
    import torch

    import accel

    device = accel.device(device_spec) if device_spec else accel.device()
    dtype = torch.float32 if quick and device.type == "cpu" else torch.bfloat16
    base = {"model": model_name, "mode": mode, "quick": quick, "device": str(device),
            "dtype": str(dtype).removeprefix("torch."), "versions": _versions()}
    need = NEEDS[model_name]
    if need is not None and importlib.util.find_spec(need) is None:
        return {**base, "skipped": f"{need} is not installed"}
    patch_report = None
    if mode == "liger":
        fn_name = LIGER[model_name]
        if fn_name is None:
            return {**base, "skipped": f"Liger-Kernel has no patch function for {model_name}"}
        try:
            import liger_kernel.transformers as liger
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason to skip the peer
            return {**base, "skipped": f"liger_kernel does not import ({type(exc).__name__}: {exc})"}
        getattr(liger, fn_name)()  # patches the modeling classes, so it comes before the model is built
    if mode in ("accel", "accel_compile"):
        import accel.kernels as ak

        base["kernels_installed"] = ak.install()
    torch.manual_seed(0)
    bench = BUILDERS[model_name](quick, device, dtype)
    model = bench.model
    if mode in ("accel", "accel_compile") and bench.hf:
        from accel.integrations import transformers as accel_hf

        options = None
        if loss_chunk:
            from accel.nn import LinearCrossEntropyOptions

            options = LinearCrossEntropyOptions(batch_chunk_size=loss_chunk, chunking_method=None)
            base["loss_chunk"] = loss_chunk
        accel_hf.patch(model, loss_options=options, mlp_recompute=mlp_recompute,
                       **{role: role in patch_roles for role in PATCH_ROLES})
        if not mlp_recompute:
            base["mlp_recompute"] = False
        if tuple(patch_roles) != PATCH_ROLES:
            base["patch_roles"] = list(patch_roles)
        patch_report = accel_hf.report(model).as_dict()
    model.train()
    if mode == "compile":
        model = torch.compile(model, backend=compile_backend)
    elif mode == "accel_compile":
        model = accel.compile(model, backend=compile_backend)
    if mode in ("compile", "accel_compile"):
        base["compile_backend"] = compile_backend
    fused = device.type == "cuda"
    if optimizer == "sgd":
        opt = torch.optim.SGD(bench.model.parameters(), lr=1e-4, momentum=0.9, fused=fused)
        base["optimizer"] = optimizer
    else:
        opt = torch.optim.AdamW(bench.model.parameters(), lr=1e-4, fused=fused)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(marks: list[float] | None = None):
        loss = bench.loss(model, bench.batch)
        if marks is not None:
            marks.append(time.perf_counter())
        loss.backward()
        if marks is not None:
            marks.append(time.perf_counter())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if marks is not None:
            marks.append(time.perf_counter())
        return loss.detach()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times, phases = [], [], []
    # the steps after the timed ones (the rest of the loss curve) run back to back, as a training loop that never
    # waits for the device does: CUDA events at each step's start time them on the device's own timeline
    events = []
    for i in range(max(warmup + steps, curve_steps)):
        timed = warmup <= i < warmup + steps
        if i >= warmup + steps and device.type == "cuda":
            events.append(torch.cuda.Event(enable_timing=True))
            events[-1].record()
        marks: list[float] | None = None
        if timed:
            sync()
            marks = [time.perf_counter()]
        losses.append(step(marks))
        if marks is not None:
            sync()
            times.append((time.perf_counter() - marks[0]) * 1e3)
            phases.append([(b - a) * 1e3 for a, b in zip(marks, marks[1:])])
    pipelined = None
    if len(events) >= PIPELINED_MIN_STEPS:
        events.append(torch.cuda.Event(enable_timing=True))
        events[-1].record()
        sync()
        gaps = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
        pipelined = {"ms_pipelined": round(statistics.median(gaps), 3), "pipelined_steps": len(gaps)}
    ms = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    values = [float(v) for v in losses]
    speedup = 1.0 if mode == "eager" else None if not eager_ms else round(eager_ms / ms, 4)
    result = {**base, "ms": round(ms, 3), "speedup_vs_eager": speedup,
              "peak_gib": None if peak is None else round(peak, 3), "loss": values[0], "losses": values,
              "steps": steps, "warmup": warmup, "curve_steps": len(values), "ms_all": [round(t, 3) for t in times],
              **host_times(phases), **(pipelined or {})}
    if bench.hf and "ids" in bench.batch:
        result.update(_utilisation(bench, ms, device, dtype))
    if patch_report is not None:
        result["patch"] = patch_report
    if mode == "accel_compile":  # what accel.compile's loss pass rewrote in the captured graphs, and what it left
        loss_pass = accel.loss_pass_report(model)
        result["loss_pass"] = {"rewritten": loss_pass.rewritten, "left": [list(x) for x in loss_pass.left]}
    if mode in ("accel", "accel_compile"):
        import accel.kernels as ak

        result["routed"] = {o.name: o.routed for o in ak.overrides()}
        result["declined"] = {o.name: o.declined for o in ak.overrides() if o.declined}
        if mode == "accel" and not any(result["routed"].values()):
            # every kernel declined: the figures are the model's own code (a missing dependency made every
            # cond raise on the H200 once); said in the result so that no table takes them for accel's
            result["warning"] = "no accel kernel took any call in this run (see declined and stderr_warnings)"
    if profile > 0:  # after the routed counts: those are of the timed run's steps alone
        result["profile"] = profile_steps(step, profile, device)
    if trace and device.type == "cuda":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import step_trace

        def phased(memory: dict[str, float] | None = None):
            def mark(phase):
                if memory is not None:
                    torch.cuda.synchronize(device)
                    memory[phase] = round(torch.cuda.memory_allocated(device) / 2**30, 3)
                    memory[phase + "_peak"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
                    torch.cuda.reset_peak_memory_stats(device)

            mark("start")
            with torch.profiler.record_function("step.forward"):
                loss = bench.loss(model, bench.batch)
            mark("forward")
            with torch.profiler.record_function("step.backward"):
                loss.backward()
            mark("backward")
            with torch.profiler.record_function("step.optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            mark("optimizer")

        try:  # a diagnostic: its failure is recorded beside the run's figures, not in place of them
            result["trace"] = step_trace.trace(phased, device)
            memory: dict[str, float] = {}
            phased(memory)
            result["memory_phases"] = memory
        except Exception as exc:  # noqa: BLE001
            result["trace_error"] = f"{type(exc).__name__}: {exc}"
    if host_profile > 0:
        result["host_profile"] = host_profile_steps(step, host_profile, sync)
    if not all(math.isfinite(v) for v in values):
        result["error"] = "a loss was not finite"
    return result


def host_times(phases: list[list[float]]) -> dict[str, Any]:
    """The host's side of the timed steps: ``host_ms``, the median time from a step's start until its Python
    returned (the device still running what was launched), and ``host_phase_ms``, the medians of its forward,
    backward and optimizer parts. ``host_ms`` well under ``ms``: the device was the slower side and its idle
    time within the step is launch gaps or a device-to-host read, not the host. ``host_ms`` near ``ms``:
    the host was the slower side (or waited on such a read)."""
    if not phases:
        return {}
    return {"host_ms": round(statistics.median(sum(p) for p in phases), 3),
            "host_phase_ms": {name: round(statistics.median(p[i] for p in phases), 3)
                              for i, name in enumerate(("forward", "backward", "optimizer"))}}


def host_profile_steps(step: Callable[[], Any], steps: int, sync: Callable[[], None], top: int = 45) -> dict[str, Any]:
    """``steps`` more training steps under ``cProfile`` (the host's Python time, not the device's): the
    functions with the most own time and those with the most cumulative time, per step (``[where, calls, own
    ms, cumulative ms]``), and the
    step's host ms under the profiler (slower than unprofiled; compare rows, not steps)."""
    import cProfile
    import pstats

    sync()
    prof = cProfile.Profile()
    began = time.perf_counter()
    prof.enable()
    for _ in range(steps):
        step()
        sync()
    prof.disable()
    wall = (time.perf_counter() - began) * 1e3 / steps
    stats = pstats.Stats(prof)
    rows = []
    for (path, line, name), (_cc, calls, own, cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{'/'.join(path.split('/')[-2:])}:{line}({name})"
        rows.append([where, calls // steps, round(own * 1e3 / steps, 3), round(cum * 1e3 / steps, 3)])
    by_cumulative = sorted(rows, key=lambda r: -r[3])[:top]
    rows.sort(key=lambda r: -r[2])
    return {"steps": steps, "host_ms_per_step": round(wall, 3), "by_own_time": rows[:top],
            "by_cumulative_time": by_cumulative}


# ------------------------------------------------------------------------------------ the ops alone
def time_ops(*, quick: bool, reps: int, device_spec: str | None) -> list[dict[str, Any]]:
    """Forward + backward of each accel op at hf_llama's shapes (bf16): the Hugging Face eager code, the op with
    accel's kernels disabled (its eager reference) and the op routed to accel's kernel, through autograd as a
    model calls them; ms per call, the median of 5 samples of ``reps`` back-to-back calls (host time counts
    where the host is the slower side)."""
    import accel.kernels as ak
    import torch
    import torch.nn.functional as F
    from accel.kernels.ops.add_rms_norm_hf import op as arn
    from accel.kernels.ops.rms_norm_hf import op as rn
    from accel.kernels.ops.rope import op as rope
    from accel.kernels.ops.swiglu import op as sw

    import accel

    device = accel.device(device_spec) if device_spec else accel.device()
    dt = torch.float32 if quick and device.type == "cpu" else torch.bfloat16
    tokens, d, ffn, hq, hk, hd = (64, 64, 176, 4, 2, 16) if quick else (8192, 2048, 5632, 16, 8, 128)
    installed = ak.install()
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dt).requires_grad_()

    x, w, a, b, r = rand(tokens, d), rand(d), rand(tokens, ffn), rand(tokens, ffn), rand(tokens, d)
    q = rand(4, tokens // 4, hq, hd).detach().transpose(1, 2).requires_grad_()
    k = rand(4, tokens // 4, hk, hd).detach().transpose(1, 2).requires_grad_()
    cos, sin = (torch.randn(1, tokens // 4, hd, generator=g).to(device=device, dtype=dt) for _ in range(2))

    def hf_norm(x, w):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return w * h.to(x.dtype)

    def hf_rope(q, k):
        def rot(t):
            return torch.cat((-t[..., hd // 2:], t[..., : hd // 2]), dim=-1)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * c + rot(q) * s, k * c + rot(k) * s

    def hf_add_norm(x, r, w):  # a decoder layer's residual add and the norm that reads the sum
        s = r + x
        return s, hf_norm(s, w)

    def unfused_add_norm(x, r, w):  # the same with accel's norm alone (the add a separate kernel)
        s = r + x
        return s, rn.rms_norm(s, w, 1e-6)

    # name -> (arguments, Hugging Face's code, the accel op, [accel's ops without the fusion])
    cases = {"rms_norm_hf": ((x, w), hf_norm, lambda x, w: rn.rms_norm(x, w, 1e-6)),
             "add_rms_norm_hf": ((x, r, w), hf_add_norm, lambda x, r, w: arn.add_rms_norm(x, r, w, 1e-6),
                                 unfused_add_norm),
             "swiglu": ((a, b), lambda a, b: F.silu(a) * b, sw.swiglu),
             "rope": ((q, k), hf_rope, lambda q, k: rope.rope(q, k, cos, sin))}

    def timed(fn, args):
        def once():
            out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        for _ in range(3):
            once()
        samples = []
        for _ in range(5):  # 5 samples of ``reps`` calls each (host time included where the host is slower)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for _ in range(reps):
                once()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            samples.append((time.perf_counter() - t0) * 1e3 / reps)
        return round(statistics.median(samples), 4)

    rows = []
    for name, (args, hf_fn, op_fn, *unfused) in cases.items():
        row = {"op": name, "dtype": str(dt).removeprefix("torch."), "device": str(device),
               "shapes": [list(t.shape) for t in args], "hf_eager_ms": timed(hf_fn, args)}
        with ak.disabled():
            row["reference_ms"] = timed(op_fn, args)
        if unfused:
            row["accel_unfused_ms"] = timed(unfused[0], args)
        ak.reset_counters()
        row["accel_ms"] = timed(op_fn, args)
        row["routed"] = {o.name: o.routed for o in ak.overrides() if o.name.startswith(name + "_")}
        rows.append(row)
    for n in installed:
        ak.unregister(n)
    return rows


# ------------------------------------------------------------------------------------------ op counts
#: Models whose op counts ``--op-counts`` records (the Hugging Face ones: what the patch changes).
COUNTED = ("hf_llama", "qwen3", "gpt2")


def _cpu_reference_kernels() -> list[str]:
    """Each accel op's eager reference registered at the CPU key, standing in for a GPU kernel: the registry
    takes the calls, so a patched model runs accel's ops (each one ATen-level call under a dispatch mode)."""
    import accel.kernels as ak
    import accel.integrations.transformers  # noqa: F401 - defines the accel ops
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy
    from accel.kernels.ops.linear_cross_entropy import reference as lce
    from accel.kernels.ops.rms_norm_hf import reference as rn
    from accel.kernels.ops.rope import reference as rp
    from accel.kernels.ops.swiglu import reference as sw

    plan = {"accel::swiglu": sw.swiglu, "accel::rope": rp.rope, "accel::rms_norm_hf": rn.rms_norm_hf,
            "accel::linear_cross_entropy": lce.forward}
    return [ak.register(op, impl=fn, backends=["cpu"], dsl="triton", name=f"opcount_{op[7:]}.cpu")
            for op, fn in plan.items()]


def count_ops(model_name: str, variant: str) -> dict[str, int]:
    """ATen (and accel) ops of one training step's forward and backward (no optimizer step) of ``--quick``'s
    ``model_name`` on CPU in fp32, counted with a ``TorchDispatchMode``: ``{op name: calls}``.

    ``variant``: ``"eager"`` (the model as written), ``"patched"`` (``patch(model)`` with no accel kernel at the
    CPU key: every replaced module declines to the model's own code) or ``"patched+kernels"`` (the ops'
    references registered at the CPU key as stand-ins for GPU kernels: accel's ops run, each one call).
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import accel.kernels as ak

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket._qualified_op_name if hasattr(func, "overloadpacket") else func)
            self.calls[name] = self.calls.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    names = _cpu_reference_kernels() if variant == "patched+kernels" else []
    try:
        torch.manual_seed(0)
        bench = BUILDERS[model_name](True, torch.device("cpu"), torch.float32)
        if variant != "eager":
            from accel.integrations import transformers as accel_hf

            accel_hf.patch(bench.model)
        bench.model.train()
        bench.loss(bench.model, bench.batch).backward()  # warm-up: lazy buffers, caches
        bench.model.zero_grad(set_to_none=True)
        mode = Count()
        with mode:
            bench.loss(bench.model, bench.batch).backward()
        return dict(sorted(mode.calls.items()))
    finally:
        for n in names:
            ak.unregister(n)


def op_counts(models: list[str]) -> list[dict[str, Any]]:
    """Per model: op counts of :func:`count_ops`'s three variants, their totals, and the ops a patched variant
    calls more often than eager (``more_than_eager``: must be empty, accel's own ops aside)."""
    rows = []
    for model_name in models:
        counts = {v: count_ops(model_name, v) for v in ("eager", "patched", "patched+kernels")}
        eager = counts["eager"]
        row = {"model": model_name, "device": "cpu", "dtype": "float32", "quick": True,
               "totals": {v: sum(c.values()) for v, c in counts.items()}, "counts": counts, "more_than_eager": {}}
        for v in ("patched", "patched+kernels"):
            more = {op: [eager.get(op, 0), n] for op, n in counts[v].items()
                    if n > eager.get(op, 0) and not op.startswith("accel::")}
            row["more_than_eager"][v] = more
        rows.append(row)
    return rows


def op_counts_markdown(rows: list[dict[str, Any]]) -> str:
    """The op-count table (totals, accel's ops, the ATen ops the patch removes most)."""
    lines = ["# ATen ops per training step (forward + backward), CPU, fp32, `--quick` configs", "",
             "Counted with a `TorchDispatchMode` by `python benchmarks/real_models.py --op-counts` (one step after a",
             "warm-up step; no optimizer). `patched`: `patch(model)` with no accel kernel at the CPU key (every",
             "replaced module runs the model's own code). `patched+kernels`: the accel ops' references registered",
             "at the CPU key as stand-ins for GPU kernels (each accel op is one call).", "",
             "| model | eager | patched | patched+kernels | accel ops | ATen ops above eager |",
             "|---|---:|---:|---:|---|---|"]
    for r in rows:
        t = r["totals"]
        ours = {op: n for op, n in r["counts"]["patched+kernels"].items() if op.startswith("accel::")}
        more = {v: m for v, m in r["more_than_eager"].items() if m}
        named = ", ".join(f"{k.split('::')[1]} {v}" for k, v in ours.items())
        lines.append(f"| {r['model']} | {t['eager']} | {t['patched']} | {t['patched+kernels']} | {named} | "
                     f"{json.dumps(more) if more else 'none'} |")
    lines += ["", "Largest reductions (eager -> patched+kernels):", ""]
    for r in rows:
        e, k = r["counts"]["eager"], r["counts"]["patched+kernels"]
        drop = sorted(((e[op] - k.get(op, 0), op) for op in e), reverse=True)[:8]
        lines.append(f"- {r['model']}: " + ", ".join(f"{op} {e[op]}->{k.get(op, 0)}" for d, op in drop if d > 0))
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------- driver
def _parse_list(text: str | None, known: tuple[str, ...], what: str) -> list[str]:
    if text is None:
        return list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"real_models.py: error: unknown {what} {unknown}. Known: {', '.join(known)}.")
    return names


def compare_to_eager(result: dict[str, Any], eager: dict[str, Any] | None) -> None:
    """Add ``loss_rel_vs_eager`` (first-step loss, relative; target <= 1e-3) and ``curve_max_rel_vs_eager`` (the
    largest relative difference of the loss curves, step by step) to ``result`` where eager's run has them, and
    ``speedup_pipelined_vs_eager`` where both have ``ms_pipelined``."""
    if eager and eager.get("ms_pipelined") and result.get("ms_pipelined"):
        result["speedup_pipelined_vs_eager"] = round(eager["ms_pipelined"] / result["ms_pipelined"], 4)
    if not eager or not eager.get("losses") or not result.get("losses"):
        return
    a, b = result["losses"], eager["losses"]
    result["loss_rel_vs_eager"] = abs(a[0] - b[0]) / max(abs(b[0]), 1e-30)
    result["curve_max_rel_vs_eager"] = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))


def drive(models: list[str], modes: list[str], out: Path, *, quick: bool, steps: int, warmup: int,
          device_spec: str | None, timeout: float, loss_chunk: int | None = None, curve_steps: int = 50,
          compile_backend: str = "inductor", eager_from: Path | None = None,
          profile: int = 0, mlp_recompute: bool = True, trace: bool = False,
          host_profile: int = 0, patch_roles: tuple[str, ...] = PATCH_ROLES,
          optimizer: str = "adamw") -> list[dict[str, Any]]:
    """Each model x mode in a fresh process (eager first); one JSON line per run appended to ``out``.

    A mode that cannot run is a ``skipped`` line with the reason, never left out: Liger for a model it has no
    function for is decided here without a process, a missing package (liger_kernel, timm) in the child.
    ``eager_from``: a results file whose eager lines give ``speedup_vs_eager`` and the loss comparison when
    ``modes`` has no eager (a batch split over two GPU calls)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    ordered = (["eager"] if "eager" in modes else []) + [m for m in modes if m != "eager"]
    earlier: dict[str, dict[str, Any]] = {}
    if eager_from is not None and eager_from.exists():
        for line in eager_from.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if (row.get("mode") == "eager" and row.get("ms") and row.get("loss_chunk") is None
                    and row.get("optimizer", "adamw") == optimizer):
                earlier[row["model"]] = row
    results = []
    for model in models:
        eager = earlier.get(model)
        for mode in ordered:
            eager_ms = eager.get("ms") if eager else None
            if mode == "liger" and LIGER[model] is None:
                result = {"model": model, "mode": mode, "quick": quick,
                          "skipped": f"Liger-Kernel has no patch function for {model}"}
                results.append(result)
                with out.open("a") as f:
                    f.write(json.dumps(result) + "\n")
                print(f"{model:12s} {mode:14s} {result['skipped']}", flush=True)
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--model", model, "--mode", mode, "--steps", str(steps),
                   "--warmup", str(warmup), "--curve-steps", str(curve_steps), "--compile-backend", compile_backend]
            cmd += ["--quick"] if quick else []
            cmd += ["--device", device_spec] if device_spec else []
            cmd += ["--eager-ms", str(eager_ms)] if eager_ms else []
            cmd += ["--loss-chunk", str(loss_chunk)] if loss_chunk else []
            cmd += ["--profile", str(profile)] if profile else []
            cmd += ["--trace"] if trace else []
            cmd += ["--host-profile", str(host_profile)] if host_profile else []
            cmd += [] if mlp_recompute else ["--no-mlp-recompute"]
            cmd += [] if tuple(patch_roles) == PATCH_ROLES else ["--patch-roles", ",".join(patch_roles)]
            cmd += [] if optimizer == "adamw" else ["--optimizer", optimizer]
            began = time.time()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
                line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT ")), None)
                if line is None:
                    result = {"model": model, "mode": mode, "error": f"exit {proc.returncode}: "
                                                                     f"{(proc.stderr or proc.stdout)[-2000:]}"}
                else:
                    result = json.loads(line.removeprefix("RESULT "))
                    said = [ln.strip() for ln in proc.stderr.splitlines() if "Warning" in ln]
                    if said:
                        result["stderr_warnings"] = list(dict.fromkeys(said))[:10]
            except subprocess.TimeoutExpired:
                result = {"model": model, "mode": mode, "error": f"no result within {timeout:.0f} s"}
            result["wall_s"] = round(time.time() - began, 1)
            if mode == "eager" and result.get("ms"):
                eager = result
            elif mode != "eager":
                compare_to_eager(result, eager)
            results.append(result)
            with out.open("a") as f:
                f.write(json.dumps(result) + "\n")
            shown = result.get("ms", result.get("skipped", result.get("error", "")))
            if result.get("ms_pipelined"):
                shown = f"{shown} (pipelined {result['ms_pipelined']})"
            print(f"{model:12s} {mode:14s} {str(shown)[:100]}", flush=True)
            if result.get("warning"):
                print(f"{'':12s} {'':14s} warning: {result['warning']}", flush=True)
    return results


def load_results(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (a results file of :func:`drive`), the last line per (model, mode, loss_chunk, optimizer)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[(row.get("model"), row.get("mode"), row.get("loss_chunk"), row.get("optimizer"))] = row
    return list(rows.values())


def plot(results: list[dict[str, Any]], png: Path) -> Path:
    """One PNG: a bar chart of ``speedup_vs_eager`` per model and mode (skipped and failed runs named under the
    bars), and per model the loss curves of every mode on the fixed batch. matplotlib is imported here only.

    Raises:
        ImportError: matplotlib is not installed (``pip install matplotlib``; the JSON lines are complete without it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in MODELS if any(r.get("model") == m for r in results)]
    plain = [r for r in results if r.get("loss_chunk") is None and r.get("optimizer") is None]
    fig, axes = plt.subplots(1, 1 + len(models), figsize=(5 * (1 + len(models)), 4.2), squeeze=False)
    bars = axes[0][0]
    width = 0.8 / len(MODES)
    color = {mode: f"C{j}" for j, mode in enumerate(MODES)}  # one colour per mode in every panel
    for j, mode in enumerate(MODES):
        xs, ys = [], []
        for i, m in enumerate(models):
            row = next((r for r in plain if r.get("model") == m and r.get("mode") == mode), None)
            value = (row or {}).get("speedup_vs_eager") if (row or {}).get("ms") else None
            if value:
                xs.append(i + (j - len(MODES) / 2 + 0.5) * width)
                ys.append(value)
        if ys:  # a mode with no bar gets no legend entry
            bars.bar(xs, ys, width, label=mode, color=color[mode])
    bars.axhline(1.0, color="k", lw=0.6)
    bars.set_xticks(range(len(models)), models, rotation=20)
    bars.set_ylabel("speedup vs eager (one training step)")
    bars.set_ylim(0, 1.3 * max([p.get_height() for p in bars.patches] or [1.0]))  # room for the legend
    bars.legend(fontsize=7, loc="upper left", ncol=3)
    missing = [f"{r['model']}/{r['mode']}: {'skipped' if 'skipped' in r else 'error'}" for r in plain
               if "ms" not in r]
    if missing:
        bars.set_title("; ".join(missing)[:160], fontsize=6)
    for ax, m in zip(axes[0][1:], models):
        for r in plain:
            if r.get("model") == m and r.get("losses"):
                ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=r["mode"], lw=1,
                        color=color.get(r["mode"]))
        ax.set_yscale("log")  # the curves part where the loss is small; a linear axis hides that
        ax.set_title(f"{m}: loss on the fixed batch")
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, help="one model (with --mode): run it in this process")
    p.add_argument("--mode", choices=MODES)
    p.add_argument("--all", action="store_true", help="every --models x --modes pair, each in a fresh process")
    p.add_argument("--models", help=f"comma-separated subset of {','.join(MODELS)} (with --all)")
    p.add_argument("--modes", help=f"comma-separated subset of {','.join(MODES)} (with --all)")
    p.add_argument("--out", type=Path, help="results file (JSON lines, appended; with --all)")
    p.add_argument("--quick", action="store_true", help="tiny models, fp32 on CPU: a smoke test")
    p.add_argument("--steps", type=int, default=20, help="timed steps (median reported; at least 15 unless --quick)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--device", help="accel.device() spec (default: the best device here)")
    p.add_argument("--eager-ms", type=float, help="eager's ms of this model (speedup_vs_eager)")
    p.add_argument("--timeout", type=float, default=1500.0, help="seconds per child run (with --all)")
    p.add_argument("--loss-chunk", type=int, help="accel modes: rows per chunk of the fused loss (default: "
                                                  "LinearCrossEntropyOptions' own choice)")
    p.add_argument("--curve-steps", type=int, default=50,
                   help="steps run in all (at least --warmup + --steps): every step's loss is the loss curve")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of the compile modes")
    p.add_argument("--eager-from", type=Path, help="with --all and no eager mode: eager's lines in this results "
                                                   "file give speedup_vs_eager and the loss comparison")
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after the timed steps, STEPS more under torch.profiler: kernel time per step by name and "
                        "family in the result's 'profile'")
    p.add_argument("--trace", action="store_true",
                   help="CUDA: one more step traced (idle gaps and what the host did, the op launching each "
                        "kernel: 'trace' in the result) and one with memory per phase ('memory_phases')")
    p.add_argument("--host-profile", type=int, default=0, metavar="STEPS",
                   help="after the timed steps, STEPS more under cProfile: the host's Python time by function in "
                        "the result's 'host_profile'")
    p.add_argument("--patch-roles", default=",".join(PATCH_ROLES),
                   help=f"accel modes: what patch() replaces, a comma-separated subset of {','.join(PATCH_ROLES)} "
                        f"(default all; e.g. loss alone under accel.compile leaves the rest to Inductor)")
    p.add_argument("--no-mlp-recompute", action="store_true",
                   help="accel modes: patch(mlp_recompute=False), the SwiGLU product saved for backward")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw",
                   help="the step's optimizer: adamw (default) or sgd with momentum 0.9 (one state per parameter)")
    p.add_argument("--plot", type=Path, metavar="JSONL", help="write a PNG of a results file (bar chart of the "
                                                              "speedups, loss curves per model): --png FILE")
    p.add_argument("--png", type=Path, help="the PNG --plot writes (default: the results file with .png)")
    p.add_argument("--ops", action="store_true", help="time each accel op alone (fwd+bwd) at hf_llama's shapes")
    p.add_argument("--op-counts", action="store_true",
                   help="count the ATen ops of one training step on CPU (--quick configs): eager, patched, patched "
                        "with kernels; JSON to --out (and a .md beside it)")
    args = p.parse_args(argv)
    if args.plot is not None:
        print(plot(load_results(args.plot), args.png or args.plot.with_suffix(".png")))
        return 0
    if args.op_counts:
        with contextlib.redirect_stdout(sys.stderr):
            rows = op_counts(_parse_list(args.models, COUNTED, "models"))
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
            args.out.with_suffix(".md").write_text(op_counts_markdown(rows))
        print(op_counts_markdown(rows))
        return 1 if any(m for r in rows for m in r["more_than_eager"].values()) else 0
    if args.ops:
        for row in time_ops(quick=args.quick, reps=max(args.steps, 5), device_spec=args.device):
            print("RESULT " + json.dumps(row), flush=True)
        return 0
    roles = tuple(_parse_list(args.patch_roles, PATCH_ROLES, "patch roles"))
    if args.steps < (1 if args.quick else 15) or args.warmup < 0:
        p.error("--steps must be at least 15 (1 with --quick) and --warmup at least 0")
    if args.all:
        if args.out is None:
            p.error("--all needs --out FILE")
        drive(_parse_list(args.models, MODELS, "models"), _parse_list(args.modes, MODES, "modes"), args.out,
              quick=args.quick, steps=args.steps, warmup=args.warmup, device_spec=args.device, timeout=args.timeout,
              loss_chunk=args.loss_chunk, curve_steps=args.curve_steps, compile_backend=args.compile_backend,
              eager_from=args.eager_from, profile=args.profile, mlp_recompute=not args.no_mlp_recompute, trace=args.trace,
              host_profile=args.host_profile, patch_roles=roles, optimizer=args.optimizer)
        return 0
    if args.model is None or args.mode is None:
        p.error("give --model and --mode (one run), or --all")
    with contextlib.redirect_stdout(sys.stderr):  # the library's prints stay off the result line
        result = run_one(args.model, args.mode, quick=args.quick, steps=args.steps, warmup=args.warmup,
                         device_spec=args.device, eager_ms=args.eager_ms, loss_chunk=args.loss_chunk,
                         curve_steps=args.curve_steps, compile_backend=args.compile_backend,
                         profile=args.profile, mlp_recompute=not args.no_mlp_recompute, trace=args.trace,
                         host_profile=args.host_profile, patch_roles=roles, optimizer=args.optimizer)
    print("RESULT " + json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
