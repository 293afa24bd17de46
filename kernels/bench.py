"""Kernel benchmark (RMSNorm, softmax, LayerNorm): ATen eager vs each DSL impl vs the routed call vs Liger-Kernel and quack.

Run as ``accel bench`` or ``python benchmarks/kernels.py``. Needs a CUDA GPU. Per
shape and dtype it reports time (µs, median of CUDA-event timings with the L2
flushed before each rep), GB/s, % of the copy ceiling measured in the same run,
the speed-up over ATen and over the best peer, and the router's own cost on an
8-element tensor. Liger-Kernel (``liger_kernel``) and quack (``quack``) are
benchmark-only peers, used when importable. Every candidate's output is checked
against ATen's before it is timed; a wrong one is reported, not timed.

Bytes moved: forward ``2*M*N*esize`` (read x, write y; weight and rstd
negligible), backward ``3*M*N*esize`` (read x, read dy, write dx), as in the design notes (shared/DESIGN.md, outside this repository).
Helion runs with a fixed config (no autotuning at run time). Softmax and
LayerNorm: see :mod:`accel.kernels._bench_ops` (same harness, same columns;
quack's LayerNorm is given an fp32 weight, as it requires). ``--tune`` measures
the tuning table instead (:mod:`accel.kernels._tune`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["SHAPES", "main", "run"]

#: [M, N] shapes of the issue's targets (bf16).
SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 1024))
EPS = 1e-6
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Timer:
    """CUDA-event timing with an L2 flush (zeroing a 256 MiB buffer) before every rep.

    On a CPU device (smoke tests of this script only) wall-clock time per call.
    """

    def __init__(self, device: torch.device, reps: int) -> None:
        self.device, self.reps = device, reps
        self.flush = torch.empty(256 * 2**20 if device.type == "cuda" else 1, dtype=torch.uint8, device=device)

    def __call__(self, fn: Callable[[], Any]) -> float:
        """Median µs of ``fn()``, after at least 3 calls and 20 ms of warm-up calls.

        The time-based warm-up keeps a first shape from being timed while the GPU's clocks
        still ramp up after compiles (the first rows of a run measured up to 2x slow).
        """
        for _ in range(3):
            fn()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        until = time.perf_counter() + 0.02
        while time.perf_counter() < until:
            fn()
        if self.device.type != "cuda":
            times = []
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times)
        torch.cuda.synchronize(self.device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(self.device)
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


    def interleaved(self, fns: dict[str, Callable[[], Any]], rounds: int,
                    errors: dict[str, str]) -> dict[str, float]:
        """Median µs per name over ``rounds`` rounds, each timing every function once in order (ATen, under
        ``name == "aten"``, with accel's overrides disabled): a drift of clocks or host over the row shifts
        every candidate alike instead of whichever came last. A function that raises is left out of later
        rounds, its error in ``errors``."""
        import accel.kernels as ak

        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                if name in errors:
                    continue
                try:
                    if name == "aten":
                        with ak.disabled():
                            times[name].append(self(fn))
                    else:
                        times[name].append(self(fn))
                except Exception as exc:  # noqa: BLE001 - one failing candidate must not end the run
                    errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return {name: statistics.median(ts) for name, ts in times.items() if ts and name not in errors}


def copy_ceiling(timer: _Timer, device: torch.device) -> float:
    """Device-to-device copy bandwidth, GB/s (bytes read + written), 512 MiB each way."""
    src = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e3


def _peers() -> dict[str, Any]:
    """Importable peers: name -> module (benchmark-only dependencies)."""
    found: dict[str, Any] = {}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        found["liger"] = LigerRMSNormFunction
    except Exception as exc:  # noqa: BLE001 - optional peer, any import failure just drops it
        found["liger"] = exc
    try:
        # importlib, not `import quack.rmsnorm as m`: quack's __init__ re-exports a *function* named rmsnorm,
        # which that statement would bind instead of the module
        found["quack"] = importlib.import_module("quack.rmsnorm")
    except Exception as exc:  # noqa: BLE001
        found["quack"] = exc
    return found


def _candidates(direction: str, x, w, dy, rstd, peers: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """name -> zero-argument callable returning something comparable with ATen's result."""
    from accel.kernels.ops.rms_norm import helion_impl, triton_impl

    n = x.shape[-1]
    aten_bwd = torch.ops.aten._fused_rms_norm_backward.default
    c: dict[str, Callable[[], Any]] = {}
    if direction == "fwd":
        c["triton"] = lambda: triton_impl.fused_rms_norm(x, [n], w, EPS)[0]
        if helion_impl.available()[0]:
            c["helion"] = lambda: helion_impl.fused_rms_norm(x, [n], w, EPS)[0]
        c["routed"] = lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS)
        if not isinstance(peers["liger"], Exception):
            c["liger"] = lambda: peers["liger"].apply(x, w, EPS)
        if not isinstance(peers["quack"], Exception):
            c["quack"] = lambda: peers["quack"].rmsnorm_fwd(x, w, eps=EPS)[0]
        return c
    mask = [True, True]
    c["triton"] = lambda: triton_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, mask)
    if helion_impl.available()[0]:
        c["helion"] = lambda: helion_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, mask)
    c["routed"] = lambda: aten_bwd(dy, x, [n], rstd, w, mask)
    if not isinstance(peers["liger"], Exception):
        xg = x.detach().requires_grad_()
        wg = w.detach().requires_grad_()
        graph: list = []

        def liger_bwd():  # forward once (in_place=False keeps dy intact), then time the backward alone
            if not graph:
                graph.append(peers["liger"].apply(xg, wg, EPS, 0.0, "llama", False))
            return torch.autograd.grad(graph[0], (xg, wg), dy, retain_graph=True)

        c["liger"] = liger_bwd
    if not isinstance(peers["quack"], Exception):
        r = rstd.view(-1).contiguous()
        c["quack"] = lambda: peers["quack"].rmsnorm_bwd(x, w, dy, r)[:2]
    return c


