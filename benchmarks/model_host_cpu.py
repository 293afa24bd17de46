"""Host time of a patched Hugging Face Llama's training step on a CPU-only machine, the kernel launches left out.

Issue 22's HF Llama step on the H200 is host-bound in its forward: the device waits for Python between
kernels, so every microsecond the patched model's Python spends per layer is a step-time microsecond there.
This measures that Python without a GPU: the same model structure (8 decoder layers, GQA 2:1, SwiGLU MLP,
tied nothing) at tiny sizes (hidden 32, 8 tokens: the CPU's arithmetic is a few µs per op), fp32, on the CPU,
in one process and interleaved:

- ``eager``: the model as written (Hugging Face's own code; ATen on the CPU computes, cheaply at this size);
- ``accel``: :func:`accel.integrations.transformers.patch` with accel's built-in Triton impls registered at the
  CPU key and their launches replaced by no-ops (``LaunchPlan.__call__`` and ``JITFunction.run``), the kernels'
  size floor set to 0: every routed call runs the Python it runs on a GPU (router, memo, plan, output
  allocation), then launches nothing.

Per mode: µs per forward (with labels: the loss included), per forward + backward, and per decoder layer's
forward (layer 0 called alone on a fixed input); the minimum over ``--repeat`` rounds of the mean over
``--steps`` calls, modes alternating per round so that drift hits both. The outputs of the ``accel`` mode are
garbage (no kernel writes them): only its time means anything.

Usage: ``python benchmarks/model_host_cpu.py [--steps N] [--repeat N] [--json] [--out DIR]`` (writes
``model_host_cpu.{md,json}``). Needs ``transformers`` and ``triton`` installed (Triton's kernel modules are
imported, never run). About 30 s.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import timeit
from pathlib import Path

import torch

#: HF Llama's structure at sizes where the CPU's arithmetic is small next to the Python around it.
CONFIG = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 8,
          "num_key_value_heads": 4, "vocab_size": 64, "max_position_embeddings": 64}
TOKENS = 8


def _no_launches() -> list[str]:
    """Register accel's Triton impls of the ops the integration calls at the CPU key, launches replaced by no-ops."""
    import triton.runtime.jit as jit

    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy
    from accel.kernels.dsl import triton_utils
    from accel.kernels.tuning import table

    triton_utils.LaunchPlan.__call__ = lambda self, *tensors: None
    jit.JITFunction.run = lambda self, *args, **kwargs: None
    table.MIN_NUMEL.update(triton=0, helion=0)
    ak.use_registry("accel")
    names: list[str] = []
    for family in ("rms_norm_hf", "add_rms_norm_hf", "rope", "swiglu", "linear_cross_entropy"):
        names += ak.families()[family].impl("triton").register(["cpu"])
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="calls per timing of a whole step (default 30)")
    p.add_argument("--repeat", type=int, default=7, help="rounds per mode (default 7)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", type=Path, help="directory for model_host_cpu.{md,json}")
    args = p.parse_args(argv)
    if args.steps < 1 or args.repeat < 1:
        p.error("--steps and --repeat need at least 1")
    import transformers

    import accel.kernels as ak
    from accel.integrations import transformers as accel_hf

    torch.set_num_threads(1)  # one host thread issues a GPU's work too
    config = transformers.LlamaConfig(**CONFIG)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(config).train()
    patched = copy.deepcopy(eager)
    names = _no_launches()
    accel_hf.patch(patched)
    report = accel_hf.report(patched)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, TOKENS), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(TOKENS)[None]

    def calls(model):
        inner = model.model
        x = inner.embed_tokens(ids).detach().requires_grad_()
        pe = inner.rotary_emb(x, pos)
        layer = inner.layers[0]
        return {
            "forward": (lambda: model(input_ids=ids, labels=ids), args.steps),
            "forward + backward": (lambda: model(input_ids=ids, labels=ids).loss.backward(), args.steps),
            "one decoder layer, forward": (lambda: layer(x, position_embeddings=pe, position_ids=pos),
                                           args.steps * 10),
        }

    modes = {"eager": calls(eager), "accel": calls(patched)}
    best: dict[str, dict[str, float]] = {m: {} for m in modes}
    for table in modes.values():  # warm-up: plans built, memo filled
        for fn, _ in table.values():
            for _ in range(3):
                fn()
    for _ in range(args.repeat):
        for mode, table in modes.items():
            for what, (fn, number) in table.items():
                us = timeit.timeit(fn, number=number) / number * 1e6
                best[mode][what] = min(best[mode].get(what, float("inf")), us)
    routed = {o.name: o.routed for o in ak.overrides() if o.name in names}
    rows = [{"what": what, "eager_us": round(best["eager"][what], 1), "accel_us": round(best["accel"][what], 1),
             "accel_over_eager": round(best["accel"][what] / best["eager"][what], 3)} for what in best["eager"]]
    result = {"host": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "transformers": transformers.__version__, "config": CONFIG,
              "tokens": TOKENS, "dtype": "float32", "replaced": report.as_dict()["replaced"], "routed": routed,
              "rows": rows}
    lines = [f"# Patched HF Llama's host time on a CPU host, launches left out (µs): torch {torch.__version__}, "
             f"transformers {transformers.__version__}, Python {platform.python_version()}", "",
             f"8 layers, hidden 32, GQA 8/4, {TOKENS} tokens, fp32; min over {args.repeat} rounds.", "",
             "| call | eager | accel | accel / eager |", "|---|---:|---:|---:|"]
    lines += [f"| {r['what']} | {r['eager_us']} | {r['accel_us']} | {r['accel_over_eager']} |" for r in rows]
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "model_host_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "model_host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
