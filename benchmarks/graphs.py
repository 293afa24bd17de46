"""Graph replay vs eager on launch-bound training steps: accel.graphs.graphed vs hand-written torch.cuda.CUDAGraph.

Workloads (each a whole training step: forward, backward, optimizer step with
``capturable=True``, captured as one graph):

* ``mlp20x256_b8``: 20 x (Linear(256, 256) + ReLU), batch 8, MSE loss, Adam.
* ``transformer_b64``: 2 TransformerEncoderLayers (d_model 128, 4 heads, FFN 256,
  no dropout), sequence 32, batch 64, linear head, cross-entropy, AdamW.

Variants per workload, each on its own copy of the same initial model:

* ``eager``: the step as written, optimizer with the default ``capturable=False``.
* ``accel``: ``accel.graphs.graphed(step, sample)``; each call copies the batch in and replays.
* ``hand``: the documented hand-written pattern (side-stream warm-up, ``torch.cuda.graph``,
  ``static.copy_(batch)``, ``g.replay()``) on CUDA/ROCm only.

Timing: CUDA events around ``--iters`` steps (batches cycled from a pool already on
the device), ``--repeats`` rounds with the variants interleaved, median reported
(ms/step). A short numerics check compares losses across variants after the same
steps from the same initial weights.

Usage::

    python benchmarks/graphs.py --out benchmarks/results/graphs [--json]
    python benchmarks/graphs.py --device cpu --quick   # smoke run: eager fallback only
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import accel
import accel.graphs

# --------------------------------------------------------------------------- workloads


class _Transformerish(nn.Module):
    def __init__(self, d_model: int = 128, heads: int = 4, ffn: int = 256, layers: int = 2, classes: int = 16):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


def _mlp(depth: int = 20, width: int = 256) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def _workloads(device: torch.device, quick: bool) -> dict[str, dict[str, Any]]:
    g = torch.Generator(device="cpu").manual_seed(0)

    def batches(n: int, make: Callable[[], tuple[torch.Tensor, ...]]) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(t.to(device) for t in make()) for _ in range(n)]

    depth = 4 if quick else 20
    d_model, ffn, layers, seq = (32, 64, 1, 8) if quick else (128, 256, 2, 32)
    return {
        f"mlp{depth}x256_b8": {
            "model": lambda: _mlp(depth, 256),
            "optimizer": lambda p, capturable: torch.optim.Adam(p, lr=1e-4, capturable=capturable),
            "loss": nn.functional.mse_loss,
            "data": batches(8, lambda: (torch.randn(8, 256, generator=g), torch.randn(8, 256, generator=g))),
            "what": f"{depth} x (Linear 256->256 + ReLU), batch 8, MSE, Adam(capturable)",
        },
        "transformer_b64": {
            "model": lambda: _Transformerish(d_model, 4, ffn, layers),
            "optimizer": lambda p, capturable: torch.optim.AdamW(p, lr=1e-4, capturable=capturable),
            "loss": nn.functional.cross_entropy,
            "data": batches(
                8, lambda: (torch.randn(64, seq, d_model, generator=g), torch.randint(0, 16, (64,), generator=g))
            ),
            "what": f"TransformerEncoder (d{d_model}, 4 heads, FFN {ffn}, {layers} layers), seq {seq}, batch 64, CE, "
            "AdamW(capturable)",
        },
    }


def _make_step(
    spec: dict[str, Any], base: nn.Module, device: torch.device, *, capturable: bool
) -> tuple[nn.Module, Callable[..., Any]]:
    model = copy.deepcopy(base).to(device)
    opt = spec["optimizer"](model.parameters(), capturable)
    loss_fn = spec["loss"]

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step


def _hand_written(step: Callable[..., Any], sample: tuple[torch.Tensor, ...], warmup: int) -> Callable[..., Any]:
    """The documented torch.cuda.CUDAGraph whole-step pattern, written out by hand."""
    static = tuple(t.clone() for t in sample)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            step(*static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = step(*static)
    sx, sy = static

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        return static_out

    run._graph = g  # keep alive
    return run


def _variants(spec: dict[str, Any], device: torch.device, warmup: int) -> dict[str, Callable[..., Any]]:
    torch.manual_seed(0)
    base = spec["model"]()
    sample = spec["data"][0]
    out: dict[str, Callable[..., Any]] = {}
    _, eager = _make_step(spec, base, device, capturable=False)  # eager as people run it
    for _ in range(warmup):  # same number of optimizer steps before timing as the graphed variants
        eager(*sample)
    out["eager"] = eager
    graphs_ok = bool(accel.graphs.is_supported(device))
    _, step = _make_step(spec, base, device, capturable=graphs_ok)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", accel.errors.GraphFallbackWarning)
        out["accel"] = accel.graphs.graphed(step, sample, warmup=warmup)
    if not out["accel"].captured:  # eager fallback skips the warm-up: take the same optimizer steps
        for _ in range(warmup):
            out["accel"](*sample)
    if device.type == "cuda":
        _, step = _make_step(spec, base, device, capturable=True)
        out["hand"] = _hand_written(step, sample, warmup)
    return out


# --------------------------------------------------------------------------- timing


def _time(run: Callable[..., Any], data: list[tuple[torch.Tensor, ...]], iters: int, device: torch.device) -> float:
    """Mean ms/step over ``iters`` steps (CUDA events on GPUs, perf_counter otherwise)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for i in range(iters):
            run(*data[i % len(data)])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for i in range(iters):
        run(*data[i % len(data)])
    return (time.perf_counter() - t0) * 1e3 / iters


