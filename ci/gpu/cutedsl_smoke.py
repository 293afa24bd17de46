"""Check and time every config of the CuTeDSL kernels (softmax, LayerNorm backward) on the GPU, beside ATen,
accel's Triton kernel (its shipped-table config), quack and a copy of the same bytes (the copy ceiling),
in one run.

Each config runs once on fresh random inputs with NaN-poisoned outputs and is compared with ATen
(:mod:`accel.kernels.tuning.tolerance`), then timed (``triton.testing.do_bench`` median, µs). Also times the
host cost of one CuTeDSL launch on a ``[4, 1024]`` input against ATen's.

Usage: ``timeout 300 python3 ci/gpu/cutedsl_smoke.py [--shapes 8192x32768,...] [--layer-norm 4096x4096,...]
[--json out.json]`` (``--shapes ""`` skips the softmax, ``--layer-norm ""`` the LayerNorm rows).
"""

import argparse
import json
import sys
import time

import torch
from triton.testing import do_bench

from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.ops.layer_norm import bench as layer_norm_bench
from accel.kernels.ops.layer_norm import cutedsl_configs as lcc, cutedsl_impl as lci, triton_impl as lti
from accel.kernels.ops.softmax import cutedsl_configs as cc, cutedsl_impl as ci, triton_impl as ti


def _us(fn) -> float:
    return do_bench(fn, warmup=5, rep=40, return_mode="median") * 1e3


def _quack():
    try:
        from quack.softmax import _softmax_backward, _softmax_fwd
    except Exception as exc:  # noqa: BLE001 - a benchmark peer that does not import is reported, not fatal
        print(f"quack unavailable: {type(exc).__name__}: {exc}")
        return None
    return _softmax_fwd, _softmax_backward


def shape_rows(m: int, n: int, dtype: torch.dtype, quack, rows: list) -> int:
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 3
    dy = torch.randn_like(x)
    y_ref = torch.softmax(x, -1)
    dx_ref = torch.ops.aten._softmax_backward_data(dy, y_ref, -1, dtype)
    out = torch.empty_like(x)
    fwd_bytes, bwd_bytes = 2 * x.numel() * x.element_size(), 3 * x.numel() * x.element_size()
    base = {"m": m, "n": n, "dtype": str(dtype).removeprefix("torch.")}
    peers = {
        "copy": (lambda: out.copy_(x), lambda: out.copy_(x)),
        "aten": (lambda: torch.ops.aten._softmax(x, -1, False),
                 lambda: torch.ops.aten._softmax_backward_data(dy, y_ref, -1, dtype)),
        "triton": (lambda: ti.softmax(x, -1, False), lambda: ti.softmax_backward_data(dy, y_ref, -1, dtype)),
    }
    if quack is not None:
        peers["quack"] = (lambda: quack[0](x, out), lambda: quack[1](dy, y_ref, out))
    for name, (f, b) in peers.items():
        for kind, fn, moved in (("fwd", f, fwd_bytes), ("bwd", b, bwd_bytes if name != "copy" else fwd_bytes)):
            try:
                t = _us(fn)
            except Exception as exc:  # noqa: BLE001
                print(f"{base} {name} {kind}: {type(exc).__name__}: {exc}"[:300])
                continue
            rows.append({**base, "impl": name, "kind": kind, "us": t, "gbps": moved / t / 1e3})
    bad = 0
    for kind, inputs, moved in (("fwd", 1, fwd_bytes), ("bwd", 2, bwd_bytes)):
        for cfg in cc.candidate_configs(n, x.element_size(), inputs):
            got = torch.full_like(x, float("nan"))
            try:
                if kind == "fwd":
                    run = lambda: ci.launch_fwd(x, got, cfg)  # noqa: E731
                else:
                    run = lambda: ci.launch_bwd(dy, y_ref, got, cfg)  # noqa: E731
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                problem = _tolerance.compare(got, y_ref if kind == "fwd" else dx_ref)[1]
                t = _us(run)
            except Exception as exc:  # noqa: BLE001
                print(f"{base} cutedsl {kind} {cfg}: {type(exc).__name__}: {exc}"[:600], flush=True)
                bad += 1
                continue
            bad += problem is not None
            rows.append({**base, "impl": "cutedsl", "kind": kind, "config": cfg, "us": t, "gbps": moved / t / 1e3,
                         "first_call_s": first, "check": problem or "ok"})
    return bad


