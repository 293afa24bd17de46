"""``accel bench --tune``: measure the tuning table on the current device and write it to the user cache.

For each op family (forward and backward), dtype and benchmark shape: time ATen, then every candidate config
of each DSL kernel that the family's bench module offers (``tune_candidates``; the kernel's default config
first). Each config is launched explicitly (Triton launch parameters, or a ``helion.Config`` bound with
:func:`accel.kernels.dsl.helion_utils.bind`), checked against ATen's result, and timed with the vendor's
events through accel (:class:`~accel.kernels.bench.timing.Timer`: CUDA, HIP or XPU events, cache flushed,
median of the reps; no ``torch.cuda`` call on another vendor); a config that fails to compile, launch or
agree is reported and skipped. Helion's own autotuner is never entered (why: :mod:`accel.kernels.tuning.table`).
Then ATen and each DSL's fastest config are timed again in :data:`~accel.kernels.tuning.table.MIN_ROUNDS`
(or more) interleaved rounds; an entry names a kernel only where its median over those rounds is at least
:data:`~accel.kernels.tuning.table.MIN_SPEEDUP` times ATen's speed, else ``"aten"`` (the one routing policy of
every vendor: :mod:`accel.kernels.tuning.table`). Entries are written with
:func:`accel.kernels.tuning.table.write_user_table` into the table of the device's arch (``sm_90``,
``gfx942``, ``pvc``, ...), after which that arch's kernels route where they won. Stops at ``--budget``
seconds; progress is shown with ``rich``.

The search knows no op by name: the families come from :func:`accel.kernels.catalog.families`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import accel.kernels as ak
from accel.kernels.catalog import families
from accel.kernels.dsl.launch import arch
from accel.kernels.tuning import table
from accel.kernels.tuning.tolerance import compare

from .arguments import DTYPES, check_arguments, check_ops
from .runner import aten_directions

__all__ = ["jobs", "run_from_args", "timer_for", "tune"]


#: Timed reps per config and round on a GPU (the median is kept).
REPS = 10


def timer_for(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    """µs of one call as the tuner times it: on a GPU of any vendor the median of :data:`REPS` event-timed
    reps with the cache flushed (:class:`~accel.kernels.bench.timing.Timer`); on the CPU (smoke runs of this
    code only) the wall time of one call after one warm-up call."""
    from . import timing

    if timing.has_events(device):
        return timing.Timer(device, REPS)

    def wall(fn):
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6

    return wall


def jobs(ops, dtypes, device: torch.device, shapes=None,
         skipped: list[str] | None = None) -> Iterator[tuple[Any, str, str, str, int, int]]:
    """``(bench module, family name, direction, dtype name, m, n)`` per tuning job, family by family, then dtype,
    shape (``shapes``, default each bench module's ``SHAPES``) and direction (forward first).

    A family without a bench module, and a direction ATen has no kernel for on ``device`` (nothing to
    compare with: :func:`~accel.kernels.bench.runner.aten_directions`), are added to ``skipped`` (when given)
    and have no jobs.
    """
    known = families()
    skipped = [] if skipped is None else skipped
    for name in ops:
        module = known[name].bench_module()
        if module is None:
            skipped.append(f"{name}: its OpFamily declares no bench module (no candidates to tune)")
            continue
        directions = aten_directions(known[name], device, skipped)
        for dname in dtypes:
            for m, n in shapes or module.SHAPES:
                for direction in directions:
                    yield module, name, direction, dname, m, n


def tune(ops=None, dtypes=("bf16",), budget_s: float = 600.0, device: torch.device | None = None,
         progress: Callable[[str], None] | None = None, write: bool = True, shapes=None,
         rounds: int = table.MIN_ROUNDS) -> dict[str, Any]:
    """Measure the table; returns ``{"arch", "device", "backend", "entries", "errors", "skipped", "path",
    "elapsed_s", "trials"}``.

    ``entries``: one per job, ``{"op", "dtype", "m", "n", "impl", "config", "configs", "us", "rounds",
    "evidence"}`` (``configs``: each DSL's fastest config; ``us``: ATen's and each DSL's median µs over the
    ``rounds`` confirmation rounds; ``impl`` a DSL only where it is at least
    :data:`~accel.kernels.tuning.table.MIN_SPEEDUP` x ATen there, else ``"aten"``). ``trials``: one
    ``{"op", "dtype", "m", "n", "dsl", "config", "us"}`` per config timed (ATen too, config ``None``), fastest
    first per job - the evidence behind each entry (``--json`` prints it).

    Args:
        ops: op family names (``None``: every family of :func:`accel.kernels.catalog.families`, by name).
        dtypes: names among ``bf16``, ``fp16``, ``fp32``.
        budget_s: stop starting new jobs and configs after this many seconds.
        device: default the active accel backend's current device (NVIDIA, AMD or Intel; a CPU device only
            smoke-tests this code).
        progress: called with one line per finished job.
        write: write the entries to the user cache (:func:`accel.kernels.tuning.table.write_user_table`).
        shapes: ``[M, N]`` pairs for every family (``None``: each family's benchmark shapes).
        rounds: confirmation rounds of ATen against each DSL's best config (at least
            :data:`~accel.kernels.tuning.table.MIN_ROUNDS`).

    Raises:
        BenchArgumentError: ``budget_s`` or a shape out of range, ``rounds`` below
            :data:`~accel.kernels.tuning.table.MIN_ROUNDS`, or ``ops`` empty or unknown.
        KernelUnavailableError: no device given and the active backend is no GPU accel's kernels run on.
    """
    check_arguments(budget_s=budget_s, shapes=shapes)
    known = families()
    ops = check_ops(known if ops is None else ops, known)

    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < table.MIN_ROUNDS:
        from accel.errors import BenchArgumentError

        raise BenchArgumentError(f"accel bench --tune: rounds={rounds!r} is fewer than {table.MIN_ROUNDS}: a table "
                                 f"entry is the median of at least {table.MIN_ROUNDS} rounds. Pass rounds >= "
                                 f"{table.MIN_ROUNDS}.")
    if device is None:
        from . import timing

        device = timing.bench_device("accel bench --tune", "Tuning measures kernels on the GPU it is for; run it "
                                                           "there.")
    where = arch(device)
    bench = timer_for(device)
    started = time.perf_counter()
    entries, errors, skipped, trials = [], [], [], []
    for module, family, direction, dname, m, n in jobs(ops, dtypes, device, shapes, skipped):
        op = f"{family}_{direction}"
        if time.perf_counter() - started > budget_s:
            skipped.append(f"{op} {dname} {m}x{n}: budget {budget_s} s spent")
            continue
        aten, cands = module.tune_candidates(direction, DTYPES[dname], m, n, device)
        with ak.disabled():
            ref = aten()
            times = {"aten": bench(aten)}
        best_cfg: dict[str, Any] = {}
        job = {"op": op, "dtype": table.dtype_name(DTYPES[dname]), "m": m, "n": n}
        timed = [dict(job, dsl="aten", config=None, us=times["aten"])]
        for dsl, (launch, configs) in cands.items():
            for cfg in configs:
                if time.perf_counter() - started > budget_s:
                    break
                unfit = table.unfit_reason(op, dsl, where, DTYPES[dname], cfg if isinstance(cfg, dict) else None)
                if unfit is not None:
                    skipped.append(f"{op} {dname} {m}x{n} {dsl} {cfg}: not timed on {where}: {unfit}")
                    continue
                try:
                    problem = compare(launch(cfg), ref)[1]
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
        medians = _confirm(bench, aten, {d: (cands[d][0], c) for d, c in best_cfg.items()}, rounds)
        winner, evidence = _winner(medians)
        trials += sorted(timed, key=lambda t: t["us"])
        times = medians
        entries.append(dict(job, impl=winner, config=best_cfg.get(winner), configs=best_cfg, us=medians,
                            rounds=rounds, evidence=evidence))
        if progress is not None:
            progress(f"{op} {dname} {m}x{n}: {winner} " + " ".join(f"{k}={v:.1f}us" for k, v in times.items()))
    path = table.write_user_table(where, entries) if write and entries else None
    from . import timing

    facts = timing.device_facts(device)
    return {"arch": where, "device": facts["device"], "backend": facts["backend"], "entries": entries, "errors": errors, "skipped": skipped,
            "path": str(path) if path else None, "elapsed_s": time.perf_counter() - started, "trials": trials}


def _confirm(bench: Callable[[Callable[[], Any]], float], aten: Callable[[], Any],
             best: dict[str, tuple[Callable[[Any], Any], Any]], rounds: int) -> dict[str, float]:
    """Median µs of ATen (overrides disabled) and of each DSL's best config over ``rounds`` interleaved rounds
    (each round times every one once, in turn: a drift of clocks shifts all alike)."""
    times: dict[str, list[float]] = {"aten": [], **{d: [] for d in best}}
    for _ in range(rounds):
        with ak.disabled():
            times["aten"].append(bench(aten))
        for dsl, (launch, cfg) in best.items():
            times[dsl].append(bench(lambda launch=launch, cfg=cfg: launch(cfg)))
    return {name: statistics.median(ts) for name, ts in times.items()}


def _winner(medians: dict[str, float]) -> tuple[str, str]:
    """``(impl, evidence)``: the fastest DSL where it is at least ``MIN_SPEEDUP`` x ATen's speed, else ATen."""
    aten = medians["aten"]
    kernels = {k: v for k, v in medians.items() if k != "aten"}
    if not kernels:
        return "aten", "no kernel config ran correctly"
    best = min(kernels, key=kernels.get)
    speedup = aten / kernels[best] if kernels[best] > 0 else float("inf")
    if speedup >= table.MIN_SPEEDUP:
        return best, f"{best} {speedup:.2f}x ATen (median of the rounds)"
    return "aten", f"{best} only {speedup:.2f}x ATen (< {table.MIN_SPEEDUP}x): ATen"


def run_from_args(args: argparse.Namespace, ops, dtypes, shapes=None) -> int:
    """``accel bench --tune``: tune with a rich progress display on stderr; print the summary (or the JSON
    result with ``--json``). Returns the exit code, 0."""
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
              f"{len(result['skipped'])} skipped (budget spent, or no ATen kernel to compare with)")
        for e in result["errors"][:20]:
            print("  failed:", e)
    return 0
