"""RMSNorm's part of ``accel bench``: default shapes, peers, benchmark cases and ``--tune`` candidates.

The contract is :mod:`accel.kernels.bench.case`'s. Forward rows compare the output ``y``; backward rows
``(dx, dw)``. Peers: Liger-Kernel's ``LigerRMSNormFunction`` and quack's ``quack.rmsnorm``. Importing this
module imports no DSL runtime and no peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.kernels.bench.case import Case, first_output
from accel.kernels.bench.peers import try_import
from accel.kernels.core.registry import disabled
from accel.kernels.dsl.launch import empty

from . import helion_impl, triton_impl

__all__ = ["EPS", "PEER_DISTRIBUTIONS", "SHAPES", "cases", "peers", "tune_candidates"]

#: [M, N] shapes of the issue's targets (bf16).
SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 1024))
EPS = 1e-6
PEER_DISTRIBUTIONS = ("liger-kernel", "quack-kernels")
_MASK = [True, True]


def peers() -> dict[str, Any]:
    """``{"liger": LigerRMSNormFunction, "quack": the quack.rmsnorm module}``, or the exception of each that
    did not import."""
    return {"liger": try_import("liger_kernel.ops.rms_norm", "LigerRMSNormFunction"),
            "quack": try_import("quack.rmsnorm")}


def _dx_dw(out: Any) -> tuple:
    return tuple(out[:2])


def cases(m: int, n: int, dtype: torch.dtype, device: torch.device, found: dict[str, Any]) -> dict[str, Case]:
    """The forward and backward rows of ``[m, n]`` ``dtype`` inputs on ``device`` (``found``: :func:`peers`).

    Inputs: ``x``, ``w`` (``[n]``) and ``dy``, standard normal from seed 0; ``rstd`` from ATen's forward.
    """
    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    with disabled():
        rstd = torch.ops.aten._fused_rms_norm.default(x, [n], w, EPS)[1]
    aten_bwd = torch.ops.aten._fused_rms_norm_backward.default
    liger, quack = (None if isinstance(found[k], Exception) else found[k] for k in ("liger", "quack"))

    fwd: dict[str, Callable[[], Any]] = {"triton": lambda: triton_impl.fused_rms_norm(x, [n], w, EPS)[0]}
    if helion_impl.available()[0]:
        fwd["helion"] = lambda: helion_impl.fused_rms_norm(x, [n], w, EPS)[0]
    fwd["routed"] = lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS)
    if liger is not None:
        fwd["liger"] = lambda: liger.apply(x, w, EPS)
    if quack is not None:
        fwd["quack"] = lambda: quack.rmsnorm_fwd(x, w, eps=EPS)[0]

    bwd: dict[str, Callable[[], Any]] = {
        "triton": lambda: triton_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, _MASK)}
    if helion_impl.available()[0]:
        bwd["helion"] = lambda: helion_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, _MASK)
    bwd["routed"] = lambda: aten_bwd(dy, x, [n], rstd, w, _MASK)
    if liger is not None:
        xg = x.detach().requires_grad_()
        wg = w.detach().requires_grad_()
        graph: list = []

        def liger_bwd():  # forward once (in_place=False keeps dy intact), then time the backward alone
            if not graph:
                graph.append(liger.apply(xg, wg, EPS, 0.0, "llama", False))
            return torch.autograd.grad(graph[0], (xg, wg), dy, retain_graph=True)

        bwd["liger"] = liger_bwd
    if quack is not None:
        r = rstd.view(-1).contiguous()
        bwd["quack"] = lambda: quack.rmsnorm_bwd(x, w, dy, r)[:2]
    # through F.rms_norm, like the routed call
    return {"fwd": Case(lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS), fwd, first_output),
            "bwd": Case(lambda: aten_bwd(dy, x, [n], rstd, w, _MASK), bwd, _dx_dw)}


def tune_candidates(direction: str, dtype: torch.dtype, m: int, n: int, device: torch.device):
    """``(aten, {dsl: (launch(config), [configs])})`` for one ``--tune`` job; ``launch`` returns the output
    compared with ``aten()``'s (``y`` or ``dx``).

    The Triton forward's launch configs are searched; the Triton backward and Helion run their own code's
    config (one candidate, ``None``).
    """
    from . import triton_kernel  # imports Triton: only when tuning

    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    out = empty((m, n), dtype, device)
    helion_ok = helion_impl.available()[0]
    cands: dict[str, tuple] = {}
    with disabled():
        _, rstd = torch.ops.aten._fused_rms_norm.default(x, [n], w, EPS)
    if direction == "fwd":
        aten = lambda: torch.ops.aten._fused_rms_norm.default(x, [n], w, EPS)[0]  # noqa: E731
        rstd_out = empty(m, torch.float32, device)
        cands["triton"] = (lambda c: (triton_impl.launch_fwd(x, w, out, rstd_out, EPS, c, m, n), out)[1],
                           triton_kernel.candidate_configs(n))
        if helion_ok and n <= helion_impl.LIMITS.max_n_fwd:
            cands["helion"] = (lambda c: helion_impl.fused_rms_norm(x, [n], w, EPS)[0], [None])
        return aten, cands
    aten = lambda: torch.ops.aten._fused_rms_norm_backward.default(dy, x, [n], rstd, w, _MASK)[0]  # noqa: E731
    if n <= triton_impl.LIMITS.max_n_bwd:
        cands["triton"] = (lambda c: triton_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, _MASK)[0], [None])
    if helion_ok and n <= helion_impl.LIMITS.max_n_bwd:
        cands["helion"] = (lambda c: helion_impl.fused_rms_norm_backward(dy, x, [n], rstd, w, _MASK)[0], [None])
    return aten, cands