def _bare_router(op_name: str, key: str) -> Any:
    """A ``torch.library`` kernel at dispatch key ``key`` of ATen op ``op_name`` that only calls the ATen kernel
    captured under it (with accel's overrides disabled: ATen's), installed; ``lib._destroy()`` removes it and
    ``lib.calls[0]`` counts the calls it answered. The floor of any Python router at that key (the dispatcher
    boxing the call into Python and back), measured beside accel's."""
    import warnings

    from torch.library import get_kernel

    kernel = get_kernel(op_name, key)
    namespace, name = op_name.split("::")
    lib = torch.library.Library(namespace, "IMPL", key)
    lib.calls = [0]  # type: ignore[attr-defined]  # whether the dispatcher reached it (a 30 ns list update)
    calls = lib.calls  # type: ignore[attr-defined]

    def bare(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return kernel.call_boxed(keyset, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "overriding a previously registered kernel"
        lib.impl(name, bare, key, with_keyset=True)
    return lib


def _time_bare(key: str, per_call: Callable[[], float]) -> float | None:
    """``per_call()`` with :func:`_bare_router` installed at ``key`` for ``aten::_fused_rms_norm``; ``None`` where
    it cannot be installed, the timing raises, or the dispatcher never reached it (another registration in
    front of the key, as torch's native DSL registry can be): no floor then, accel's cost is still measured."""
    try:
        lib = _bare_router("aten::_fused_rms_norm", key)
    except Exception:  # noqa: BLE001
        return None
    try:
        t = per_call()
    except Exception:  # noqa: BLE001
        t = None
    finally:
        lib._destroy()
    return t if lib.calls[0] else None


def _router_overhead(device: torch.device, calls: int = 2000, rounds: int = 5) -> dict[str, Any]:
    """Host µs per ``aten::_fused_rms_norm`` call on 8 elements: plain ATen (accel's overrides disabled), through
    a bare ``torch.library`` router at the device's dispatch key (:func:`_bare_router`; ``None`` where it cannot
    be installed) and with accel's overrides installed. The fastest of ``rounds`` loops of ``calls`` each, the
    three alternating (a host whose speed drifts over the measurement shifts all alike). ``bare_router_cost_us``
    is ``None`` where that router cannot be installed or timed, or the dispatcher does not reach it. Without a
    live accel override of the op (``--ops`` without ``rms_norm``, no DSL installed) there is no router to
    time: ``{"skipped": why}``."""
    import accel.kernels as ak

    if not any(o.op == "aten::_fused_rms_norm" and o.active and device.type in o.backends for o in ak.overrides()):
        return {"skipped": f"no accel override of aten::_fused_rms_norm is active on {device.type}: no router to time"}

    x = torch.randn(1, 8, device=device)
    w = torch.randn(8, device=device)
    op = torch.ops.aten._fused_rms_norm.default
    from accel.backends import registered

    backend = registered().get(device.type)  # the backend's own dispatch key (CUDA serves rocm too)
    key = backend.dispatch_key if backend is not None else None

    def per_call() -> float:
        for _ in range(50):
            op(x, [8], w, EPS)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            op(x, [8], w, EPS)
        _sync(device)
        return (time.perf_counter() - t0) / calls * 1e6

    plains, bares, routeds = [], [], []
    for _ in range(rounds):
        with ak.disabled():
            plains.append(per_call())
            if bares is not None:  # the first round without a floor ends the floor's measurement
                t = _time_bare(key, per_call) if key is not None else None
                bares = None if t is None else [*bares, t]
        routeds.append(per_call())
    plain, routed = min(plains), min(routeds)
    bare = min(bares) - plain if bares else None
    return {"aten_us": plain, "with_router_us": routed, "router_cost_us": routed - plain, "bare_router_cost_us": bare}


#: Most elements of one benchmarked ``[M, N]`` tensor (2**34: 32 GiB in bf16; a row holds input, output and
#: gradients of that size, so larger ones cannot fit an H200's 141 GB).
MAX_ELEMENTS = 1 << 34


def check_arguments(*, reps: int | None = None, budget_s: float | None = None, shapes=None,
                    rounds: int | None = None) -> None:
    """Raise :class:`~accel.errors.BenchArgumentError` for ``reps < 1``, ``rounds < 1``, ``budget_s <= 0``
    (or NaN), a shape with a side below 1 or more than :data:`MAX_ELEMENTS` elements; changes nothing. Used by
    :func:`run`, the tuner and the CLI."""
    import math

    from accel.errors import BenchArgumentError

    if reps is not None and (isinstance(reps, bool) or not isinstance(reps, int) or reps < 1):
        raise BenchArgumentError(f"accel bench: reps={reps!r}. The timed repetitions per candidate must be an "
                                 f"integer >= 1 (the median of them is reported). Pass e.g. --reps 30.")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
        raise BenchArgumentError(f"accel bench: rounds={rounds!r}. The rounds per row must be an integer >= 1 "
                                 f"(each times every candidate once; the median over rounds is reported). "
                                 f"Pass e.g. --rounds 3.")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0 and not math.isnan(budget_s)):
        raise BenchArgumentError(f"accel bench: budget={budget_s!r} seconds. The time budget must be a number > 0. "
                                 f"Pass e.g. --budget 150.")
    bad = [s for s in shapes or () if len(s) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                            for v in s)]
    if bad:
        raise BenchArgumentError(f"accel bench: shapes {bad}. Each shape is [M, N] with M, N integers >= 1. "
                                 f"Pass e.g. --shapes 4096x4096,65536x1024.")
    huge = [tuple(s) for s in shapes or () if s[0] * s[1] > MAX_ELEMENTS]
    if huge:
        raise BenchArgumentError(f"accel bench: shapes {huge}: more than {MAX_ELEMENTS} (2**34) elements per "
                                 f"tensor; every candidate needs several such tensors on one GPU. Pass smaller "
                                 f"shapes, e.g. --shapes 32768x4096.")


