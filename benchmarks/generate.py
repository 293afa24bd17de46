"""Generation with a patched model: ``model.generate`` per mode, each model x mode x batch in its own process.

Model: a Hugging Face ``LlamaForCausalLM`` built from a config (16 layers, d 2048, GQA 16/8 heads, MLP 5632,
vocab 32000; ``--quick``: a tiny one), bf16 on a GPU, random weights, greedy decoding of ``--new-tokens`` tokens
(default 64) after a prompt of ``--prompt`` tokens (default 512), half of the rows left-padded by a quarter of the
prompt where the batch has more than one row, the default dynamic KV cache.

Modes:

- ``eager``: the model as written;
- ``accel``: ``accel.kernels.install()`` and ``accel.integrations.transformers.patch(model)``;
- ``compile_static``: the peer people use for fast decode: ``cache_implementation="static"`` and
  ``torch.compile(model.forward, mode="reduce-overhead")`` (its compile time reported as ``compile_s``).

Per run, one JSON line: ``model, mode, batch, prompt_len, new_tokens, ms`` (median over ``--repeat`` calls
after one warm-up call), ``ms_per_token`` (``ms / new_tokens``), ``prefill_ms`` (a forward over the prompt
alone, the median of ``--repeat``), ``peak_gib``, ``tokens_equal_to_eager`` (the generated ids against the
eager run's of the same batch: random weights make bf16 near-ties common, so a difference is reported, not
failed), ``transformers``, ``gpu``.

Usage::

    python benchmarks/generate.py --out benchmarks/results/h100/generate.jsonl             # every mode, batch 1 and 8
    python benchmarks/generate.py --quick --modes eager,accel --out /tmp/generate.jsonl   # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

MODES = ("eager", "accel", "compile_static")
FULL = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16, "num_attention_heads": 16,
        "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}
QUICK = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 256}


def _inputs(batch: int, prompt: int, vocab: int, device: Any) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (batch, prompt), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:  # left padding on half the rows, a quarter of the prompt
        pad = prompt // 4
        ids[::2, :pad], mask[::2, :pad] = 0, 0
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def run_one(mode: str, batch: int, *, quick: bool, prompt: int, new_tokens: int, repeat: int,
            device_spec: str | None) -> dict[str, Any]:
    """One mode x batch in this process: the JSON-ready result, with the generated ids (``tokens``)."""
    import torch
    import transformers

    import accel

    device = accel.device(device_spec) if device_spec else accel.device()
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    config = transformers.LlamaConfig(**(QUICK if quick else FULL), pad_token_id=0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    base = {"model": "hf_llama_16l" if not quick else "hf_llama_tiny", "mode": mode, "batch": batch,
            "prompt_len": prompt, "new_tokens": new_tokens, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "dtype": str(dtype)[6:]}
    kwargs: dict[str, Any] = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False,
                              "pad_token_id": 0}
    if mode == "accel":
        import accel.kernels as ak
        from accel.integrations import transformers as accel_hf

        base["kernels_installed"] = ak.install()
        accel_hf.patch(model)
    compile_s = None
    if mode == "compile_static":
        kwargs["cache_implementation"] = "static"
        began = time.perf_counter()
        model.forward = torch.compile(model.forward, mode="reduce-overhead")
        compile_s = time.perf_counter() - began  # (the graphs compile in the warm-up call, timed below)
    inputs = _inputs(batch, prompt, config.vocab_size, device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.no_grad():
        began = time.perf_counter()
        out = model.generate(**inputs, **kwargs)
        sync()
        first = time.perf_counter() - began
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times, prefill = [], []
        for _ in range(repeat):
            sync()
            began = time.perf_counter()
            out = model.generate(**inputs, **kwargs)
            sync()
            times.append((time.perf_counter() - began) * 1e3)
        for _ in range(repeat):
            sync()
            began = time.perf_counter()
            model(**inputs, use_cache=False, logits_to_keep=1)
            sync()
            prefill.append((time.perf_counter() - began) * 1e3)
    ms = statistics.median(times)
    result = {**base, "ms": round(ms, 3), "ms_per_token": round(ms / new_tokens, 4),
              "prefill_ms": round(statistics.median(prefill), 3),
              "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None,
              "first_call_s": round(first, 3), "tokens": out[:, -new_tokens:].tolist()}
    if compile_s is not None:
        result["compile_s"] = round(compile_s + first, 3)  # torch.compile's wrapping and the first call's compile
    return result


def drive(modes: list[str], batches: list[int], out: str, **opts: Any) -> None:
    """Every mode x batch in a fresh process (eager first: the others compare their tokens with its), one JSON line
    each appended to ``out`` (``error`` with the reason where a run fails)."""
    eager_tokens: dict[int, list] = {}
    for batch in batches:
        for mode in sorted(modes, key=lambda m: m != "eager"):
            cmd = [sys.executable, os.path.abspath(__file__), "--one", mode, "--batch", str(batch),
                   "--prompt", str(opts["prompt"]), "--new-tokens", str(opts["new_tokens"]),
                   "--repeat", str(opts["repeat"])] + (["--quick"] if opts["quick"] else []) + \
                  (["--device", opts["device_spec"]] if opts["device_spec"] else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts["timeout"], check=False)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                result = {"mode": mode, "batch": batch, "error": (proc.stderr or proc.stdout)[-2000:]}
            else:
                result = json.loads(line.removeprefix("RESULT "))
                tokens = result.pop("tokens")
                if mode == "eager":
                    eager_tokens[batch] = tokens
                result["tokens_equal_to_eager"] = tokens == eager_tokens.get(batch) if batch in eager_tokens else None
            with open(out, "a") as fh:
                fh.write(json.dumps(result) + "\n")
            print(f"{mode:15s} batch {batch}: " + (f"{result['ms']:.1f} ms, {result['ms_per_token']:.2f} ms/token"
                                                   if "ms" in result else "error"), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens (default 512; 16 with --quick)")
    p.add_argument("--new-tokens", type=int, default=None, help="generated tokens (default 64; 8 with --quick)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls (default 5; 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="a tiny model: a smoke test on any device")
    p.add_argument("--device", dest="device_spec", default=None)
    p.add_argument("--timeout", type=int, default=600, help="seconds per run (default 600)")
    p.add_argument("--out", help="JSON lines file to append to (required unless --one)")
    p.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a child run: one mode, batch --batch
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    prompt = args.prompt or (16 if args.quick else 512)
    new_tokens = args.new_tokens or (8 if args.quick else 64)
    repeat = args.repeat or (2 if args.quick else 5)
    if min(prompt, new_tokens, repeat) < 1:
        p.error("--prompt, --new-tokens and --repeat need at least 1")
    if args.one:
        result = run_one(args.one, args.batch, quick=args.quick, prompt=prompt, new_tokens=new_tokens,
                         repeat=repeat, device_spec=args.device_spec)
        print("RESULT " + json.dumps(result))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not args.out:
        p.error(f"unknown modes {bad}; choose from {', '.join(MODES)}" if bad else "--out is required")
    batches = [int(b) for b in args.batches.split(",") if b]
    drive(modes, batches, args.out, quick=args.quick, prompt=prompt, new_tokens=new_tokens, repeat=repeat,
          device_spec=args.device_spec, timeout=args.timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
