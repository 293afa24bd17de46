"""The benchmark report: every op family's rows, built from its ``bench.py`` (:mod:`accel.kernels.bench.case`).

:func:`run` times, per family, dtype, shape and direction: ATen eager, each of accel's DSL kernels called
directly, the routed call (the ATen op through accel's overrides) and the family's peers, each checked against
ATen's result first (:func:`checked`). The runner knows no op by name: the families come from
:func:`accel.kernels.catalog.families`, their rows from ``family.bench_module()``.

Bytes moved per row: forward ``2*M*N*esize`` (read x, write y; weight and statistics negligible), backward
``3*M*N*esize`` (read the input or output, read dy, write dx).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

import torch

import accel.kernels as ak
from accel._compat import module_version
from accel.kernels.catalog import families
from accel.kernels.core.spec import OpFamily
from accel.kernels.tuning.tolerance import compare

from . import timing
from .arguments import DTYPES, check_arguments, check_ops
from .case import Case
from .peers import peer_status

__all__ = ["DIRECTIONS", "DSL_DISTRIBUTIONS", "IMPL_ORDER", "aten_directions", "checked", "run", "run_family",
           "to_markdown"]

DIRECTIONS = ("fwd", "bwd")
#: Packages whose versions every report lists (the DSLs); each family's bench module adds its peers'.
DSL_DISTRIBUTIONS = ("triton", "helion", "nvidia-cutlass-dsl")
#: Markdown column order; a name outside it (a new peer) gets a column after these.
IMPL_ORDER = ("aten", "triton", "helion", "cutedsl", "routed", "liger", "quack")
#: ATen kernels a direction can be compared with besides one at the device's own key.
_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def aten_directions(family: OpFamily, device: torch.device, skipped: list[str]) -> tuple[str, ...]:
    """The directions of ``family`` that ATen has a kernel for on ``device`` (to compare with), before
    accel installs any; each one left out is added to ``skipped`` as ``"<dir>: ATen has no <op> kernel on
    <device type>"`` (``aten::_fused_rms_norm_backward`` on CPU)."""
    out = []
    for direction, op in zip(DIRECTIONS, (family.forward, family.backward)):
        if op is None:
            continue
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
                   for key in (device.type.upper(), *_COMPOSITE_KEYS)):
            skipped.append(f"{direction}: ATen has no {op} kernel on {device.type}")
            continue
        out.append(direction)
    return tuple(out)


def checked(aten: Callable[[], Any], cands: dict[str, Callable[[], Any]], ref: Any, view: Callable[[Any], Any],
            errors: dict[str, str], peers: Collection[str] = ()) -> dict[str, Callable[[], Any]]:
    """The functions to time for one row: ``{"aten": aten}`` and each candidate whose result matches ATen's.

    Args:
        aten: ATen's call.
        cands: name -> candidate call.
        ref: ATen's result through ``view``.
        view: output -> what is compared (:attr:`Case.compared <accel.kernels.bench.case.Case>`).
        errors: name -> error text; a raising or wrong candidate is added here instead (one failing candidate
            must not end the run).
        peers: names timed even when their result differs (:func:`~accel.kernels.tuning.tolerance.compare`):
            a peer may round differently (Liger's "llama" casting) and is still the figure to beat.

    Returns:
        name -> call, ``"aten"`` first, the candidates in their order.
    """
    timed = {"aten": aten}
    for name, fn in cands.items():
        try:
            problem = compare(view(fn()), ref)[1]
        except Exception as exc:  # noqa: BLE001 - reported per candidate
            errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if problem is not None and name not in peers:
            errors[name] = f"wrong result: {problem}"
            continue
        timed[name] = fn
    return timed


