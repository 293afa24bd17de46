"""Fail-fast check of the split-row Triton kernels on the GPU (run before tuning them: a wait that never ends
would hang the tuner until its timeout). Runs every split candidate of the LayerNorm backward once, compares
with ATen, and prints each one's time (``triton.testing.do_bench`` median, µs) beside ATen's. (Session 6's
runs B-D also timed split softmax kernels with it; they lost to the looped kernels and were removed.)

Usage: ``timeout 120 python3 ci/gpu/split_smoke.py [--layer-norm 8192x16384]``
"""

import argparse
import sys

import torch
from triton.testing import do_bench

import accel.kernels as ak
from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.ops.layer_norm import triton_impl as lt, triton_kernel as ltk


def _us(fn) -> float:
    return do_bench(fn, warmup=5, rep=20, return_mode="median") * 1e3


def layer_norm_bwd(m: int, n: int) -> int:
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
    mask = [True, True, True]
    with ak.disabled():
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
        print(f"layer_norm bwd {m}x{n}: aten "
              f"{_us(lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)):.1f} us",
              flush=True)
    moved = 3 * x.numel() * x.element_size()
    bad = 0
    for cfg in ltk.split_bwd_candidates(n):
        dx = torch.empty_like(x)
        dw, db = lt.launch_bwd(dy, x, w, mean.view(-1), rstd.view(-1), dx, mask, cfg, True)
        torch.cuda.synchronize()
        problems = [_tolerance.compare(g.to(r.dtype), r)[1] for g, r in zip((dx, dw, db), ref)]
        bad += any(p is not None for p in problems)
        t = _us(lambda: lt.launch_bwd(dy, x, w, mean.view(-1), rstd.view(-1), dx, mask, cfg, True))
        print(f"  {cfg}: {t:.1f} us {moved / t / 1e3:.0f} GB/s {[p or 'ok' for p in problems]}", flush=True)
    return bad


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--layer-norm", default="8192x16384")
    a = p.parse_args()
    return 1 if layer_norm_bwd(*map(int, a.layer_norm.split("x"))) else 0


if __name__ == "__main__":
    sys.exit(main())
