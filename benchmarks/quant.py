"""fp8 ``scaled_mm`` through accel.quant vs bf16 ``matmul``: TFLOP/s side by side.

Operands are quantized once, outside the timed region (weights and activations
already in fp8, as in an fp8 training/inference step); the time is the GEMM only.
Each point: 10 warm-up calls, then the median of 5 timed runs of 20 calls each,
timed with device events (CUDA/ROCm/XPU) or ``time.perf_counter`` (CPU).
TFLOP/s = 2 * M * N * K / seconds / 1e12.

Run (well under a minute on an H200)::

    python benchmarks/quant.py --out benchmarks/results/quant-h200
    python benchmarks/quant.py --json            # JSON to stdout as well
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

import accel
import accel.quant as q

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096), (2048, 2048, 8192)]


def _timer(device: torch.device):
    if device.type == "cpu":
        def run(fn, n):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return time.perf_counter() - t0
        return run
    mod = getattr(torch, device.type)

    def run(fn, n):
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return run


def bench(fn, device, warmup=10, reps=5, inner=20) -> float:
    """Median seconds per call."""
    timer = _timer(device)
    timer(fn, warmup)
    return statistics.median(timer(fn, inner) / inner for _ in range(reps))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="device spec (default: accel.device())")
    ap.add_argument("--out", default=None, help="directory for quant.json and quant.md")
    ap.add_argument("--json", action="store_true", help="also print the JSON record")
    ap.add_argument("--small", action="store_true", help="tiny shapes (smoke run, e.g. on CPU)")
    args = ap.parse_args(argv)

    device = accel.device(args.device)
    support = q.native_support("fp8_e4m3", device)
    print(f"device: {device} ({accel.backend(device).name}), fp8 native: {support.native} ({support.reason})")
    shapes = [(256, 256, 256), (512, 256, 512)] if args.small else SHAPES
    fallback = "error" if support.native else "reference"
    if not support.native:
        print("note: fp8 is not native here: the fp8 columns time accel's float32 reference path, not fp8 GEMMs")
    rows = []
    for m, n, k in shapes:
        g = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(m, k, device=device, generator=g)
        b = torch.randn(k, n, device=device, generator=g)
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        qt_a, qt_b = q.quantize(a, "fp8_e4m3"), q.quantize(b, "fp8_e4m3", dim=0)
        qr_a, qr_b = q.quantize(a, "fp8_e4m3", granularity="row"), q.quantize(b, "fp8_e4m3", granularity="row", dim=0)
        del a, b
        flop = 2.0 * m * n * k
        t = {
            "bf16 matmul": bench(lambda: a16 @ b16, device),
            "fp8 tensor-wise": bench(lambda: q.scaled_mm(qt_a.data, qt_b.data, qt_a.scale, qt_b.scale,
                                                          out_dtype=torch.bfloat16, fallback=fallback), device),
            "fp8 row-wise": bench(lambda: q.scaled_mm(qr_a.data, qr_b.data, qr_a.scale, qr_b.scale,
                                                       out_dtype=torch.bfloat16, fallback=fallback), device),
        }
        if support.native:
            t["torch._scaled_mm (raw)"] = bench(lambda: torch._scaled_mm(
                qt_a.data, qt_b.data, qt_a.scale, qt_b.scale, out_dtype=torch.bfloat16), device)
        rows.append({"M": m, "N": n, "K": k, "tflops": {name: flop / s / 1e12 for name, s in t.items()},
                     "ms": {name: s * 1e3 for name, s in t.items()}})
        del a16, b16, qt_a, qt_b, qr_a, qr_b

    names = list(rows[0]["tflops"])
    header = "| M x N x K | " + " | ".join(f"{n} TFLOP/s" for n in names) + " | fp8 tensor / bf16 | fp8 row / bf16 |"
    lines = [header, "|" + "---|" * (len(names) + 3)]
    for r in rows:
        tf = r["tflops"]
        lines.append(f"| {r['M']} x {r['N']} x {r['K']} | " + " | ".join(f"{tf[n]:.1f}" for n in names)
                     + f" | {tf['fp8 tensor-wise'] / tf['bf16 matmul']:.2f}x | {tf['fp8 row-wise'] / tf['bf16 matmul']:.2f}x |")
    table = "\n".join(lines)
    print(table)
    record = {
        "benchmark": "quant", "device": str(device), "backend": accel.backend(device).name,
        "device_name": accel.backend(device).device_name(device.index or 0), "fp8_native": support.native,
        "fp8_path": "native" if support.native else "reference (dequantize + float32 matmul)",
        "fp8_reason": support.reason, "torch": torch.__version__, "python": platform.python_version(),
        "method": "median of 5 x 20 calls after 10 warm-up; operands pre-quantized; TFLOP/s = 2MNK/s/1e12",
        "rows": rows,
    }
    if args.json:
        print(json.dumps(record, indent=2))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "quant.json"), "w") as f:
            json.dump(record, f, indent=2)
        with open(os.path.join(args.out, "quant.md"), "w") as f:
            f.write(f"# fp8 scaled_mm vs bf16 matmul on {record['device_name']} (torch {torch.__version__})\n\n"
                    f"{record['method']}. fp8 path: {record['fp8_path']}.\n\n{table}\n")
        print(f"wrote {args.out}/quant.json and quant.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
