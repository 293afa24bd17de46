"""Host cost of accel's routed-call path on a CPU-only machine, the kernel launch left out (µs per call).

What the per-signature plans (``accel/kernels/_plans.py``) buy on any host, no GPU needed:
the built-in Triton overrides of RMSNorm, LayerNorm and softmax forward are registered for
the CPU key with their Triton launches replaced by no-ops, so what is timed is the Python a
routed call runs (dispatcher into Python, router, cond or memo, plan: output allocation and
the launch object), side by side with:

- ``aten``: the ATen op with accel's overrides off (on the CPU it also computes; a reference);
- ``bare router + 2 allocs``: a ``torch.library`` Python kernel doing nothing but allocate the
  outputs, the floor of any Python override;
- ``routed, memo off``: the same routed call with the memo off (each cond runs, and the impl
  looks the table up and builds its plan per call; the router still computes the signature).

Usage: ``python benchmarks/routed_host_cpu.py [--json] [--out DIR] [--calls N]`` (writes
``routed_host_cpu.{md,json}``). Needs ``triton`` installed (its kernel modules are imported, never
run). Takes about 20 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
import warnings
from pathlib import Path

import torch


def per_call(fn, number: int, repeat: int = 5) -> float:
    """Minimum over ``repeat`` runs of the mean µs per call of ``fn()``."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--out", type=Path, help="directory for routed_host_cpu.{md,json}")
    parser.add_argument("--calls", type=int, default=20000, help="calls per timing (default 20000)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls {args.calls}: need at least 1")

    import accel.kernels as ak
    from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
    from accel.kernels.tuning import table as _tuning
    from accel.kernels.ops.layer_norm import triton_impl as lt
    from accel.kernels.ops.rms_norm import triton_impl as rt
    from accel.kernels.ops.softmax import triton_impl as st

    _triton_utils.LaunchPlan.__call__ = lambda self, *tensors: None  # no kernel: the host path only
    saved = dict(_tuning.MIN_NUMEL)
    _tuning.MIN_NUMEL.update(triton=0, helion=0)  # the [4, 1024] inputs route (no table for "cpu")
    ak.use_registry("accel")
    names = rt.register(["cpu"]) + lt.register(["cpu"]) + st.register(["cpu"])
    x, w, b = torch.randn(4, 1024), torch.randn(1024), torch.randn(1024)
    ops = {
        "rms_norm": (torch.ops.aten._fused_rms_norm.default, (x, [1024], w, 1e-6), "_fused_rms_norm",
                     lambda *a: (torch.empty_like(x), torch.empty(4, 1))),
        "layer_norm": (torch.ops.aten.native_layer_norm.default, (x, [1024], w, b, 1e-5), "native_layer_norm",
                       lambda *a: (torch.empty_like(x), torch.empty(4, 1), torch.empty(4, 1))),
        "softmax": (torch.ops.aten._softmax.default, (x, -1, False), "_softmax", lambda *a: torch.empty_like(x)),
    }
    rows = []
    try:
        for op, (aten, a, symbol, floor) in ops.items():
            routed = per_call(lambda: aten(*a), args.calls)
            with ak.disabled():
                plain = per_call(lambda: aten(*a), args.calls)
                lib = torch.library.Library("aten", "IMPL", "CPU")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    lib.impl(symbol, lambda keyset, *args, **kw: floor(*args), "CPU", with_keyset=True)
                bare = per_call(lambda: aten(*a), args.calls)
                lib._destroy()
            from accel.kernels.core.override import OVERRIDES as _OVERRIDES

            fwd = [_OVERRIDES[n] for n in names if n.startswith(f"{op}_fwd")]
            for ov in fwd:
                ov.cacheable = False  # the path without memo and plans
            unplanned = per_call(lambda: aten(*a), args.calls)
            for ov in fwd:
                ov.cacheable = True
            rows.append({"op": op, "aten_us": round(plain, 2), "bare_router_us": round(bare, 2),
                         "routed_us": round(routed, 2), "routed_memo_off_us": round(unplanned, 2),
                         "routed_over_bare_us": round(routed - bare, 2),
                         "memo_saves": round(unplanned / routed, 2)})
    finally:
        for n in names:
            ak.unregister(n)
        _tuning.MIN_NUMEL.clear()
        _tuning.MIN_NUMEL.update(saved)
    report = {"host": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "shape": [4, 1024], "dtype": "float32", "rows": rows}
    lines = [f"# Routed-call host path on a CPU host (µs per call, launch left out): torch {torch.__version__}",
             "", "| op | aten | bare router + allocs | routed | routed, memo off | routed - bare | memo off / routed |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['op']} | {r['aten_us']} | {r['bare_router_us']} | {r['routed_us']} | {r['routed_memo_off_us']} | "
              f"{r['routed_over_bare_us']} | {r['memo_saves']}x |" for r in rows]
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "routed_host_cpu.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "routed_host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
