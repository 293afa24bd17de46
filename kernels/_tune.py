"""``accel bench --tune``: measure the tuning table on the current device and write it to the user cache.

For each op (forward and backward of RMSNorm, softmax, LayerNorm), dtype and
benchmark shape: time ATen, then every candidate config of the Triton and
Helion kernels (``candidate_configs`` of each kernel module; the default
first). Each config is launched explicitly (Triton launch parameters, or a
``helion.Config`` bound with :func:`accel.kernels.dsl.helion_utils.bind`), checked
against ATen's result, and timed with ``triton.testing.do_bench`` (median,
ms); a config that fails to compile, launch or agree is reported and skipped.
Helion's own autotuner is never entered (why: :mod:`accel.kernels.tuning.table`,
NOTES). The fastest implementation per bucket is written with
:func:`accel.kernels.tuning.table.write_user_table` — ``"aten"`` where ATen won, so
the routed call is never slower than ATen on a measured bucket. Stops at
``--budget`` seconds; progress is shown with ``rich``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["tune", "run_from_args"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _bench_fn(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    if device.type == "cuda":
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=5, rep=20, return_mode="median")) * 1e3
    def wall(fn):  # CPU smoke runs of this code only
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    return wall


def _jobs(ops, dtypes, device, only_shapes=None):
    """``(op key, dtype name, m, n, aten, {dsl: (launch(cfg), configs)})`` per job; tensors built lazily."""
    from accel.kernels import bench, _bench_ops

    shapes = {"rms_norm": bench.SHAPES, **_bench_ops.SHAPES}
    for family in ops:
        for dname in dtypes:
            for m, n in only_shapes or shapes[family]:
                for direction in ("fwd", "bwd"):
                    yield family, direction, dname, m, n


def _build(family: str, direction: str, dtype: torch.dtype, m: int, n: int, device: torch.device):
    """``(aten callable, {dsl: (launch(cfg) callable, [configs])})`` for one job."""
    import accel.kernels as ak
    from accel.kernels import _launch
    from accel.kernels.ops.layer_norm import helion_impl as lh, triton_impl as lt
    from accel.kernels.ops.softmax import helion_impl as sh, triton_impl as st

    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    b = torch.randn(n, dtype=dtype, device=device)
    out = _launch.empty((m, n), dtype, device)
    cands: dict[str, tuple] = {}
    helion_ok = sh.available()[0]
    if family == "softmax":
        from accel.kernels.ops.softmax import cutedsl_configs as cc, cutedsl_impl as sc, triton_kernel as tk

        cute_ok = sc.usable(f"softmax_{direction}", x, n)

        with ak.disabled():
            y = torch.ops.aten._softmax.default(x, -1, False)
        if direction == "fwd":
            aten = lambda: torch.ops.aten._softmax.default(x, -1, False)  # noqa: E731
            cands["triton"] = (lambda c: (st.launch_fwd(x, out, c), out)[1], tk.candidate_configs(n))
            if helion_ok and n <= sh.LIMITS.max_n_fwd:
                from accel.kernels.ops.softmax import helion_kernel as hk

                cands["helion"] = (lambda c: (sh.launch_fwd(x, out, c), out)[1], hk.candidate_configs(n))
            if cute_ok:
                cands["cutedsl"] = (lambda c: (sc.launch_fwd(x, out, c), out)[1],
                                    cc.candidate_configs(n, x.element_size(), 1))
        else:
            aten = lambda: torch.ops.aten._softmax_backward_data.default(dy, y, -1, dtype)  # noqa: E731
            cands["triton"] = (lambda c: (st.launch_bwd(dy, y, out, c), out)[1],
                               tk.candidate_configs(n))
            if helion_ok and n <= sh.LIMITS.max_n_bwd:
                from accel.kernels.ops.softmax import helion_kernel as hk

                cands["helion"] = (lambda c: (sh.launch_bwd(dy, y, out, c), out)[1], hk.candidate_configs(n))
            if cute_ok:
                cands["cutedsl"] = (lambda c: (sc.launch_bwd(dy, y, out, c), out)[1],
                                    cc.candidate_configs(n, x.element_size(), 2))
        return aten, cands
    if family == "layer_norm":
        from accel.kernels.ops.layer_norm import reference as lref, triton_kernel as tk

        sdt = lref.stat_dtype(x, w, b)
        mean, rstd = _launch.empty(m, sdt, device), _launch.empty(m, sdt, device)
        with ak.disabled():
            _, am, ar = torch.ops.aten.native_layer_norm.default(x, [n], w, b, 1e-5)
        if direction == "fwd":
            aten = lambda: torch.ops.aten.native_layer_norm.default(x, [n], w, b, 1e-5)[0]  # noqa: E731
            if n <= lt.LIMITS.max_n_fwd:
                cands["triton"] = (lambda c: (lt.launch_fwd(x, w, b, out, mean, rstd, 1e-5, c), out)[1],
                                   tk.candidate_configs(n, "fwd"))
            if helion_ok and n <= lh.LIMITS.max_n_fwd:
                from accel.kernels.ops.layer_norm import helion_kernel as hk

                cands["helion"] = (lambda c: (lh.launch_fwd(x, w, b, out, mean, rstd, 1e-5, c), out)[1],
                                   hk.candidate_configs(n, "fwd"))
        else:
            mask = [True, True, True]
            aten = lambda: torch.ops.aten.native_layer_norm_backward.default(  # noqa: E731
                dy, x, [n], am, ar, w, b, mask)[0]
            if n <= lt.LIMITS.max_n_bwd:
                configs = tk.candidate_configs(n, "bwd")
                if torch.version.hip is not None:  # split kernels spin on volatile loads: measured on NVIDIA only
                    configs = [c for c in configs if "split" not in c]
                cands["triton"] = (lambda c: (lt.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, mask, c, True),
                                              out)[1], configs)
            if helion_ok and n <= lh.LIMITS.max_n_bwd:
                from accel.kernels.ops.layer_norm import helion_kernel as hk

                cands["helion"] = (lambda c: (lh.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, c), out)[1],
                                   hk.candidate_configs(n, "bwd"))
            from accel.kernels.ops.layer_norm import cutedsl_configs as lcc, cutedsl_impl as lc

            if lc.usable(x, n, am, ar, w):
                cands["cutedsl"] = (lambda c: (lc.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, mask, c, True),
                                               out)[1], lcc.candidate_configs(n, x.element_size()))
        return aten, cands
    # rms_norm: Triton forward launch configs are tuned; the backward and Helion use their own code's.
    from accel.kernels.ops.rms_norm import helion_impl as rh, triton_impl as rt
    from accel.kernels.ops.rms_norm import triton_kernel as rtk

    with ak.disabled():
        _, rstd = torch.ops.aten._fused_rms_norm.default(x, [n], w, 1e-6)
    if direction == "fwd":
        aten = lambda: torch.ops.aten._fused_rms_norm.default(x, [n], w, 1e-6)[0]  # noqa: E731
        rstd_out = _launch.empty(m, torch.float32, device)
        cands["triton"] = (lambda c: (rt.launch_fwd(x, w, out, rstd_out, 1e-6, c, m, n), out)[1],
                           rtk.candidate_configs(n))
        if helion_ok and n <= rh.LIMITS.max_n_fwd:
            cands["helion"] = (lambda c: rh.fused_rms_norm(x, [n], w, 1e-6)[0], [None])
    else:
        aten = lambda: torch.ops.aten._fused_rms_norm_backward.default(dy, x, [n], rstd, w, [True, True])[0]  # noqa: E731
        if n <= rt.LIMITS.max_n_bwd:
            cands["triton"] = (lambda c: rt.fused_rms_norm_backward(dy, x, [n], rstd, w, [True, True])[0], [None])
        if helion_ok and n <= rh.LIMITS.max_n_bwd:
            cands["helion"] = (lambda c: rh.fused_rms_norm_backward(dy, x, [n], rstd, w, [True, True])[0], [None])
    return aten, cands


def tune(ops=("rms_norm", "softmax", "layer_norm"), dtypes=("bf16",), budget_s: float = 600.0,
         device: torch.device | None = None, progress: Callable[[str], None] | None = None,
         write: bool = True, shapes=None) -> dict[str, Any]:
    """Measure the table; returns ``{"arch", "entries", "errors", "skipped", "path", "trials"}``.

    ``trials``: one ``{"op", "dtype", "m", "n", "dsl", "config", "us"}`` per config timed (ATen too,
    config ``None``), fastest first per job - the evidence behind each entry (``--json`` prints it).

    Args:
        ops: op families.
        dtypes: names among ``bf16``, ``fp16``, ``fp32``.
        budget_s: stop starting new jobs after this many seconds.
        device: default the current CUDA device (a CPU device only smoke-tests this code).
        progress: called with one line per finished job.
        write: write the entries to the user cache (:func:`accel.kernels.tuning.table.write_user_table`).
        shapes: ``[M, N]`` pairs for every family (``None``: each family's benchmark shapes).

    Raises:
        BenchArgumentError: ``budget_s`` or a shape out of range.
        KernelUnavailableError: no device given and no usable CUDA device.
    """
    import accel.kernels as ak
    from accel.errors import KernelUnavailableError
    from accel.kernels import _conds, _tolerance, _tuning
    from accel.kernels.bench import check_arguments

    check_arguments(budget_s=budget_s, shapes=shapes)

    if device is None:
        if not torch.cuda.is_available():
            raise KernelUnavailableError("accel bench --tune: no CUDA device (torch.cuda.is_available() is False). "
                                         "Tuning measures kernels on the GPU it is for; run it there.")
        device = torch.device("cuda", torch.cuda.current_device())
    arch = _conds.arch(device)
    bench = _bench_fn(device)
    started = time.perf_counter()
    entries, errors, skipped, trials = [], [], [], []
    for family, direction, dname, m, n in _jobs(ops, dtypes, device, shapes):
        op = f"{family}_{direction}"
        if time.perf_counter() - started > budget_s:
            skipped.append(f"{op} {dname} {m}x{n}: budget {budget_s} s spent")
            continue
        aten, cands = _build(family, direction, _DTYPES[dname], m, n, device)
        with ak.disabled():
            ref = aten()
            times = {"aten": bench(aten)}
        best_cfg: dict[str, Any] = {}
        job = {"op": op, "dtype": _tuning.dtype_name(_DTYPES[dname]), "m": m, "n": n}
        timed = [dict(job, dsl="aten", config=None, us=times["aten"])]
        for dsl, (launch, configs) in cands.items():
            for cfg in configs:
                if time.perf_counter() - started > budget_s:
                    break
                try:
                    problem = _tolerance.compare(launch(cfg), ref)[1]
                    if problem is not None:
                        errors.append(f"{op} {dname} {m}x{n} {dsl} {cfg}: wrong result: {problem}")
                        continue
                    us = bench(lambda: launch(cfg))
                except Exception as exc:  # noqa: BLE001 - report every failing config, keep tuning
                    errors.append(f"{op} {dname} {m}x{n} {dsl} {cfg}: {type(exc).__name__}: {str(exc)[:160]}")
                    continue
                timed.append(dict(job, dsl=dsl, config=cfg, us=us))
                if us < times.get(dsl, float("inf")):
                    times[dsl], best_cfg[dsl] = us, cfg
        winner = min(times, key=times.get)
        trials += sorted(timed, key=lambda t: t["us"])
        entry = dict(job, impl=winner, config=best_cfg.get(winner), configs=best_cfg, us=times)
        entries.append(entry)
        if progress is not None:
            progress(f"{op} {dname} {m}x{n}: {winner} " + " ".join(f"{k}={v:.1f}us" for k, v in times.items()))
    path = _tuning.write_user_table(arch, entries) if write and entries else None
    return {"arch": arch, "entries": entries, "errors": errors, "skipped": skipped,
            "path": str(path) if path else None, "elapsed_s": time.perf_counter() - started, "trials": trials}


def run_from_args(args: argparse.Namespace, ops, dtypes, shapes=None) -> int:
    """``accel bench --tune``: tune with a rich progress display; print the summary (or JSON)."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("tuning ...") as status:
        def progress(line: str) -> None:
            console.log(line)
            status.update(f"tuning ... ({line.split(':')[0]} done)")

        result = tune(ops, dtypes, budget_s=args.budget_s, progress=progress, shapes=shapes)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"tuning table for {result['arch']}: {len(result['entries'])} entries written to {result['path']} "
              f"in {result['elapsed_s']:.0f} s; {len(result['errors'])} configs failed; "
              f"{len(result['skipped'])} jobs skipped (budget)")
        for e in result["errors"][:20]:
            print("  failed:", e)
    return 0
