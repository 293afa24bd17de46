"""Host time of a patched Hugging Face Llama's decode step where every accel kernel declines, on a CPU-only machine.

Decode calls every replaced module once per token with tensors far below the kernels' size floor (2**20 input
elements), so on a GPU every kernel declines and the model's own code runs; decode is host-bound there (an H100
decodes a 16-layer d2048 Llama at ~16 ms per token against a bandwidth floor under 1 ms), so what the replaced
modules' Python adds per call is what generation loses. This measures that Python without a GPU: accel's
built-in Triton impls registered at the CPU key with their launches replaced by no-ops and the real size floors
(every call is declined by the registry, as on the GPU), a tiny Llama (8 layers, hidden 64, GQA 4/2) in fp32,
one decode step (one token, a dynamic KV cache of ``--context`` tokens, ``no_grad``), in one process, modes
interleaved, the minimum over ``--repeat`` rounds of the mean over ``--steps`` steps:

- ``eager``: the model as written;
- ``accel``: :func:`accel.integrations.transformers.patch` (every role);
- ``accel, no memo``: the same with each module's memo of declined shapes switched off
  (:mod:`accel.integrations.transformers.declines`): what the per-call checks cost without it;
- ``norms`` / ``mlp`` / ``rope`` / ``loss``: one role patched alone (``patch(model, mlp=False, ...)``).

Usage: ``python benchmarks/decode_host_cpu.py [--steps N] [--repeat N] [--context N] [--json] [--out DIR]``
(writes ``decode_host_cpu.{md,json}``). Needs ``transformers`` and ``triton`` (the kernel modules are imported,
never run). About 20 s.
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

CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512}
ROLES = {"norms": dict(mlp=False, rope=False, loss=False), "mlp": dict(norms=False, rope=False, loss=False),
         "rope": dict(norms=False, mlp=False, loss=False), "loss": dict(norms=False, mlp=False, rope=False)}


def _declining_kernels() -> list[str]:
    """accel's Triton impls of the integration's ops at the CPU key, launches replaced by no-ops, floors as shipped."""
    import triton.runtime.jit as jit

    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy
    from accel.kernels.dsl import triton_utils

    triton_utils.LaunchPlan.__call__ = lambda self, *tensors: None
    jit.JITFunction.run = lambda self, *args, **kwargs: None
    ak.use_registry("accel")
    names: list[str] = []
    for family in ("rms_norm_hf", "add_rms_norm_hf", "rope", "swiglu", "linear_cross_entropy"):
        names += ak.families()[family].impl("triton").register(["cpu"])
    return names


class _NoMemo:
    """The decline memo switched off for one mode's calls (its functions answer as with an empty memo)."""

    def __init__(self, declines) -> None:
        self.declines, self.saved = declines, (declines.declined, declines.remember)

    def __enter__(self):
        self.declines.declined = lambda *args: False
        self.declines.remember = lambda *args: None

    def __exit__(self, *exc):
        self.declines.declined, self.declines.remember = self.saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="decode steps per timing (default 50)")
    p.add_argument("--repeat", type=int, default=7, help="rounds per mode (default 7)")
    p.add_argument("--context", type=int, default=32, help="tokens in the KV cache (default 32)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", type=Path, help="directory for decode_host_cpu.{md,json}")
    args = p.parse_args(argv)
    if args.steps < 1 or args.repeat < 1 or args.context < 1:
        p.error("--steps, --repeat and --context need at least 1")
    import transformers

    import accel.kernels as ak
    from accel.integrations import transformers as accel_hf
    from accel.integrations.transformers import declines

    torch.set_num_threads(1)  # one host thread issues a GPU's work too
    names = _declining_kernels()
    config = transformers.LlamaConfig(**CONFIG)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(config).eval()
    models = {"eager": eager, "accel": accel_hf.patch(copy.deepcopy(eager))}
    models["accel, no memo"] = accel_hf.patch(copy.deepcopy(eager))
    models.update({role: accel_hf.patch(copy.deepcopy(eager), **kw) for role, kw in ROLES.items()})
    ids = torch.randint(1, CONFIG["vocab_size"], (1, args.context), generator=torch.Generator().manual_seed(1))
    token = ids[:, -1:]
    position = torch.tensor([[args.context]])

    def stepper(model):
        with torch.no_grad():
            cache = model(ids, use_cache=True).past_key_values

        def step():
            with torch.no_grad():
                model(token, past_key_values=cache, use_cache=True, position_ids=position)
            cache.crop(-1)  # back to the context: every step sees the same shapes
        return step

    steps = {mode: stepper(m) for mode, m in models.items()}
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for mode, step in steps.items():
            if mode == "accel, no memo":
                with _NoMemo(declines):
                    us = timeit.timeit(step, number=args.steps) / args.steps * 1e6
            else:
                us = timeit.timeit(step, number=args.steps) / args.steps * 1e6
            best[mode] = min(best.get(mode, float("inf")), us)
    info = {o.name: o for o in ak.overrides() if o.name in names}
    rows = [{"mode": mode, "us_per_step": round(us, 1), "over_eager": round(us / best["eager"], 3),
             "added_us_per_layer": round((us - best["eager"]) / CONFIG["num_hidden_layers"], 1)}
            for mode, us in best.items()]
    result = {"host": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "transformers": transformers.__version__, "config": CONFIG,
              "context": args.context, "steps": args.steps, "repeat": args.repeat, "dtype": "float32",
              "routed": {k: o.routed for k, o in info.items()}, "declined": {k: o.declined for k, o in info.items()},
              "rows": rows}
    lines = [f"# Patched HF Llama's decode step on a CPU host, every kernel declining (µs): torch {torch.__version__}, "
             f"transformers {transformers.__version__}, Python {platform.python_version()}", "",
             f"8 layers, hidden 64, GQA 4/2, 1 token on a cache of {args.context}, fp32, no_grad; min over "
             f"{args.repeat} rounds of {args.steps} steps. Command: `python benchmarks/decode_host_cpu.py"
             f"{' ' + ' '.join(sys.argv[1:]) if argv is None and sys.argv[1:] else ''}`", "",
             "| mode | µs per step | / eager | µs added per layer |", "|---|---:|---:|---:|"]
    lines += [f"| {r['mode']} | {r['us_per_step']} | {r['over_eager']} | {r['added_us_per_layer']} |" for r in rows]
    lines += ["", f"Routed calls: {sum(result['routed'].values())} (every call declined, as on a GPU at decode's "
                  f"sizes)."]
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "decode_host_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "decode_host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
