"""LayerNorm's part of ``accel bench``: default shapes, peers, benchmark cases and ``--tune`` candidates.

The contract is :mod:`accel.kernels.bench.case`'s. Rows compare the first output (``y``, ``dx``). Peers:
Liger-Kernel's ``LigerLayerNormFunction`` and quack's LayerNorm (:func:`quack_layer_norm`). quack's LayerNorm
requires an fp32 weight: it gets one (the others get the input dtype, as ``nn.LayerNorm`` in bf16 has).
Bytes: forward read x, write y; backward read x and dy, write dx. Importing this module imports no DSL
runtime and no peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.kernels.bench.case import Case
from accel.kernels.bench.peers import autograd_bwd, try_import
from accel.kernels.core.registry import disabled
from accel.kernels.dsl.launch import empty, sm_count

from . import cutedsl_configs, cutedsl_impl, helion_impl, reference, triton_impl

__all__ = ["EPS", "PEER_DISTRIBUTIONS", "SHAPES", "cases", "peers", "quack_layer_norm", "tune_candidates"]

#: [M, N] shapes of the issue's targets.
SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 1024))
EPS = 1e-5
PEER_DISTRIBUTIONS = ("liger-kernel", "quack-kernels")
_MASK = [True, True, True]


def peers() -> dict[str, Any]:
    """``{"liger": LigerLayerNormFunction, "quack": (quack's _rmsnorm_fwd, _rmsnorm_bwd)}``, or the exception
    of each that did not import.

    quack 0.6.5 has no ``quack.layernorm``: its LayerNorm is the RMSNorm kernels with ``is_layernorm=True``
    (:func:`quack_layer_norm`), hence its private ``_rmsnorm_fwd``/``_rmsnorm_bwd``.
    """
    q_fwd, q_bwd = try_import("quack.rmsnorm", "_rmsnorm_fwd"), try_import("quack.rmsnorm", "_rmsnorm_bwd")
    return {"liger": try_import("liger_kernel.ops.layer_norm", "LigerLayerNormFunction"),
            "quack": next((e for e in (q_fwd, q_bwd) if isinstance(e, Exception)), (q_fwd, q_bwd))}


def quack_layer_norm(ops: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor):
    """quack's LayerNorm forward and backward as zero-argument callables.

    Runs quack's RMSNorm kernels with ``is_layernorm=True``, given an fp32 weight and bias as quack requires;
    the backward sums its per-SM dw/db partials, as accel's does.

    Args:
        ops: ``(quack.rmsnorm._rmsnorm_fwd, quack.rmsnorm._rmsnorm_bwd)``.
        x: input ``[M, N]``.
        w, b: weight and bias ``[N]`` (any float dtype; passed as fp32).
        dy: output gradient ``[M, N]``, ``x``'s dtype.

    Returns:
        ``(fwd, bwd)``: ``fwd()`` returns ``y`` ``[M, N]``; ``bwd()`` returns ``(dx, dw, db)`` (dw, db fp32
        ``[N]``) and runs ``fwd`` once first (quack's own mean and rstd, which it reads). A failure surfaces
        when a callable runs (the benchmark reports it per candidate).
    """
    q_fwd, q_bwd = ops
    m, n = x.shape
    w32, b32 = w.float(), b.float()
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    sms = sm_count(x.device)

    def fwd():
        y = torch.empty_like(x)
        q_fwd(x, w32, y, b32, rstd, mean, None, None, EPS, True, 0.0)
        return y

    filled: list = []

    def bwd():
        if not filled:
            filled.append(fwd())
        dx = torch.empty_like(x)
        dw = torch.empty(sms, n, dtype=torch.float32, device=x.device)
        db = torch.empty(sms, n, dtype=torch.float32, device=x.device)
        q_bwd(x, w32, dy, rstd, dx, dw, db, None, None, sms, mean, True, 0.0)
        return dx, dw.sum(0), db.sum(0)

    return fwd, bwd


def cases(m: int, n: int, dtype: torch.dtype, device: torch.device, found: dict[str, Any]) -> dict[str, Case]:
    """The forward and backward rows of ``[m, n]`` ``dtype`` inputs on ``device`` (``found``: :func:`peers`).

    Inputs: ``x``, ``dy``, ``w`` and ``b`` (``[n]``), standard normal from seed 0; ``mean`` and ``rstd``
    from ATen's forward. Only the kernels whose limits take rows of ``n`` are candidates.
    """
    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    b = torch.randn(n, dtype=dtype, device=device)
    liger, quack = (None if isinstance(found.get(k), Exception) else found.get(k) for k in ("liger", "quack"))
    with disabled():
        _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [n], w, b, EPS)
    aten_bwd = torch.ops.aten.native_layer_norm_backward.default
    helion_ok = helion_impl.available()[0]

    fwd: dict[str, Callable[[], Any]] = {}
    if n <= triton_impl.LIMITS.max_n_fwd:
        fwd["triton"] = lambda: triton_impl.native_layer_norm(x, [n], w, b, EPS)[0]
    if helion_ok and n <= helion_impl.LIMITS.max_n_fwd:
        fwd["helion"] = lambda: helion_impl.native_layer_norm(x, [n], w, b, EPS)[0]
    fwd["routed"] = lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS)
    if liger is not None:
        fwd["liger"] = lambda: liger.apply(x, w, b, EPS)
    if quack is not None:
        fwd["quack"], quack_bwd = quack_layer_norm(quack, x, w, b, dy)

    bwd: dict[str, Callable[[], Any]] = {}
    if n <= triton_impl.LIMITS.max_n_bwd:
        bwd["triton"] = lambda: triton_impl.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, _MASK)[0]
    if helion_ok and n <= helion_impl.LIMITS.max_n_bwd:
        bwd["helion"] = lambda: helion_impl.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, _MASK)[0]
    if cutedsl_impl.usable(x, n, mean, rstd, w):
        bwd["cutedsl"] = lambda: cutedsl_impl.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, _MASK)[0]
    bwd["routed"] = lambda: aten_bwd(dy, x, [n], mean, rstd, w, b, _MASK)[0]
    if liger is not None:
        bwd["liger"] = autograd_bwd(lambda t, w_, b_: liger.apply(t, w_, b_, EPS), (x, w, b), dy)
    if quack is not None:
        bwd["quack"] = quack_bwd
    return {"fwd": Case(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS), fwd),
            "bwd": Case(lambda: aten_bwd(dy, x, [n], mean, rstd, w, b, _MASK)[0], bwd)}


def tune_candidates(direction: str, dtype: torch.dtype, m: int, n: int, device: torch.device):
    """``(aten, {dsl: (launch(config), [configs])})`` for one ``--tune`` job: every Triton, Helion and CuTeDSL
    config of the kernels that take rows of ``n``; ``launch`` returns ``y`` (forward) or ``dx`` (backward).

    On ROCm the Triton backward's split configs are left out: they spin on volatile loads, measured on
    NVIDIA only.
    """
    from . import triton_kernel  # imports Triton: only when tuning

    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    b = torch.randn(n, dtype=dtype, device=device)
    out = empty((m, n), dtype, device)
    helion_ok = helion_impl.available()[0]
    cands: dict[str, tuple] = {}
    sdt = reference.stat_dtype(x, w, b)
    mean, rstd = empty(m, sdt, device), empty(m, sdt, device)
    with disabled():
        _, am, ar = torch.ops.aten.native_layer_norm.default(x, [n], w, b, EPS)
    if direction == "fwd":
        aten = lambda: torch.ops.aten.native_layer_norm.default(x, [n], w, b, EPS)[0]  # noqa: E731
        if n <= triton_impl.LIMITS.max_n_fwd:
            cands["triton"] = (lambda c: (triton_impl.launch_fwd(x, w, b, out, mean, rstd, EPS, c), out)[1],
                               triton_kernel.candidate_configs(n, "fwd"))
        if helion_ok and n <= helion_impl.LIMITS.max_n_fwd:
            from . import helion_kernel  # imports Helion

            cands["helion"] = (lambda c: (helion_impl.launch_fwd(x, w, b, out, mean, rstd, EPS, c), out)[1],
                               helion_kernel.candidate_configs(n, "fwd"))
        return aten, cands
    aten = lambda: torch.ops.aten.native_layer_norm_backward.default(dy, x, [n], am, ar, w, b, _MASK)[0]  # noqa: E731
    if n <= triton_impl.LIMITS.max_n_bwd:
        configs = triton_kernel.candidate_configs(n, "bwd")
        if torch.version.hip is not None:
            configs = [c for c in configs if "split" not in c]
        cands["triton"] = (lambda c: (triton_impl.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, _MASK, c, True),
                                      out)[1], configs)
    if helion_ok and n <= helion_impl.LIMITS.max_n_bwd:
        from . import helion_kernel  # imports Helion

        cands["helion"] = (lambda c: (helion_impl.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, c), out)[1],
                           helion_kernel.candidate_configs(n, "bwd"))
    if cutedsl_impl.usable(x, n, am, ar, w):
        cands["cutedsl"] = (lambda c: (cutedsl_impl.launch_bwd(dy, x, w, am.view(-1), ar.view(-1), out, _MASK, c,
                                                               True), out)[1],
                            cutedsl_configs.candidate_configs(n, x.element_size()))
    return aten, cands