def run_family(family: OpFamily, report: dict, timer: timing.Timer, device: torch.device, dtypes, started: float,
               budget_s: float, ceiling: float, shapes=None, rounds: int = 1,
               directions: Collection[str] = DIRECTIONS) -> None:
    """Append ``family``'s rows to ``report["rows"]`` (and its peers to ``report["peers"]``).

    Args:
        family: the op family; its ``bench_module()`` gives shapes, peers and cases (``None``: the family is
            listed in ``report["skipped"]``).
        report: the report being built (:func:`run`).
        timer: times each row (:meth:`~accel.kernels.bench.timing.Timer.interleaved`, ``rounds`` rounds).
        device: where the tensors are made.
        dtypes: names among :data:`~accel.kernels.bench.arguments.DTYPES`.
        started: :func:`time.perf_counter` at the run's start.
        budget_s: a shape reached after this many seconds is skipped (listed in ``report["skipped"]``).
        ceiling: the copy ceiling, GB/s (:func:`~accel.kernels.bench.timing.copy_ceiling`).
        shapes: ``[M, N]`` pairs (``None``: the bench module's ``SHAPES``).
        rounds: rounds per row.
        directions: the directions to measure (:func:`aten_directions`).
    """
    module = family.bench_module()
    if module is None:
        report["skipped"].append(f"{family.name}: its OpFamily declares no bench module (no cases to time)")
        return
    found = module.peers()
    report["peers"].update({f"{family.name}.{k}": v for k, v in peer_status(found).items()})
    for dname in dtypes:
        dtype = DTYPES[dname]
        for m, n in shapes or module.SHAPES:
            if time.perf_counter() - started > budget_s:
                report["skipped"].append(f"{family.name} {dname} {m}x{n}: time budget {budget_s} s spent")
                continue
            case: Case
            for direction, case in module.cases(m, n, dtype, device, found).items():
                if direction not in directions:
                    continue
                moved = (2 if direction == "fwd" else 3) * m * n * torch.empty((), dtype=dtype).element_size()
                with ak.disabled():
                    ref = case.compared(case.aten())
                errors: dict[str, str] = {}
                before = {o.name: o.routed for o in ak.overrides()}
                timed = checked(case.aten, case.candidates, ref, case.compared, errors, peers=found)
                results = timer.interleaved(timed, rounds, errors)
                # what the routed candidate ran: the override whose routed count grew (ATen if none)
                grew = [o.name for o in ak.overrides() if o.routed > before.get(o.name, 0)]
                routed_to = grew[0] if len(grew) == 1 else "aten" if not grew else "+".join(grew)
                peer_times = [results[p] for p in found if p in results]
                best_peer = min(peer_times) if peer_times else None
                row = {"op": family.name, "dtype": dname, "shape": [m, n], "direction": direction, "bytes": moved,
                       "routed_to": routed_to, "errors": errors, "impls": {}}
                for name, us in results.items():
                    gbs = moved / us / 1e3
                    row["impls"][name] = {"us": us, "gbs": gbs, "pct_ceiling": 100 * gbs / ceiling,
                                          "vs_aten": results["aten"] / us,
                                          "vs_best_peer": (best_peer / us) if best_peer else None}
                report["rows"].append(row)
                if "routed" in results and results["routed"] > results["aten"] and len(grew) == 1:
                    report["aten_faster"].append(
                        {"op": family.name,
                         "key": [report["arch"], routed_to.rsplit(".", 1)[-1], direction,
                                 str(dtype).removeprefix("torch.")],
                         "entry": [n, m, m], "routed_us": results["routed"], "aten_us": results["aten"]})


