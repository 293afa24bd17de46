"""Kernel benchmark of every op family: ATen eager vs each DSL kernel vs the routed call vs the peers (Liger-Kernel, quack).

Run as ``accel bench`` or ``python benchmarks/kernel_bench.py``. Needs a CUDA GPU. Per op family, shape, dtype
and direction it reports time (µs, median of CUDA-event timings with the L2 flushed before each rep), GB/s,
% of the copy ceiling measured in the same run, the speed-up over ATen and over the best peer, and the
router's own cost on an 8-element tensor. The peers are benchmark-only and used when importable. Every
candidate's output is checked against ATen's before it is timed; a wrong one is reported, not timed.
Helion runs with a fixed config (no autotuning at run time). ``--tune`` measures the tuning table instead.

Modules, each one thing (imports run down this list, never up):

- :mod:`.case` and :mod:`.peers`: what an op folder's ``bench.py`` returns and the helpers it uses (the
  per-op contract is in :mod:`.case`); they import nothing of accel.
- :mod:`.arguments`: the options, parsed and checked before any device is used.
- :mod:`.timing`: :class:`~.timing.Timer`, the copy ceiling, the router's cost.
- :mod:`.runner`: the report (:func:`run`) and its markdown (:func:`to_markdown`).
- :mod:`.tune`: the ``--tune`` search (:func:`.tune.tune`).

The per-op parts live in each op folder: ``accel.kernels.ops.<op>.bench`` (shapes, peers, cases, tuning
candidates), found through :func:`accel.kernels.catalog.families`.

The command line sits above this package: ``accel bench`` (:mod:`accel.cli.bench`) calls
:func:`run_from_args`, and this package never imports :mod:`accel.cli`. ``python -m accel.kernels.bench`` and
``python benchmarks/kernel_bench.py`` are ``accel bench`` itself (:func:`accel.cli.bench.main`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from . import arguments, runner, timing, tune
from .arguments import DTYPES, MAX_ELEMENTS, add_arguments, check_arguments
from .runner import run, to_markdown
from .timing import Timer

__all__ = ["DTYPES", "MAX_ELEMENTS", "Timer", "add_arguments", "check_arguments", "run", "run_from_args",
           "to_markdown", "tune"]


def run_from_args(args: argparse.Namespace, on_report: Callable[[dict], dict] | None = None) -> int:
    """Run with options parsed by :func:`add_arguments`'s parser; print and write the results.

    Prints the markdown report (the JSON one with ``--json``); with ``--out DIR`` also writes
    ``kernels-<time>.json`` and ``.md`` there. With ``--tune`` runs :func:`.tune.run_from_args` instead.
    ``on_report``, if given, receives the report before it is printed or written and returns the report to
    print and write (``accel bench`` stamps its JSON schema there).

    Returns:
        The exit code, 0.

    Raises:
        BenchArgumentError: an option out of range or malformed, raised before any device is used.
        KernelUnavailableError: no usable CUDA device.
    """
    from accel.kernels.catalog import families

    shapes = arguments.parse_shapes(args.shapes)
    dtypes = arguments.parse_dtypes(args.dtypes)
    ops = arguments.parse_ops(args.ops, families())
    rounds = getattr(args, "rounds", 1)
    check_arguments(reps=args.reps, budget_s=args.budget_s, shapes=shapes, rounds=rounds)  # before any device check
    arguments.check_out(getattr(args, "out", None))  # a bad --out must not surface after the whole run
    if getattr(args, "tune", False):
        return tune.run_from_args(args, ops, dtypes, shapes)
    report = runner.run(shapes, dtypes, reps=args.reps, budget_s=args.budget_s, ops=ops, rounds=rounds)
    if on_report is not None:
        report = on_report(report)
    md = runner.to_markdown(report)
    print(json.dumps(report, indent=2) if args.json else md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (out / f"kernels-{stamp}.json").write_text(json.dumps(report, indent=2))
        (out / f"kernels-{stamp}.md").write_text(md + "\n")
    return 0
