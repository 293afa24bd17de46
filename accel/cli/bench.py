"""``accel bench``: the kernel benchmark (:mod:`accel.kernels.bench`) on the current CUDA device."""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench`` to the ``accel`` command line."""
    from accel.kernels import bench

    p = subparsers.add_parser("bench", help="benchmark accel's kernels against ATen and peers (needs a GPU)",
                              description=bench.__doc__.splitlines()[0],
                              epilog="Exit status: 0; 1 when this machine has no NVIDIA GPU (the error lists every "
                                     "probe); 2 for a bad option value (--shapes, --ops, --dtypes, ...).")
    bench.add_arguments(p)
    p.set_defaults(func=bench.run_from_args)
