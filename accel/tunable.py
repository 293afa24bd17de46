"""TunableOp for GEMMs on CUDA and ROCm: a thin, documented wrapper over ``torch.cuda.tunable``.

TunableOp times every GEMM kernel candidate (cuBLAS / cuBLASLt on CUDA; rocBLAS,
hipBLASLt on ROCm) for each new shape and keeps the fastest. :func:`record` tunes
and writes the winners to a CSV file; :func:`replay` reads such a file and uses
its choices without tuning again (fast start-up, reproducible kernels).

Example (on a GPU)::

    with accel.tunable.record("gemm_tunings.csv"):
        model(x)            # tunes each new GEMM shape once
    with accel.tunable.replay("gemm_tunings.csv"):
        model(x)            # same kernels, no tuning

.. note:: TunableOp state is process-global. Each context manager restores the
   previous state (enabled, tuning, filename) on exit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from accel import _compat
from accel.errors import FeatureUnavailableError, TunableFileError

__all__ = ["available", "disable", "enable", "is_enabled", "record", "replay"]


def available(device: Any = None, /) -> tuple[bool, str]:
    """Whether TunableOp applies on ``device`` (``None`` = active), and why.

    Example:
        >>> import accel.tunable
        >>> accel.tunable.available("cpu")[0]
        False
    """
    from accel._select import backend

    vendor = backend(device)
    if not vendor.capabilities().tunable_op:
        return False, f"TunableOp tunes CUDA/ROCm GEMMs; the {vendor.name} backend has none"
    if not _compat.has_cuda_tunable():
        return False, f"torch {torch.__version__} has no torch.cuda.tunable"
    return True, f"torch.cuda.tunable on {vendor.name}"


def _require() -> Any:
    ok, why = available()
    if not ok:
        raise FeatureUnavailableError(f"accel.tunable: TunableOp is not available: {why}. "
                                      "Select a CUDA or ROCm device (ACCEL_DEVICE=cuda).")
    return torch.cuda.tunable


def enable(*, tuning: bool = True, filename: str | os.PathLike[str] | None = None,
           max_tuning_duration_ms: int | None = None, max_tuning_iterations: int | None = None) -> None:
    """Turn TunableOp on for the rest of the process.

    Args:
        tuning: tune shapes not in the results yet (``False``: only use known results).
        filename: CSV results file to read at first use and write at exit.
        max_tuning_duration_ms: cap on the time spent tuning one GEMM (ms).
        max_tuning_iterations: cap on timed iterations per candidate.

    Raises:
        FeatureUnavailableError: the active backend is not CUDA/ROCm, or torch lacks TunableOp.
    """
    t = _require()
    t.enable(True)
    t.tuning_enable(tuning)
    if filename is not None:
        t.set_filename(os.fspath(filename))
    if max_tuning_duration_ms is not None:
        t.set_max_tuning_duration(int(max_tuning_duration_ms))
    if max_tuning_iterations is not None:
        t.set_max_tuning_iterations(int(max_tuning_iterations))


def disable() -> None:
    """Turn TunableOp off (GEMMs use the libraries' default heuristics again).

    Raises:
        FeatureUnavailableError: as :func:`enable`.
    """
    _require().enable(False)


def is_enabled() -> bool:
    """Whether TunableOp is on (``False`` where it is not available)."""
    return available()[0] and torch.cuda.tunable.is_enabled()


@contextlib.contextmanager
def _restoring(t: Any) -> Iterator[None]:
    before = (t.is_enabled(), t.tuning_is_enabled(), t.get_filename())
    try:
        yield
    finally:
        t.enable(before[0])
        t.tuning_enable(before[1])
        t.set_filename(before[2])


@contextlib.contextmanager
def record(filename: str | os.PathLike[str], *, max_tuning_duration_ms: int | None = None,
           max_tuning_iterations: int | None = None) -> Iterator[None]:
    """Tune GEMMs inside the block and save the winners to ``filename`` (CSV).

    Results already in ``filename`` are read first and kept. On exit the file is
    written (where the running torch can write on demand; otherwise torch writes
    it when the process exits) and the previous TunableOp state is restored.

    Args:
        filename: the CSV results file.
        max_tuning_duration_ms: cap on tuning time per GEMM (ms).
        max_tuning_iterations: cap on timed iterations per candidate.

    Raises:
        FeatureUnavailableError: the active backend is not CUDA/ROCm, or torch lacks TunableOp.
    """
    t = _require()
    path = os.fspath(filename)
    with _restoring(t):
        enable(tuning=True, filename=path, max_tuning_duration_ms=max_tuning_duration_ms,
               max_tuning_iterations=max_tuning_iterations)
        yield
        writer = _compat.tunable_writer()
        if writer is not None:
            writer(path)


@contextlib.contextmanager
def replay(filename: str | os.PathLike[str]) -> Iterator[None]:
    """Use the GEMM choices recorded in ``filename`` inside the block, without tuning.

    Args:
        filename: a CSV file written by :func:`record` (or by TunableOp itself).

    Raises:
        TunableFileError: (a ``FileNotFoundError``) the file is missing, or torch
            rejected it (e.g. recorded by another torch / library version). State is unchanged then.
        FeatureUnavailableError: the active backend is not CUDA/ROCm, or torch lacks TunableOp.
    """
    t = _require()
    path = os.fspath(filename)
    if not os.path.isfile(path):
        raise TunableFileError(f"accel.tunable.replay: no results file at {path!r}. "
                               "Record one first with accel.tunable.record(path).")
    with _restoring(t):
        t.enable(True)
        t.tuning_enable(False)
        t.set_filename(path)
        if not t.read_file(path):
            raise TunableFileError(
                f"accel.tunable.replay: torch rejected {path!r} (its validators — torch, CUDA/ROCm, library "
                "versions — do not match this process, or the file is malformed). Record it again here."
            )
        yield