def run(shapes=None, dtypes=("bf16",), reps: int = 30, budget_s: float = 150.0,
        device: torch.device | None = None, ops: tuple[str, ...] | None = None, rounds: int = 1) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-ready report.

    Installs the built-in kernels of ``ops`` (:func:`accel.kernels.install`) for the run and removes them
    after it, whatever happens.

    Args:
        shapes: ``[M, N]`` pairs for every op family (``None``: each family's ``SHAPES``).
        dtypes: names among ``bf16``, ``fp16``, ``fp32`` (a repeated name, op or shape is measured once).
        reps: timed repetitions per candidate and round.
        budget_s: shapes reached when this many seconds have passed are skipped (listed in ``skipped``).
        device: default the active accel backend's current device (NVIDIA, AMD or Intel: timed with that
            vendor's events through accel, :mod:`~accel.kernels.bench.timing`); a CPU device only smoke-tests
            the benchmark.
        ops: op family names, in the order measured (``None``: every family of
            :func:`accel.kernels.catalog.families`, by name), each with forward and backward rows. A family
            without a bench module (linear cross-entropy, SwiGLU, RoPE: their benchmarks are under
            ``benchmarks/``) is listed in ``skipped`` and has no rows.
        rounds: rounds per row; each times ATen and every candidate once, in turn, and the report gives each
            one's median over the rounds (:meth:`~accel.kernels.bench.timing.Timer.interleaved`). The run takes
            about ``rounds`` times as long; ``1`` times each candidate once, one after another.

    Returns:
        ``{"device", "arch", "backend", "torch", "versions", "copy_ceiling_gbs", "installed", "rounds", "peers", "rows",
        "aten_faster", "skipped", "router_overhead", "routed_counts", "elapsed_s"}``; one row per family, dtype,
        shape and direction: ``{"op", "dtype", "shape", "direction", "bytes", "routed_to", "errors", "impls"}``,
        ``impls`` name -> ``{"us", "gbs", "pct_ceiling", "vs_aten", "vs_best_peer"}``.

    Raises:
        BenchArgumentError: ``reps``, ``rounds``, ``budget_s`` or a shape out of range
            (:func:`~accel.kernels.bench.arguments.check_arguments`), or ``ops`` empty or unknown.
        KernelUnavailableError: no device given and the active backend is no GPU accel's kernels run on.
    """
    check_arguments(reps=reps, budget_s=budget_s, shapes=shapes, rounds=rounds)
    known = families()
    ops = check_ops(known if ops is None else ops, known)
    # a repeated dtype or shape is measured once (not twice the time for duplicate rows)
    dtypes = tuple(dict.fromkeys(dtypes))
    shapes = None if shapes is None else tuple(dict.fromkeys(tuple(s) for s in shapes))

    if device is None:
        device = timing.bench_device("accel bench", "The kernel benchmark needs an NVIDIA, AMD or Intel GPU; "
                                                    "run it on one.")
    started = time.perf_counter()
    timer = timing.Timer(device, reps)
    ceiling = timing.copy_ceiling(timer, device)
    skipped = [f"{name}: its OpFamily declares no bench module (nothing to time here)" for name in ops
               if known[name].bench_module() is None]
    ops = tuple(name for name in ops if known[name].bench_module() is not None)
    directions = {name: aten_directions(known[name], device, skipped) for name in ops}  # before accel's kernels
    modules = [known[name].bench_module() for name in ops]
    peer_dists = [d for mod in modules if mod is not None for d in getattr(mod, "PEER_DISTRIBUTIONS", ())]
    installed = ak.install(kernels=list(ops))
    try:  # the overrides installed here are removed whatever happens
        facts = timing.device_facts(device)
        report: dict[str, Any] = {
            "device": facts["device"], "arch": facts["arch"], "backend": facts["backend"], "torch": torch.__version__,
            "versions": {d: module_version(d) for d in dict.fromkeys((*DSL_DISTRIBUTIONS, *peer_dists))},
            "copy_ceiling_gbs": ceiling, "installed": installed, "rounds": rounds, "peers": {},
            "rows": [], "aten_faster": [], "skipped": skipped,
        }
        for family in ops:
            run_family(known[family], report, timer, device, dtypes, started, budget_s, ceiling, shapes, rounds,
                       directions[family])
        report["router_overhead"] = timing.router_overhead(device)
        report["routed_counts"] = {o.name: {"routed": o.routed, "fallbacks": o.fallbacks, "failed": o.failed}
                                   for o in ak.overrides()}
        report["elapsed_s"] = time.perf_counter() - started
    finally:
        for name in installed:
            ak.unregister(name)
    return report


def to_markdown(report: dict[str, Any]) -> str:
    """The report (:func:`run`) as markdown: per op and direction a table of GB/s, % of the copy ceiling and
    the speed-up over ATen and the best peer; then the router's cost, the shapes ATen won and what was skipped."""
    lines = [f"# Kernels on {report['device']} ({report['arch']}), torch {report['torch']}", "",
             f"Copy ceiling measured in this run: {report['copy_ceiling_gbs']:.0f} GB/s. "
             f"Each time is the median of {report.get('rounds', 1)} interleaved round(s). "
             f"Versions: {report['versions']}. Peers: {report['peers']}.", ""]
    # reports written before rows carried their op had RMSNorm rows only
    ops = list(dict.fromkeys(r.get("op", "rms_norm") for r in report["rows"]))
    for op, direction in [(o, d) for o in ops for d in DIRECTIONS]:
        rows = [r for r in report["rows"] if r["direction"] == direction and r.get("op", "rms_norm") == op]
        if not rows:
            continue
        seen = dict.fromkeys(n for r in rows for n in (*r["impls"], *r["errors"]))
        columns = [*IMPL_ORDER, *(n for n in seen if n not in IMPL_ORDER)]
        lines += [f"## {op} {direction}: GB/s (% of ceiling) and x vs ATen / x vs best peer", "",
                  "| dtype | shape | routed to | " + " | ".join(columns) + " |",
                  "|---|---|---|" + "---:|" * len(columns)]
        for r in rows:
            cells = []
            for name in columns:
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
            grouped.setdefault((e.get("op", "rms_norm"), tuple(e["key"])), []).append(e)
        for (op, key), entries in grouped.items():
            body = "".join(f"{tuple(e['entry'])!r}, " for e in entries)
            notes = "; ".join(f"N={e['entry'][0]} M={e['entry'][1]}: routed {e['routed_us']:.1f} µs vs ATen "
                              f"{e['aten_us']:.1f} µs" for e in entries)
            lines.append(f"{key!r}: ({body.rstrip(', ')}{',' if len(entries) == 1 else ''}),  # {op}: {notes}")
        lines += ["```", ""]
    if report["skipped"]:
        lines += ["Skipped: " + "; ".join(report["skipped"]), ""]
    lines.append(f"Elapsed: {report.get('elapsed_s', 0):.0f} s.")
    return "\n".join(lines)
