"""What an op folder's ``bench.py`` hands the benchmark for one shape and direction: :class:`Case`.

Each op family that declares ``bench=`` in its :class:`~accel.kernels.core.spec.OpFamily` has a module
``accel.kernels.ops.<op>.bench`` with:

- ``SHAPES``: the default ``[M, N]`` pairs, a tuple of ``(int, int)``;
- ``peers() -> {name: object or the exception that kept it out}``: the benchmark-only peers
  (Liger-Kernel, quack), imported once per run;
- ``cases(m, n, dtype, device, found) -> {direction: Case}``: the rows of one ``[m, n]`` shape of
  ``dtype`` on ``device`` (``found``: what ``peers()`` returned), ``direction`` ``"fwd"`` or ``"bwd"``;
- ``tune_candidates(direction, dtype, m, n, device) -> (aten, {dsl: (launch, configs)})``: what
  ``accel bench --tune`` times (``launch(config)`` returns the output to compare with ``aten()``'s);
- optionally ``PEER_DISTRIBUTIONS``: the peers' package names, whose versions the report lists.

This module imports nothing of accel: the op folders import it without importing the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Case", "first_output"]


def first_output(out: Any) -> Any:
    """The first tensor of ``out``, descending into nested tuples and lists (``out`` itself if neither)."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


class Case(NamedTuple):
    """One benchmark row's callables: ATen's and every candidate's, each taking no argument.

    Attributes:
        aten: ATen's call (the benchmark runs it with accel's overrides disabled); its result, through
            ``compared``, is the reference.
        candidates: name -> call, in the report's order: accel's kernels called directly (``"triton"``,
            ``"helion"``, ``"cutedsl"``), ``"routed"`` (the ATen op through accel's overrides), then the
            peers under the names ``peers()`` gave them.
        compared: output -> what is compared with the reference (:func:`accel.kernels.tuning.tolerance.compare`);
            default the first tensor, for ops whose candidates return different extras (statistics,
            weight gradients).
    """

    aten: Callable[[], Any]
    candidates: dict[str, Callable[[], Any]]
    compared: Callable[[Any], Any] = first_output
