"""Host cost per call of each layer of a routed kernel call, in µs (CUDA only).

Where the router's time goes, layer by layer, for RMSNorm, softmax and LayerNorm
forward on a tiny bf16 input (``[4, 1024]``: the GPU finishes each kernel long
before the host issues the next, so time per call is host time). Rows:

- ``aten op``: ``torch.ops.aten.<op>`` with accel's overrides off;
- ``routed op -> <dsl>``: the same call routed to one DSL (the other disabled;
  ``tuning.MIN_NUMEL`` set to 0 so the tiny input routes);
- ``<dsl> impl``: the impl function called directly (no dispatcher, no cond);
- ``triton planned call``: the Triton impl's plan for this signature (``impl.plan``, built
  once), called directly: what a routed call runs after its cond (:mod:`accel.kernels.core.plans`);
- ``<dsl> cond``: the cond alone;
- ``router, 8 elements``: the issue's router-cost row (conds decline, ATen runs);
- ``bare torch.library router, 8 elements``: the floor of any Python router on this host, a
  ``torch.library`` kernel at the CUDA key doing nothing but call the captured ATen kernel.

Usage: ``python benchmarks/launch_cost.py [--out DIR]`` (writes ``launch_cost.{md,json}``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def per_call(fn, calls: int = 2000, reps: int = 5) -> float:
    """Min over ``reps`` of the mean µs per call of ``fn()`` over ``calls`` calls (one sync per batch)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for launch_cost.md / .json")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile the routed RMSNorm call to Triton and the RMSNorm and LayerNorm Helion "
                             "impls (top functions by own time; written to launch_profile.txt under --out)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_cost: needs a CUDA device", file=sys.stderr)
        return 2

    import accel.kernels as ak
    from accel.kernels.tuning import table as _tuning
    from accel.kernels.ops.layer_norm import helion_impl as ln_h
    from accel.kernels.ops.layer_norm import triton_impl as ln_t
    from accel.kernels.ops.rms_norm import helion_impl as rms_h
    from accel.kernels.ops.rms_norm import triton_impl as rms_t
    from accel.kernels.ops.softmax import helion_impl as sm_h
    from accel.kernels.ops.softmax import triton_impl as sm_t

    ak.install()
    dev = torch.device("cuda", torch.cuda.current_device())
    m, n = 4, 1024
    x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    cases = {
        "rms_norm": (torch.ops.aten._fused_rms_norm.default, (x, [n], w, 1e-6), rms_t.fused_rms_norm,
                     rms_h.fused_rms_norm),
        "softmax": (torch.ops.aten._softmax.default, (x, -1, False), sm_t.softmax, sm_h.softmax),
        "layer_norm": (torch.ops.aten.native_layer_norm.default, (x, [n], w, b, 1e-5), ln_t.native_layer_norm,
                       ln_h.native_layer_norm),
    }
    rows: list[dict] = []
    profile_text = "(not profiled)"

    def add(op: str, what: str, fn) -> None:
        try:
            us = per_call(fn)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, reported
            rows.append({"op": op, "row": what, "us": None, "error": f"{type(exc).__name__}: {exc}"[:200]})
            print(f"{op:10s} {what:34s} error {type(exc).__name__}: {exc}"[:200], flush=True)
            return
        rows.append({"op": op, "row": what, "us": round(us, 2)})
        print(f"{op:10s} {what:34s} {us:8.2f} us", flush=True)

    saved = dict(_tuning.MIN_NUMEL)
    try:
        for op, (aten, a, t_impl, h_impl) in cases.items():
            with ak.disabled():
                add(op, "aten op", lambda: aten(*a))
            _tuning.MIN_NUMEL.update(triton=0, helion=0)
            _tuning.reload()
            for dsl, other in (("triton", "helion"), ("helion", "triton")):
                with ak.disabled(dsl=other):
                    add(op, f"routed op -> {dsl}", lambda: aten(*a))
                    if args.profile and op == "rms_norm" and dsl == "triton":
                        profile_text = profile(lambda: aten(*a), "routed rms_norm -> triton")
            add(op, "triton impl", lambda: t_impl(*a))
            if hasattr(t_impl, "plan"):  # what a routed call runs: the impl's plan for this signature
                planned = t_impl.plan(*a)
                add(op, "triton planned call", lambda: planned(*a))
            add(op, "helion impl", lambda: h_impl(*a))
            if args.profile and op in ("rms_norm", "layer_norm"):
                from accel.kernels.dsl import helion_utils as _helion

                profile_text += "\n" + profile(lambda: h_impl(*a), f"{op} helion impl (direct host path: "
                                                f"{_helion._direct_ok()}, {len(_helion._HOST)} cached)", top=18)
            for info in ak.overrides():
                if info.op == aten._schema.name and info.name.split(".")[0].endswith("_fwd"):
                    cond = ak.kcore.override.OVERRIDES[info.name].cond
                    add(op, f"{info.dsl} cond", lambda: cond(*a))
            _tuning.MIN_NUMEL.clear()
            _tuning.MIN_NUMEL.update(saved)
            _tuning.reload()
        x8, w8 = torch.randn(1, 8, device=dev), torch.randn(8, device=dev)
        rms = torch.ops.aten._fused_rms_norm.default
        with ak.disabled():
            add("rms_norm", "aten op, 8 elements", lambda: rms(x8, [8], w8, 1e-6))
        add("rms_norm", "router, 8 elements", lambda: rms(x8, [8], w8, 1e-6))
        with ak.disabled():  # the floor of any Python router, for scale: nothing but the captured ATen kernel
            bare = _bare_router(rms, "CUDA")
            try:
                add("rms_norm", "bare torch.library router, 8 elements", lambda: rms(x8, [8], w8, 1e-6))
            finally:
                bare._destroy()
        add("other", "torch.empty_like(x)", lambda: torch.empty_like(x))
        add("other", "torch.cuda.current_device()", torch.cuda.current_device)
    finally:
        _tuning.MIN_NUMEL.clear()
        _tuning.MIN_NUMEL.update(saved)
        _tuning.reload()

    report = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "shape": [m, n],
              "dtype": "bfloat16", "rows": rows}
    lines = [f"# Host cost per call (µs): {report['device']}, torch {torch.__version__}, bf16 [{m}, {n}]", "",
             "| op | layer | µs/call |", "|---|---|---:|"]
    lines += [f"| {r['op']} | {r['row']} | {r['us'] if r['us'] is not None else r['error']} |" for r in rows]
    print("\n".join(lines))
    if args.profile:
        print(profile_text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "launch_cost.json").write_text(json.dumps(report, indent=1))
        (args.out / "launch_cost.md").write_text("\n".join(lines) + "\n")
        if args.profile:
            (args.out / "launch_profile.txt").write_text(profile_text)
    return 0


def _bare_router(op, key: str):
    """A ``torch.library`` kernel at ``key`` that only calls the ATen kernel it replaced (returns its Library)."""
    import warnings

    original = torch.library.get_kernel(op, key)
    lib = torch.library.Library(op.namespace, "IMPL", key)

    def router(keyset, *args, **kwargs):
        return original.call_boxed(keyset, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Overriding a previously registered kernel"
        lib.impl(op._schema.name.split("::")[1], router, key, with_keyset=True)
    return lib


def profile(fn, label: str, calls: int = 3000, top: int = 30) -> str:
    """cProfile of ``calls`` calls of ``fn``: the ``top`` functions by own time (text headed by ``label``)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return f"cProfile, {label}, {calls} calls\n" + out.getvalue()[:9000]


if __name__ == "__main__":
    raise SystemExit(main())
