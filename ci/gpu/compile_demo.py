"""accel.compile on the demo model: training step eager vs compiled (GPU machine; prints one table).

    python ci/gpu/compile_demo.py [--mode max-autotune-no-cudagraphs] [--out DIR]

Times the median ms of a whole training step (forward, backward, AdamW) of
``accel.demo.DigitsTransformer`` at batch 64 after warm-up, eagerly and through
``accel.compile(model, mode=...)``, and prints what accel's compile plan set and skipped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import accel
from accel.demo import DigitsTransformer


def step_ms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 60) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for i in range(steps):
        accel.synchronize()
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        accel.synchronize()
        if i >= 10:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", default="max-autotune-no-cudagraphs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = accel.device()
    torch.manual_seed(0)
    x, y = torch.rand(64, 8, 8, device=dev), torch.randint(0, 10, (64,), device=dev)
    plan = accel.compile_plan(args.mode)
    eager = step_ms(DigitsTransformer().to(dev), x, y)
    t0 = time.perf_counter()
    compiled_model = accel.compile(DigitsTransformer().to(dev), mode=args.mode)
    compiled = step_ms(compiled_model, x, y)
    report = {"device": str(dev), "arch": accel.backend().arch(), "torch": torch.__version__, "mode": args.mode,
              "plan": [list(p) for p in plan], "skipped": [list(s) for s in plan.skipped],
              "eager_step_ms": eager, "compiled_step_ms": compiled, "speedup": eager / compiled,
              "compile_and_time_s": time.perf_counter() - t0}
    print(f"accel.compile(mode={args.mode!r}) on {dev} ({report['arch']}), torch {torch.__version__}")
    print(f"  plan set: {report['plan'] or 'nothing'}")
    for s in report["skipped"]:
        print(f"  skipped: {s}")
    print(f"  training step: eager {eager:.3f} ms, compiled {compiled:.3f} ms ({eager / compiled:.2f}x)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "compile_demo.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
