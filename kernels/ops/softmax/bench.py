"""Softmax's part of ``accel bench``: default shapes, peers, benchmark cases and ``--tune`` candidates.

The contract is :mod:`accel.kernels.bench.case`'s. Rows compare the first output (``y``, ``dx``). Peers:
Liger-Kernel's ``LigerSoftmaxFunction`` and quack's ``quack.softmax.softmax``. Bytes: forward read x, write
y; backward read y and dy, write dx. Importing this module imports no DSL runtime and no peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.kernels.bench.case import Case
from accel.kernels.bench.peers import autograd_bwd, try_import
from accel.kernels.core.registry import disabled
from accel.kernels.dsl.launch import empty

from . import cutedsl_configs, cutedsl_impl, helion_impl, triton_impl

__all__ = ["PEER_DISTRIBUTIONS", "SHAPES", "cases", "peers", "tune_candidates"]

#: [M, N] shapes of the issue's targets.
SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (32768, 4096), (8192, 32768), (65536, 1024))
PEER_DISTRIBUTIONS = ("liger-kernel", "quack-kernels")


def peers() -> dict[str, Any]:
    """``{"liger": LigerSoftmaxFunction, "quack": quack.softmax.softmax}``, or the exception of each that did
    not import."""
    return {"liger": try_import("liger_kernel.ops.softmax", "LigerSoftmaxFunction"),
            "quack": try_import("quack.softmax", "softmax")}


def cases(m: int, n: int, dtype: torch.dtype, device: torch.device, found: dict[str, Any]) -> dict[str, Case]:
    """The forward and backward rows of ``[m, n]`` ``dtype`` inputs on ``device`` (``found``: :func:`peers`).

    Inputs: ``x`` and ``dy``, standard normal from seed 0; ``y`` is ATen's softmax of ``x``.
    """
    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    liger, quack = (None if isinstance(found.get(k), Exception) else found.get(k) for k in ("liger", "quack"))
    with disabled():
        y = torch.ops.aten._softmax.default(x, -1, False)
    aten_bwd = torch.ops.aten._softmax_backward_data.default
    helion_ok = helion_impl.available()[0]

    fwd: dict[str, Callable[[], Any]] = {"triton": lambda: triton_impl.softmax(x, -1, False)}
    if helion_ok and n <= helion_impl.LIMITS.max_n_fwd:
        fwd["helion"] = lambda: helion_impl.softmax(x, -1, False)
    if cutedsl_impl.usable("softmax_fwd", x, n):
        fwd["cutedsl"] = lambda: cutedsl_impl.softmax(x, -1, False)
    fwd["routed"] = lambda: torch.softmax(x, -1)
    if liger is not None:
        fwd["liger"] = lambda: liger.apply(x)
    if quack is not None:
        fwd["quack"] = lambda: quack(x)

    bwd: dict[str, Callable[[], Any]] = {"triton": lambda: triton_impl.softmax_backward_data(dy, y, -1, dtype)}
    if helion_ok and n <= helion_impl.LIMITS.max_n_bwd:
        bwd["helion"] = lambda: helion_impl.softmax_backward_data(dy, y, -1, dtype)
    if cutedsl_impl.usable("softmax_bwd", y, n, dy):
        bwd["cutedsl"] = lambda: cutedsl_impl.softmax_backward_data(dy, y, -1, dtype)
    bwd["routed"] = lambda: aten_bwd(dy, y, -1, dtype)
    if liger is not None:
        bwd["liger"] = autograd_bwd(lambda t: liger.apply(t), (x,), dy)
    return {"fwd": Case(lambda: torch.softmax(x, -1), fwd),
            "bwd": Case(lambda: aten_bwd(dy, y, -1, dtype), bwd)}


def tune_candidates(direction: str, dtype: torch.dtype, m: int, n: int, device: torch.device):
    """``(aten, {dsl: (launch(config), [configs])})`` for one ``--tune`` job: every Triton, Helion and CuTeDSL
    config of the kernels that take rows of ``n``; ``launch`` returns ``y`` (forward) or ``dx`` (backward)."""
    from . import triton_kernel  # imports Triton: only when tuning

    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    out = empty((m, n), dtype, device)
    helion_ok = helion_impl.available()[0]
    cute_ok = cutedsl_impl.usable(f"softmax_{direction}", x, n)
    cands: dict[str, tuple] = {}
    with disabled():
        y = torch.ops.aten._softmax.default(x, -1, False)
    if direction == "fwd":
        aten = lambda: torch.ops.aten._softmax.default(x, -1, False)  # noqa: E731
        cands["triton"] = (lambda c: (triton_impl.launch_fwd(x, out, c), out)[1], triton_kernel.candidate_configs(n))
        if helion_ok and n <= helion_impl.LIMITS.max_n_fwd:
            from . import helion_kernel  # imports Helion

            cands["helion"] = (lambda c: (helion_impl.launch_fwd(x, out, c), out)[1], helion_kernel.candidate_configs(n))
        if cute_ok:
            cands["cutedsl"] = (lambda c: (cutedsl_impl.launch_fwd(x, out, c), out)[1],
                                cutedsl_configs.candidate_configs(n, x.element_size(), 1))
        return aten, cands
    aten = lambda: torch.ops.aten._softmax_backward_data.default(dy, y, -1, dtype)  # noqa: E731
    cands["triton"] = (lambda c: (triton_impl.launch_bwd(dy, y, out, c), out)[1], triton_kernel.candidate_configs(n))
    if helion_ok and n <= helion_impl.LIMITS.max_n_bwd:
        from . import helion_kernel  # imports Helion

        cands["helion"] = (lambda c: (helion_impl.launch_bwd(dy, y, out, c), out)[1], helion_kernel.candidate_configs(n))
    if cute_ok:
        cands["cutedsl"] = (lambda c: (cutedsl_impl.launch_bwd(dy, y, out, c), out)[1],
                            cutedsl_configs.candidate_configs(n, x.element_size(), 2))
    return aten, cands
