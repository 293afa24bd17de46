"""``accel bench``: the kernel benchmark (:mod:`accel.kernels.bench`) on the current GPU; ``--json`` prints its
report stamped with the versioned schema ``accel.bench``; ``--plot PATH`` also draws it (:mod:`accel.cli.plot`).
:func:`main` is the same command for ``python -m accel.kernels.bench`` and ``python benchmarks/kernel_bench.py``."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_parser", "main", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench`` to the ``accel`` command line."""
    from accel.kernels import bench

    p = subparsers.add_parser("bench", help="benchmark accel's kernels against ATen and peers (needs a GPU)",
                              description=bench.__doc__.splitlines()[0],
                              epilog="Exit status: 0; 1 when this machine has no GPU the kernels run on (the error "
                                     "lists every probe) or --plot lacks matplotlib; 2 for a bad option value "
                                     "(--shapes, --ops, --dtypes, --plot, ...).")
    bench.add_arguments(p)
    p.add_argument("--plot", metavar="PATH.png", default=None,
                   help="also draw the results as a PNG: GB/s per shape for ATen, each DSL, the routed call and the "
                        "peers, the copy ceiling as a line (needs matplotlib: pip install '.[plot]')")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark (or ``--tune``) with parsed options; every option, ``--plot`` included, is checked before
    any device is used. Returns the exit code, 0.

    Raises:
        BenchArgumentError: a malformed option, or ``--plot`` with ``--tune``.
        KernelUnavailableError: no GPU accel's kernels run on.
        FeatureUnavailableError: ``--plot`` without matplotlib.
    """
    from accel.cli.plot import check_plot, plot_bench
    from accel.cli.schemas import stamp
    from accel.errors import BenchArgumentError
    from accel.kernels import bench

    plot = getattr(args, "plot", None)
    if plot is not None:
        if args.tune:
            raise BenchArgumentError("--plot draws the benchmark's results; --tune measures a tuning table "
                                     "instead: pass one of them.")
        check_plot(plot)
    reports: list[dict] = []

    def on_report(report: dict) -> dict:
        reports.append(stamp("accel.bench", report))
        return reports[-1]

    code = bench.run_from_args(args, on_report)
    if plot is not None and reports:
        print(f"picture: {plot_bench(reports[-1], plot)}")
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -m accel.kernels.bench`` and ``python benchmarks/kernel_bench.py``: ``accel bench`` itself (the same
    options, messages, ``--json`` errors and exit codes: 2 for bad input, 1 for what this machine cannot do).

    Args:
        argv: the options after ``bench`` (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    from accel.cli import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])
