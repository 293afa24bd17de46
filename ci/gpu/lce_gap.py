"""Where the routed linear cross-entropy spends more than the Triton impl called directly, on this GPU.

At one benchmark row (bf16, 8192 tokens, d 2048, vocab 32000 unless given) times, side by side in one run:
``direct`` (``triton_impl.linear_cross_entropy`` with the row schedule, grads set by hand), ``op``
(``torch.ops.accel.linear_cross_entropy`` + ``loss.backward()``: routing, autograd, the backward's scale) and
``liger`` when it imports; then one profiled call of each: its kernels (device ms by name) and its host ms.

Usage (device tool, after ci/gpu/h200.sh's install): ``python3 ci/gpu/lce_gap.py [--shape 8192x2048x32000]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="8192x2048x32000", help="tokens x d x vocab")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    n, d, c = (int(v) for v in args.shape.split("x"))
    import accel.kernels as ak
    from accel.kernels.ops.linear_cross_entropy import triton_impl
    from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions

    ak.install()
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

    steps = {"direct": direct, "op": op}
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
    for _ in range(args.reps):
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
        for key, ms, count in rows[:14]:
            print(f"  {ms:7.3f} ms  x{count:<4d} {key[:100]}")


if __name__ == "__main__":
    main()