def run(shapes=None, dtypes=("bf16",), reps: int = 30, budget_s: float = 150.0,
        device: torch.device | None = None, ops: tuple[str, ...] = ("rms_norm",), rounds: int = 1) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-ready report.

    Args:
        shapes: ``[M, N]`` pairs for every op family (``None``: each family's issue shapes,
            :data:`SHAPES` for RMSNorm and :data:`accel.kernels._bench_ops.SHAPES` for the others).
        dtypes: names among ``bf16``, ``fp16``, ``fp32`` (a repeated name, op or shape is measured once).
        reps: timed repetitions per candidate and round.
        rounds: rounds per row; each times ATen and every candidate once, in turn, and the report gives each
            one's median over the rounds (:meth:`_Timer.interleaved`). The run takes about ``rounds`` times
            as long; ``1`` times each candidate once, one after another.
        budget_s: shapes left when this many seconds have passed are skipped (listed in ``skipped``).
        device: default the current CUDA device; a CPU device only smoke-tests this script.
        ops: op families: ``rms_norm``, ``softmax``, ``layer_norm``, each with forward and backward rows.

    Raises:
        BenchArgumentError: ``reps``, ``rounds``, ``budget_s`` or a shape out of range (:func:`check_arguments`).
        KernelUnavailableError: no device given and no usable CUDA device.
    """
    import accel.kernels as ak
    from accel.errors import KernelUnavailableError

    from . import _bench_ops

    check_arguments(reps=reps, budget_s=budget_s, shapes=shapes, rounds=rounds)
    # a repeated dtype, op or shape is measured once (not twice the time for duplicate rows)
    dtypes, ops = tuple(dict.fromkeys(dtypes)), tuple(dict.fromkeys(ops))
    shapes = None if shapes is None else tuple(dict.fromkeys(tuple(s) for s in shapes))

    if device is None:
        if not torch.cuda.is_available():
            raise KernelUnavailableError("accel bench: no CUDA device (torch.cuda.is_available() is False). "
                                         "The kernel benchmark needs an NVIDIA GPU; run it on one.")
        device = torch.device("cuda", torch.cuda.current_device())
    started = time.perf_counter()
    timer = _Timer(device, reps)
    ceiling = copy_ceiling(timer, device)
    peers = _peers()
    directions, skipped = ["fwd", "bwd"], []
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_rms_norm_backward", device.type.upper()):
        directions.remove("bwd")  # CPU: no ATen backward kernel to compare with
        skipped.append(f"bwd: ATen has no aten::_fused_rms_norm_backward kernel on {device.type}")
    installed = ak.install(kernels=list(ops))
    try:  # the overrides installed here are removed whatever happens
        if device.type == "cuda":
            name, arch = torch.cuda.get_device_name(device), "sm_%d%d" % torch.cuda.get_device_capability(device)
        else:
            name, arch = "cpu", "cpu"
        report: dict[str, Any] = {
            "device": name, "arch": arch, "torch": torch.__version__,
            "versions": {m: _version(m) for m in ("triton", "helion", "nvidia-cutlass-dsl", "liger-kernel", "quack-kernels")},
            "copy_ceiling_gbs": ceiling, "installed": installed, "rounds": rounds,
            "peers": {k: (None if not isinstance(v, Exception) else f"{type(v).__name__}: {v}") for k, v in peers.items()},
            "rows": [], "aten_faster": [], "skipped": skipped,
        }
        for dname in dtypes if "rms_norm" in ops else ():
            dtype = _DTYPES[dname]
            for m, n in shapes or SHAPES:
                if time.perf_counter() - started > budget_s:
                    report["skipped"].append(f"{dname} {m}x{n}: time budget {budget_s} s spent")
                    continue
                torch.manual_seed(0)
                x = torch.randn(m, n, dtype=dtype, device=device)
                w = torch.randn(n, dtype=dtype, device=device)
                dy = torch.randn(m, n, dtype=dtype, device=device)
                with ak.disabled():
                    rstd = torch.ops.aten._fused_rms_norm.default(x, [n], w, EPS)[1]
                for direction in directions:
                    esize = x.element_size()
                    moved = (2 if direction == "fwd" else 3) * m * n * esize
                    with ak.disabled():
                        if direction == "fwd":  # through F.rms_norm, like the routed call
                            aten = lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS)  # noqa: E731
                        else:
                            aten = lambda: torch.ops.aten._fused_rms_norm_backward.default(  # noqa: E731
                                dy, x, [n], rstd, w, [True, True])
                        ref = aten()
                    errors: dict[str, str] = {}
                    routed_to = ak.explain("aten::_fused_rms_norm" if direction == "fwd" else
                                           "aten::_fused_rms_norm_backward",
                                           *((x, [n], w, EPS) if direction == "fwd" else
                                             (dy, x, [n], rstd, w, [True, True]))).kernel
                    timed = _bench_ops.checked(aten, _candidates(direction, x, w, dy, rstd, peers),
                                               _as_tuple(ref, direction), lambda out: _as_tuple(out, direction),
                                               errors)
                    results = timer.interleaved(timed, rounds, errors)
                    peer_times = [results[p] for p in ("liger", "quack") if p in results]
                    best_peer = min(peer_times) if peer_times else None
                    row = {"op": "rms_norm", "dtype": dname, "shape": [m, n], "direction": direction, "bytes": moved,
                           "routed_to": routed_to, "errors": errors, "impls": {}}
                    for name, us in results.items():
                        gbs = moved / us / 1e3
                        row["impls"][name] = {
                            "us": us, "gbs": gbs, "pct_ceiling": 100 * gbs / ceiling,
                            "vs_aten": results["aten"] / us,
                            "vs_best_peer": (best_peer / us) if best_peer else None,
                        }
                    report["rows"].append(row)
                    if "routed" in results and results["routed"] > results["aten"] and routed_to != "aten":
                        dsl = routed_to.rsplit(".", 1)[-1]
                        report["aten_faster"].append(
                            {"key": [report["arch"], dsl, direction, str(dtype).removeprefix("torch.")],
                             "entry": [n, m, m], "routed_us": results["routed"], "aten_us": results["aten"]})
        for family in ops:
            if family != "rms_norm":
                _bench_ops.run_family(family, report, timer, device, dtypes, started, budget_s, ceiling, shapes, rounds)
        report["router_overhead"] = _router_overhead(device)
        report["routed_counts"] = {o.name: {"routed": o.routed, "fallbacks": o.fallbacks, "failed": o.failed}
                                   for o in ak.overrides()}
        report["elapsed_s"] = time.perf_counter() - started
    finally:
        for name in installed:
            ak.unregister(name)
    return report


def _as_tuple(out: Any, direction: str) -> tuple:
    if direction == "fwd":
        return (out[0] if isinstance(out, (tuple, list)) else out,)
    return tuple(out[:2])


def _version(dist: str) -> str | None:
    from accel._compat import module_version

    return module_version(dist)


IMPL_ORDER = ("aten", "triton", "helion", "cutedsl", "routed", "liger", "quack")


def to_markdown(report: dict[str, Any]) -> str:
    """The report as markdown tables: % of the copy ceiling, then speed-up over ATen and the best peer."""
    lines = [f"# Kernels on {report['device']} ({report['arch']}), torch {report['torch']}", "",
             f"Copy ceiling measured in this run: {report['copy_ceiling_gbs']:.0f} GB/s. "
             f"Each time is the median of {report.get('rounds', 1)} interleaved round(s). "
             f"Versions: {report['versions']}. Peers: {report['peers']}.", ""]
    for op, direction in [(o, d) for o in ("rms_norm", "softmax", "layer_norm") for d in ("fwd", "bwd")]:
        rows = [r for r in report["rows"] if r["direction"] == direction and r.get("op", "rms_norm") == op]
        if not rows:
            continue
        lines += [f"## {op} {direction}: GB/s (% of ceiling) and x vs ATen / x vs best peer", "",
                  "| dtype | shape | routed to | " + " | ".join(IMPL_ORDER) + " |",
                  "|---|---|---|" + "---:|" * len(IMPL_ORDER)]
        for r in rows:
            cells = []
            for name in IMPL_ORDER:
                v = r["impls"].get(name)
                if v is None:
                    cells.append(r["errors"].get(name, "—")[:40])
                    continue
                peer = f" / {v['vs_best_peer']:.2f}x" if v["vs_best_peer"] else ""
                cells.append(f"{v['gbs']:.0f} ({v['pct_ceiling']:.0f}%) {v['vs_aten']:.2f}x{peer}")
            lines.append(f"| {r['dtype']} | {r['shape'][0]}x{r['shape'][1]} | {r['routed_to']} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    ro = report.get("router_overhead", {})
    if ro.get("skipped"):
        lines += [f"Router cost not measured: {ro['skipped']}.", ""]
    elif ro:
        bare = ro.get("bare_router_cost_us")
        floor = (f"; a bare torch.library router that only calls ATen's kernel: +{bare:.2f} µs, so accel's own "
                 f"part is {ro['router_cost_us'] - bare:+.2f} µs") if bare is not None else ""
        lines += [f"Router cost on an 8-element tensor: ATen {ro['aten_us']:.2f} µs/call, with accel's router "
                  f"{ro['with_router_us']:.2f} µs/call (+{ro['router_cost_us']:.2f} µs){floor}.", ""]
    if report["aten_faster"]:
        lines += ["Shapes where ATen beat the routed call (run accel bench --tune to route them to ATen):",
                  "", "```python"]
        grouped: dict[tuple, list] = {}
        for e in report["aten_faster"]:
            grouped.setdefault(tuple(e["key"]), []).append(e)
        for key, entries in grouped.items():
            body = "".join(f"{tuple(e['entry'])!r}, " for e in entries)
            notes = "; ".join(f"N={e['entry'][0]} M={e['entry'][1]}: routed {e['routed_us']:.1f} µs vs ATen "
                              f"{e['aten_us']:.1f} µs" for e in entries)
            lines.append(f"{key!r}: ({body.rstrip(', ')}{',' if len(entries) == 1 else ''}),  # {notes}")
        lines += ["```", ""]
    if report["skipped"]:
        lines += ["Skipped: " + "; ".join(report["skipped"]), ""]
    lines.append(f"Elapsed: {report.get('elapsed_s', 0):.0f} s.")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared by ``accel bench`` and ``benchmarks/kernels.py``)."""
    p.add_argument("--json", action="store_true", help="print the JSON report instead of tables")
    p.add_argument("--out", metavar="DIR", help="write kernels-<time>.json and .md into DIR")
    p.add_argument("--dtypes", default="bf16", help="comma-separated: bf16,fp16,fp32 (default bf16)")
    p.add_argument("--shapes", default=None,
                   help="comma-separated MxN for every op (default: each op's target shapes); also for --tune")
    p.add_argument("--reps", type=int, default=30, help="timed reps per candidate and round (default 30)")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds per row, each timing every candidate once in turn; the median over rounds is "
                        "reported (default 1; 3 makes 1 %% differences repeatable, at 3x the time)")
    p.add_argument("--budget-s", "--budget", type=float, default=150.0, dest="budget_s",
                   help="stop after this many seconds (benchmark: skip remaining shapes; --tune: stop tuning)")
    p.add_argument("--ops", default="rms_norm,softmax,layer_norm",
                   help="comma-separated op families (default rms_norm,softmax,layer_norm)")
    p.add_argument("--tune", action="store_true",
                   help="measure the tuning table on this device (ATen vs the Triton, Helion and CuTeDSL configs) and write it "
                        "to the user cache; Helion's own autotuner is never run (it failed on the H200 image: "
                        "the accel.kernels._tuning module docstring says why)")