def layer_norm_rows(m: int, n: int, dtype: torch.dtype, rows: list) -> int:
    """The LayerNorm backward (dx, dw, db; weight and bias in the input dtype) of every CuTeDSL config."""
    import accel.kernels as ak

    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
    mask = [True, True, True]
    with ak.disabled():
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        ref = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
    moved = 3 * x.numel() * x.element_size()
    base = {"m": m, "n": n, "dtype": str(dtype).removeprefix("torch."), "kind": "layer_norm_bwd"}
    out = torch.empty_like(x)
    peers = {"copy": lambda: out.copy_(x),
             "aten": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask),
             "triton": lambda: lti.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)}
    try:
        import importlib

        q = importlib.import_module("quack.rmsnorm")
        peers["quack"] = layer_norm_bench.quack_layer_norm((q._rmsnorm_fwd, q._rmsnorm_bwd), x, w, b, dy)[1]
    except Exception as exc:  # noqa: BLE001
        print(f"quack LayerNorm unavailable: {type(exc).__name__}: {exc}"[:200])
    for name, fn in peers.items():
        try:
            t = _us(fn)
        except Exception as exc:  # noqa: BLE001
            print(f"{base} {name}: {type(exc).__name__}: {exc}"[:300])
            continue
        rows.append({**base, "impl": name, "us": t, "gbps": (2 if name == "copy" else 3) * x.numel()
                     * x.element_size() / t / 1e3})
    bad = 0
    for cfg in lcc.candidate_configs(n, x.element_size()):
        dx = torch.full_like(x, float("nan"))
        run = lambda: lci.launch_bwd(dy, x, w, mean.view(-1), rstd.view(-1), dx, mask, cfg, True)  # noqa: E731
        try:
            t0 = time.perf_counter()
            dw, db = run()
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            problems = [_tolerance.compare(g.to(r.dtype), r)[1] for g, r in zip((dx, dw, db), ref)]
            t = _us(run)
        except Exception as exc:  # noqa: BLE001
            print(f"{base} cutedsl {cfg}: {type(exc).__name__}: {exc}"[:600], flush=True)
            bad += 1
            continue
        bad += any(p is not None for p in problems)
        rows.append({**base, "impl": "cutedsl", "config": cfg, "us": t, "gbps": moved / t / 1e3, "first_call_s": first,
                     "check": "ok" if all(p is None for p in problems) else str(problems)})
    return bad


def _host_us(fn, calls: int = 2000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def host_cost(profile: bool = False) -> dict:
    """Host µs per call on ``[4, 1024]`` bf16 (the GPU work is negligible): ATen's softmax and LayerNorm
    backward, and the CuTeDSL launches through TVM-FFI and through CuTeDSL's executor
    (``ACCEL_CUTEDSL_TVM_FFI=0``; each convention compiles its own kernels)."""
    import os

    from accel.kernels.dsl import cutedsl_utils as _cutedsl

    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    y, dy, dx = torch.empty_like(x), torch.randn_like(x), torch.empty_like(x)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    mean, rstd = x.float().mean(-1), torch.ones(4, device="cuda")
    mask = [True, True, True]
    out = {"aten softmax": _host_us(lambda: torch.ops.aten._softmax(x, -1, False)),
           "aten layer_norm_bwd": _host_us(lambda: torch.ops.aten.native_layer_norm_backward(
               dy, x, [1024], mean, rstd, w, w, mask))}
    for mode, switch in (("tvm-ffi", "1"), ("executor", "0")):
        os.environ["ACCEL_CUTEDSL_TVM_FFI"] = switch
        if switch == "1" and _cutedsl.ffi_reason() is not None:
            out[f"cutedsl {mode}"] = _cutedsl.ffi_reason()
            continue
        launch = ci.fwd_launch(cc.default_config(1024, 2), 4, 1024)
        out[f"cutedsl softmax {mode}"] = _host_us(lambda: launch(x, y))
        plan = lci.plan_bwd(x, w, (True, True, True), lcc.default_config(1024, 2), True, torch.bfloat16)
        out[f"cutedsl layer_norm_bwd plan {mode}"] = _host_us(lambda: plan(dy, x, w, mean, rstd, dx))
    os.environ.pop("ACCEL_CUTEDSL_TVM_FFI")
    tplan = lti.plan_bwd(x, w, (True, True, True), lti._k().bwd_config(1024), True, torch.bfloat16)
    out["triton layer_norm_bwd plan"] = _host_us(lambda: tplan(dy, x, w, mean, rstd, dx))
    if profile:  # where the plans' host time goes (cProfile, own time)
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
        from launch_cost import profile as cprofile

        cplan = lci.plan_bwd(x, w, (True, True, True), lcc.default_config(1024, 2), True, torch.bfloat16)
        for label, fn in (("triton layer_norm_bwd plan", lambda: tplan(dy, x, w, mean, rstd, dx)),
                          ("cutedsl layer_norm_bwd plan", lambda: cplan(dy, x, w, mean, rstd, dx))):
            print(cprofile(fn, label, calls=2000, top=18))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8192x32768,4096x4096,32768x4096,65536x1024")
    p.add_argument("--layer-norm", default="4096x4096,16384x8192,32768x4096,8192x16384,65536x1024")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--json", default="")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of the LayerNorm backward plans")
    a = p.parse_args()
    quack = _quack()
    rows: list = []
    bad = 0
    for dt in a.dtypes.split(","):
        for shape in filter(None, a.shapes.split(",")):
            m, n = map(int, shape.split("x"))
            bad += shape_rows(m, n, getattr(torch, dt), quack, rows)
        for shape in filter(None, a.layer_norm.split(",")):
            m, n = map(int, shape.split("x"))
            bad += layer_norm_rows(m, n, getattr(torch, dt), rows)
    for r in rows:
        ceiling = next(c["gbps"] for c in rows if c["impl"] == "copy" and c["m"] == r["m"] and c["n"] == r["n"]
                       and c["dtype"] == r["dtype"] and c["kind"] in ("fwd", "layer_norm_bwd"))
        print(f"{r['dtype']} {r['m']}x{r['n']} {r['kind']} {r['impl']:8s} {r['us']:8.1f} us {r['gbps']:6.0f} GB/s "
              f"{100 * r['gbps'] / ceiling:5.1f}% {r.get('config', '')} {r.get('check', '')} "
              f"{'first %.2fs' % r['first_call_s'] if 'first_call_s' in r else ''}")
    host = host_cost(a.profile)
    print("host cost per call, [4, 1024] bf16, us:",
          {k: round(v, 2) if isinstance(v, float) else v for k, v in host.items()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "host_us": host, "torch": torch.__version__}, f, indent=1)
    print("failures:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