def _numerics(spec: dict[str, Any], device: torch.device, warmup: int, steps: int = 5) -> dict[str, float]:
    """Max |loss difference| over ``steps`` steps from the same init: accel vs eager, accel vs hand."""
    runs = _variants(spec, device, warmup)
    losses: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(steps):
        for name, run in runs.items():
            losses[name].append(float(run(*spec["data"][i % len(spec["data"])]).detach().float().cpu()))
    diff = {"accel_vs_eager": max(abs(a - b) for a, b in zip(losses["accel"], losses["eager"]))}
    if "hand" in losses:
        diff["accel_vs_hand"] = max(abs(a - b) for a, b in zip(losses["accel"], losses["hand"]))
    return diff


def run_benchmark(device: torch.device, *, iters: int, repeats: int, warmup: int, quick: bool) -> dict[str, Any]:
    """Run every workload; return the results as a JSON-ready dict."""
    rows = []
    for name, spec in _workloads(device, quick).items():
        runs = _variants(spec, device, warmup)
        for run in runs.values():  # settle clocks, caches, allocator
            _time(run, spec["data"], max(3, iters // 10), device)
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(repeats):
            for k, run in runs.items():  # interleaved: drift hits every variant alike
                samples[k].append(_time(run, spec["data"], iters, device))
        ms = {k: statistics.median(v) for k, v in samples.items()}
        row = {
            "workload": name,
            "what": spec["what"],
            "captured": runs["accel"].captured,
            "accel_reason": runs["accel"].reason,
            "ms_per_step": ms,
            "ms_samples": samples,
            "speedup_accel_vs_eager": ms["eager"] / ms["accel"],
            "numerics_max_abs_loss_diff": _numerics(spec, device, warmup),
        }
        if "hand" in ms:
            row["speedup_hand_vs_eager"] = ms["eager"] / ms["hand"]
            row["accel_over_hand"] = ms["accel"] / ms["hand"]
        rows.append(row)
    info = {
        "torch": torch.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "graph_support": accel.graphs.is_supported(device).reason,
        "iters": iters,
        "repeats": repeats,
        "warmup": warmup,
        "quick": quick,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return {"info": info, "results": rows}


# --------------------------------------------------------------------------- report


def _table(report: dict[str, Any]) -> str:
    head = "| workload | eager ms/step | accel ms/step | hand ms/step | accel speedup | hand speedup | accel / hand | max loss diff (accel vs hand) |"
    lines = [head, "|" + "---|" * 8]
    for r in report["results"]:
        ms = r["ms_per_step"]
        hand = f"{ms['hand']:.3f}" if "hand" in ms else "n/a"
        lines.append(
            f"| {r['workload']} | {ms['eager']:.3f} | {ms['accel']:.3f} | {hand} | "
            f"{r['speedup_accel_vs_eager']:.2f}x | "
            f"{(format(r['speedup_hand_vs_eager'], '.2f') + 'x') if 'hand' in ms else 'n/a'} | "
            f"{format(r['accel_over_hand'], '.3f') if 'hand' in ms else 'n/a'} | "
            f"{r['numerics_max_abs_loss_diff'].get('accel_vs_hand', float('nan')):.2e} |"
        )
    i = report["info"]
    notes = [
        "",
        f"torch {i['torch']} on {i['device_name']} ({i['device']}); {i['graph_support']}.",
        f"Median of {i['repeats']} interleaved rounds of {i['iters']} steps; "
        f"{'CUDA-event' if i['device'].startswith('cuda') else 'host wall-clock'} timing; whole training step "
        "(forward + backward + optimizer step; capturable=True where graphed) captured as one graph.",
        "accel / hand = accel.graphs.graphed ms/step over hand-written torch.cuda.CUDAGraph ms/step (target <= 1.05).",
    ]
    for r in report["results"]:
        if not r["captured"]:
            notes.append(f"{r['workload']}: accel ran eagerly: {r['accel_reason']}")
    return "\n".join(lines + notes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="directory for graphs.json and graphs.md")
    p.add_argument("--json", action="store_true", help="print the JSON report to stdout instead of the table")
    p.add_argument("--device", default=None, help="device to run on (default: accel.device())")
    p.add_argument("--iters", type=int, default=100, help="steps per timed round (default 100)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds per variant (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps before capture (default 3)")
    p.add_argument("--quick", action="store_true", help="tiny models and few steps (smoke test)")
    a = p.parse_args(argv)
    device = accel.device(a.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    iters, repeats = (5, 2) if a.quick else (a.iters, a.repeats)
    t0 = time.perf_counter()
    report = run_benchmark(device, iters=iters, repeats=repeats, warmup=a.warmup, quick=a.quick)
    report["info"]["wall_s"] = round(time.perf_counter() - t0, 1)
    table = _table(report)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "graphs.json").write_text(json.dumps(report, indent=2) + "\n")
        (a.out / "graphs.md").write_text("# accel.graphs benchmark\n\n" + table + "\n")
    print(json.dumps(report, indent=2) if a.json else table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
