"""Where the routed linear cross-entropy spends more than the Triton impl called directly, on this GPU.

At benchmark rows (bf16, 8192 tokens, d 2048, vocab 32000 and 128256 unless given) times, side by side in
one run: ``direct`` (``triton_impl.linear_cross_entropy`` with the row schedule, grads set by hand), ``op``
(``torch.ops.accel.linear_cross_entropy`` + ``loss.backward()``: routing, autograd, the backward's scale),
``nn`` (``accel.nn``'s ``linear_cross_entropy_fp32`` with options and no range check, as the transformers
integration calls it) and ``liger`` when it imports; then one profiled call of each: its kernels (device ms
by name), its host ms, the host's lead before the first kernel and the device's idle gaps
(``benchmarks/step_trace.py``).

Usage (device tool, after ci/gpu/h200.sh's install): ``python3 ci/gpu/lce_gap.py [--shapes 8192x2048x32000,...]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="8192x2048x32000,8192x2048x128256", help="tokens x d x vocab, comma-separated")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    import accel.kernels as ak

    ak.install()
    for shape in args.shapes.split(","):
        run(*(int(v) for v in shape.split("x")), reps=args.reps)


def _step_trace():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "step_trace.py"
    spec = importlib.util.spec_from_file_location("step_trace", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(n: int, d: int, c: int, reps: int) -> None:
    from accel.kernels.ops.linear_cross_entropy import triton_impl
    from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions, linear_cross_entropy_fp32

    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(n, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(c, d, device=dev, dtype=torch.bfloat16) / d**0.5).requires_grad_()
    t = torch.randint(0, c, (n,), device=dev)
    r = LinearCrossEntropyOptions().resolve(n, d, c, torch.bfloat16, dev)
    print(f"shape {n}x{d}x{c}: chunk {r.batch_chunk_size}, policy {r.acc_policy}, acc {r.acc_dtype}")
    fixed = (None, None, "mean", -100, 0.0, r.batch_chunk_size, r.acc_policy, r.acc_dtype, False, True, True, False)

    def direct():
        loss, gx, gw, _ = triton_impl.linear_cross_entropy(x.detach(), w.detach(), t, *fixed, schedule="rows")
        x.grad, w.grad = gx, gw

    def op():
        torch.ops.accel.linear_cross_entropy(x, w, t, *fixed)[0].backward()

    options = LinearCrossEntropyOptions()

    def nn():
        linear_cross_entropy_fp32(x, w, t, options=options, check_target_range=False).backward()

    steps = {"direct": direct, "op": op, "nn": nn}
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()
        steps["liger"] = lambda: liger(w, x, t).backward()
    except Exception as exc:  # noqa: BLE001 - the peer is optional here
        print("liger: not importable:", exc)
    for fn in steps.values():
        for _ in range(3):
            x.grad = w.grad = None
            fn()
    torch.cuda.synchronize()
    dev_ms = {k: [] for k in steps}
    host_ms = {k: [] for k in steps}
    for _ in range(reps):
        for name, fn in steps.items():
            x.grad = w.grad = None
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            a.record()
            fn()
            b.record()
            host_ms[name].append((time.perf_counter() - t0) * 1e3)
            b.synchronize()
            dev_ms[name].append(a.elapsed_time(b))
    for name in steps:
        print(f"{name:7s} {statistics.median(dev_ms[name]):7.3f} ms on the device, "
              f"{statistics.median(host_ms[name]):7.3f} ms on the host")
    from torch.profiler import ProfilerActivity, profile

    trace_module = _step_trace()

    for name, fn in steps.items():
        x.grad = w.grad = None
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            fn()
            torch.cuda.synchronize()
        rows = [(e.key, e.self_device_time_total / 1e3, e.count) for e in prof.key_averages()
                if e.self_device_time_total > 0 and e.device_type == torch.autograd.DeviceType.CUDA]
        rows.sort(key=lambda r: -r[1])
        print(f"--- {name}: kernels, device ms in all {sum(r[1] for r in rows):.3f}")
        for key, ms, count in rows[:8]:
            print(f"  {ms:7.3f} ms  x{count:<4d} {key[:100]}")
        x.grad = w.grad = None
        summary = trace_module.trace(fn, dev, top=4)
        print(f"  lead {summary['lead_ms']} ms before the first kernel, idle {summary['idle_ms']} ms inside, "
              f"host {summary['host_ms']} ms (profiled)")
        print("  lead ops:", json.dumps(summary["lead_ops"]))
        for gap in summary["gaps"]:
            print(f"  gap {gap['ms']} ms, host in {gap['host_during']} (sync {gap['sync']}), next {gap['next_op']}")


if __name__ == "__main__":
    main()