def run_from_args(args: argparse.Namespace) -> int:
    """Run with parsed options; print and write results. Returns the exit code."""
    from accel.errors import BenchArgumentError

    shapes = None
    if args.shapes is not None:
        parsed = []
        for s in args.shapes.split(","):
            try:
                shape = tuple(int(v) for v in s.strip().lower().split("x"))
            except ValueError:
                shape = ()
            if len(shape) != 2:
                raise BenchArgumentError(f"accel bench: --shapes {args.shapes!r}: {s.strip()!r} is not MxN. Write "
                                         f"e.g. --shapes 4096x4096,65536x1024 (or leave --shapes out for the issue "
                                         f"shapes).")
            parsed.append(shape)
        shapes = tuple(parsed)
    dtypes = tuple(dict.fromkeys(d.strip() for d in args.dtypes.split(",") if d.strip()))  # repeats: once
    bad = [d for d in dtypes if d not in _DTYPES]
    if bad or not dtypes:
        raise BenchArgumentError(f"accel bench: --dtypes {args.dtypes!r}: "
                                 f"{f'{bad} not among' if bad else 'none given; choose from'} {list(_DTYPES)}. "
                                 f"Write e.g. --dtypes bf16,fp16.")
    ops = tuple(dict.fromkeys(o.strip() for o in args.ops.split(",") if o.strip()))
    unknown = [o for o in ops if o not in ("rms_norm", "softmax", "layer_norm")]
    if unknown or not ops:
        raise BenchArgumentError(f"accel bench: --ops {args.ops!r}: "
                                 f"{f'unknown {unknown}' if unknown else 'none given'}. "
                                 f"Valid: rms_norm, softmax, layer_norm.")
    check_arguments(reps=args.reps, budget_s=args.budget_s, shapes=shapes,
                    rounds=getattr(args, "rounds", 1))  # before any device check
    if getattr(args, "tune", False):
        from . import _tune

        return _tune.run_from_args(args, ops, dtypes, shapes)
    report = run(shapes, dtypes, reps=args.reps, budget_s=args.budget_s, ops=ops, rounds=getattr(args, "rounds", 1))
    md = to_markdown(report)
    print(json.dumps(report, indent=2) if args.json else md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (out / f"kernels-{stamp}.json").write_text(json.dumps(report, indent=2))
        (out / f"kernels-{stamp}.md").write_text(md + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/kernels.py`` entry point: ``accel bench`` itself (the same options, messages, ``--json``
    errors and exit codes: 2 for bad input, 1 for what this machine cannot do)."""
    from accel.cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

