"""Experiment: RMSNorm forward kernel variants on one shape beside accel's rows kernel and Liger-Kernel.

Why: on 32768x4096 bf16 accel's rows kernel with Liger's own launch shape (one row per program, 8 warps)
timed 1 % slower than Liger's kernel in session 8 run B (``config_probe-runB-1.txt``), so the gap is in the
generated code, not the config. Each variant differs from the rows kernel in one respect:

- ``flat``: one row per program as 1-D tensors, the row's base offset a scalar in int64 (Liger's shape);
- ``flat_even``: ``flat`` without masks (``N == BLOCK_N``);
- ``flat_i32``: ``flat`` with int32 offsets;
- ``rows_base``: the rows kernel's 2-D tile, with a scalar base offset per program.

Interleaved rounds of ``triton.testing.do_bench`` medians (µs), as ``config_probe.py``; each variant checked
against ATen first. Usage: ``python3 ci/gpu/rms_variants.py [--shape 32768x4096] [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from accel.kernels import _launch
from accel.kernels.ops.rms_norm import triton_impl as rt


@triton.jit
def flat(X, W, Y, RSTD, N, eps, BLOCK_N: tl.constexpr, EVEN: tl.constexpr, I64: tl.constexpr):
    if I64:
        row = tl.program_id(0).to(tl.int64)
    else:
        row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if EVEN:
        x = tl.load(X + row * N + cols).to(tl.float32)
    else:
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(RSTD + row, rstd)
    if EVEN:
        w = tl.load(W + cols).to(tl.float32)
        tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty))
    else:
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=cols < N)


@triton.jit
def rows_base(X, W, Y, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * ROWS * N
    r = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = tl.program_id(0) * ROWS + r < M
    mask = row_ok[:, None] & (cols < N)[None, :]
    offs = r[:, None] * N + cols[None, :]
    x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(Y + base + offs, (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + tl.program_id(0) * ROWS + r, rstd, mask=row_ok)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="32768x4096")
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    m, n = map(int, a.shape.split("x"))
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rstd = torch.empty(m, device="cuda", dtype=torch.float32)
    eps = 1e-6
    bn = triton.next_power_of_2(n)
    runs = {"aten": lambda: torch.ops.aten._fused_rms_norm.default(x, [n], w, eps)}
    for rows, nw in ((1, 8), (4, 8), (2, 8)):
        cfg = {"looped": False, "block_n": bn, "rows": rows, "num_warps": nw}
        runs[f"accel rows {rows} warps {nw}"] = (lambda cfg=cfg: rt.launch_fwd(x, w, y, rstd, eps, cfg, m, n))
    for name, even, i64 in (("flat", False, True), ("flat_even", True, True), ("flat_i32", False, False)):
        for nw in (8, 4):
            runs[f"{name} warps {nw}"] = (lambda even=even, i64=i64, nw=nw: flat[(m,)](
                x, w, y, rstd, n, eps, BLOCK_N=bn, EVEN=even, I64=i64, num_warps=nw))
    for rows in (2, 4):
        runs[f"rows_base rows {rows} warps 8"] = (lambda rows=rows: rows_base[(-(-m // rows),)](
            x, w, y, rstd, m, n, eps, BLOCK_N=bn, ROWS=rows, num_warps=8))
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        runs["liger"] = lambda: LigerRMSNormFunction.apply(x, w, eps)
    except Exception as exc:  # noqa: BLE001
        print("liger not importable:", exc)
    ref = torch.ops.aten._fused_rms_norm.default(x, [n], w, eps)[0]
    for name, fn in list(runs.items()):
        y.fill_(float("nan"))
        out = fn()
        got = out[0] if isinstance(out, tuple) else (out if name == "liger" else y)
        if not torch.allclose(got.float(), ref.float(), rtol=2e-2, atol=2e-2):
            print(f"{name}: WRONG (max err {(got.float() - ref.float()).abs().max().item():.3g}); dropped")
            del runs[name]
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.rounds):
        for name, fn in runs.items():
            times[name].append(float(do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3)
    liger = times.get("liger")
    moved = 2 * m * n * 2
    print(f"rms_norm fwd bf16 {m}x{n}, median of {a.rounds} interleaved rounds")
    for name, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        vs = f"{statistics.median(l / t for l, t in zip(liger, ts)):.3f}x Liger, won " \
             f"{sum(l > t for l, t in zip(liger, ts))}/{a.rounds}" if liger else ""
        print(f"  {statistics.median(ts):7.1f} us {moved / statistics.median(ts) / 1e3:6.0f} GB/s  {vs:24s} {name}")
    return 0


if __name__ == "__main__":
    _launch.poison_outputs = False
    sys.exit(main())
