"""The options of ``accel bench`` (and ``benchmarks/kernel_bench.py``), parsed and checked before any device is used.

Every refusal is a :class:`~accel.errors.BenchArgumentError` (a ``ValueError``: the CLI exits 2) naming the
option, the value given and a value that works.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Iterable, Mapping

import torch

from accel.errors import BenchArgumentError

__all__ = ["DTYPES", "MAX_ELEMENTS", "add_arguments", "check_arguments", "check_ops", "check_out", "parse_dtypes",
           "parse_ops", "parse_shapes"]

#: Names of ``--dtypes`` -> torch dtype.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

#: Most elements of one benchmarked ``[M, N]`` tensor (2**34: 32 GiB in bf16; a row holds input, output and
#: gradients of that size, so larger ones cannot fit an H200's 141 GB).
MAX_ELEMENTS = 1 << 34


def check_arguments(*, reps: int | None = None, budget_s: float | None = None, shapes=None,
                    rounds: int | None = None) -> None:
    """Refuse out-of-range benchmark or tuner arguments; changes nothing. ``None`` skips a check.

    Args:
        reps: timed repetitions per candidate, an ``int >= 1``.
        budget_s: seconds, a number ``> 0`` (not NaN).
        shapes: ``[M, N]`` pairs, ``M`` and ``N`` ints ``>= 1``, ``M * N <= MAX_ELEMENTS``.
        rounds: rounds per row, an ``int >= 1``.

    Raises:
        BenchArgumentError: the first argument out of range, with its value and an example that works.
    """
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


_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def check_out(out: str | os.PathLike | None) -> None:
    """Make sure ``--out DIR`` can take the report files before anything is measured (it is created).

    Raises:
        BenchArgumentError: ``out`` exists and is not a directory, or cannot be created or written.
    """
    if out is None:
        return
    path = os.fspath(out)
    try:
        os.makedirs(path, exist_ok=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        why = getattr(exc, "strerror", None) or str(exc)
        raise BenchArgumentError(f"accel bench: --out {path!r}: cannot create that directory ({why}). The report "
                                 f"files go there. Pass a directory you can write, e.g. --out results/.") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise BenchArgumentError(f"accel bench: --out {path!r}: the directory is not writable. Pass a directory you can "
                                 f"write, e.g. --out results/.")


def check_ops(ops: Iterable[str], known: Mapping[str, object], given: str | None = None) -> tuple[str, ...]:
    """``ops`` without repeats, each a family of ``known`` (:func:`accel.kernels.catalog.families`).

    Args:
        ops: op family names.
        known: the families, by name.
        given: the ``--ops`` text they came from, for the message (``None``: a Python call).

    Raises:
        BenchArgumentError: ``ops`` is empty or names a family ``known`` lacks.
    """
    ops = tuple(dict.fromkeys(ops))
    unknown = [o for o in ops if o not in known]
    if unknown or not ops:
        where = f"--ops {given!r}" if given is not None else f"ops {ops!r}"
        raise BenchArgumentError(f"accel bench: {where}: {f'unknown {unknown}' if unknown else 'none given'}. "
                                 f"Valid: {', '.join(known)}.")
    return ops


def parse_shapes(text: str | None) -> tuple[tuple[int, int], ...] | None:
    """``--shapes`` (``"4096x4096,65536x1024"``) as ``((4096, 4096), (65536, 1024))``; ``None`` stays ``None``.

    Raises:
        BenchArgumentError: an item is not ``MxN`` with sides of ASCII digits (the range is :func:`check_arguments`'s).
    """
    if text is None:
        return None
    parsed = []
    for s in text.split(","):
        sides = s.strip().lower().split("x")
        # ASCII digits only: int() also reads '٣', '+4', '1_0' and ' 4' (as device indices are parsed)
        shape = tuple(int(v) for v in sides) if all(_DIGITS.fullmatch(v) for v in sides) else ()
        if len(shape) != 2:
            raise BenchArgumentError(f"accel bench: --shapes {text!r}: {s.strip()!r} is not MxN. Write "
                                     f"e.g. --shapes 4096x4096,65536x1024 (or leave --shapes out for the issue "
                                     f"shapes).")
        parsed.append(shape)
    return tuple(parsed)


def parse_dtypes(text: str) -> tuple[str, ...]:
    """``--dtypes`` (``"bf16,fp16"``) as names of :data:`DTYPES`, each once.

    Raises:
        BenchArgumentError: none given, or a name not in :data:`DTYPES`.
    """
    dtypes = tuple(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))  # repeats: once
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise BenchArgumentError(f"accel bench: --dtypes {text!r}: "
                                 f"{f'{bad} not among' if bad else 'none given; choose from'} {list(DTYPES)}. "
                                 f"Write e.g. --dtypes bf16,fp16.")
    return dtypes


def parse_ops(text: str | None, known: Mapping[str, object]) -> tuple[str, ...]:
    """``--ops`` (``"rms_norm,softmax"``) as family names, each once; ``None``: every family of ``known``.

    Raises:
        BenchArgumentError: none given, or a name not in ``known``.
    """
    if text is None:
        return tuple(known)
    return check_ops((o.strip() for o in text.split(",") if o.strip()), known, given=text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to ``p`` (shared by ``accel bench`` and ``benchmarks/kernel_bench.py``)."""
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
    p.add_argument("--ops", default=None,
                   help="comma-separated op families, e.g. rms_norm,softmax (default: every family under "
                        "accel.kernels.ops, by name; accel kernels lists them)")
    p.add_argument("--tune", action="store_true",
                   help="measure the tuning table on this device (ATen vs the Triton, Helion and CuTeDSL configs) and write it "
                        "to the user cache; accel times its own candidate configs and does not run Helion's autotuner "
                        "(the accel.kernels.tuning.table module docstring says why)")
