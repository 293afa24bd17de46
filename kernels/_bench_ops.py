"""Softmax and LayerNorm rows of the kernel benchmark (:mod:`accel.kernels.bench`).

Per shape and direction: ATen eager, accel's Triton and Helion kernels (called
directly), the routed call (the ATen op through accel's overrides), Liger-Kernel
and quack where importable. Every candidate's result is compared with ATen's
before it is timed. Bytes: forward ``2*M*N*esize``, backward ``3*M*N*esize``
(softmax: read y, dy, write dx; LayerNorm: read x, dy, write dx).
quack's LayerNorm requires an fp32 weight: it gets one (the others get the
input dtype, as ``nn.LayerNorm`` in bf16 has).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from accel.kernels.dsl.launch import sm_count

__all__ = ["SHAPES", "run_family"]

#: [M, N] per family (the issue's targets).
SHAPES = {
    "softmax": ((4096, 4096), (32768, 4096), (8192, 32768), (65536, 1024)),
    "layer_norm": ((4096, 4096), (32768, 4096), (16384, 8192), (8192, 16384), (65536, 1024)),
}
EPS = 1e-5
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _try_import(path: str, attr: str) -> Any:
    import importlib

    try:
        return getattr(importlib.import_module(path), attr)
    except Exception as exc:  # noqa: BLE001 - optional peer: any failure drops it, reported
        return exc


def peers(family: str) -> dict[str, Any]:
    """name -> callable or the exception that kept it out."""
    if family == "softmax":
        return {"liger": _try_import("liger_kernel.ops.softmax", "LigerSoftmaxFunction"),
                "quack": _try_import("quack.softmax", "softmax")}
    # quack 0.6.5 has no quack.layernorm: its LayerNorm is the RMSNorm kernels with is_layernorm=True
    q_fwd, q_bwd = _try_import("quack.rmsnorm", "_rmsnorm_fwd"), _try_import("quack.rmsnorm", "_rmsnorm_bwd")
    return {"liger": _try_import("liger_kernel.ops.layer_norm", "LigerLayerNormFunction"),
            "quack": next((e for e in (q_fwd, q_bwd) if isinstance(e, Exception)), (q_fwd, q_bwd))}


def _quack_layer_norm(ops: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor):
    """quack's LayerNorm forward and backward (``ops`` = ``quack.rmsnorm``'s ``_rmsnorm_fwd``, ``_rmsnorm_bwd``,
    run with ``is_layernorm=True``), given an fp32 weight and bias as quack requires; the backward sums its
    per-SM dw/db partials, as accel's does. Returns ``(fwd, bwd)`` callables; ``bwd`` runs ``fwd`` once first
    (quack's own mean and rstd, which it reads). A failure surfaces when a callable runs (the benchmark
    reports it per candidate)."""
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


def _autograd_bwd(fwd: Callable[..., torch.Tensor], inputs: tuple, dy: torch.Tensor) -> Callable[[], Any]:
    """Backward of a peer's autograd function alone: forward once, then ``autograd.grad`` each call."""
    leaves = tuple(t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                   for t in inputs)
    graph: list = []

    def call():
        if not graph:
            graph.append(fwd(*leaves))
        return torch.autograd.grad(graph[0], [t for t in leaves if isinstance(t, torch.Tensor)][:1], dy,
                                   retain_graph=True)

    return call


def _cases(family: str, m: int, n: int, dtype: torch.dtype, device: torch.device, found: dict[str, Any]):
    """``{direction: (aten, {name: candidate}, compare_first_only)}``."""
    from accel.kernels.ops.layer_norm import helion_impl as lh, triton_impl as lt
    from accel.kernels.ops.softmax import cutedsl_impl as sc, helion_impl as sh, triton_impl as st

    torch.manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, device=device)
    dy = torch.randn(m, n, dtype=dtype, device=device)
    ok = lambda p: not isinstance(found.get(p), Exception)  # noqa: E731
    out: dict[str, tuple] = {}
    if family == "softmax":
        import accel.kernels as ak

        with ak.disabled():
            y = torch.ops.aten._softmax.default(x, -1, False)
        fwd = {"triton": lambda: st.softmax(x, -1, False)}
        if sh.available()[0] and n <= sh.LIMITS.max_n_fwd:
            fwd["helion"] = lambda: sh.softmax(x, -1, False)
        if sc.usable("softmax_fwd", x, n):
            fwd["cutedsl"] = lambda: sc.softmax(x, -1, False)
        fwd["routed"] = lambda: torch.softmax(x, -1)
        if ok("liger"):
            fwd["liger"] = lambda: found["liger"].apply(x)
        if ok("quack"):
            fwd["quack"] = lambda: found["quack"](x)
        bwd = {"triton": lambda: st.softmax_backward_data(dy, y, -1, dtype)}
        if sh.available()[0] and n <= sh.LIMITS.max_n_bwd:
            bwd["helion"] = lambda: sh.softmax_backward_data(dy, y, -1, dtype)
        if sc.usable("softmax_bwd", y, n, dy):
            bwd["cutedsl"] = lambda: sc.softmax_backward_data(dy, y, -1, dtype)
        bwd["routed"] = lambda: torch.ops.aten._softmax_backward_data.default(dy, y, -1, dtype)
        if ok("liger"):
            bwd["liger"] = _autograd_bwd(lambda t: found["liger"].apply(t), (x,), dy)
        out["fwd"] = (lambda: torch.softmax(x, -1), fwd)
        out["bwd"] = (lambda: torch.ops.aten._softmax_backward_data.default(dy, y, -1, dtype), bwd)
        return out
    w = torch.randn(n, dtype=dtype, device=device)
    b = torch.randn(n, dtype=dtype, device=device)
    import accel.kernels as ak

    with ak.disabled():
        _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [n], w, b, EPS)
    mask = [True, True, True]
    fwd = {"triton": lambda: lt.native_layer_norm(x, [n], w, b, EPS)[0]} if n <= lt.LIMITS.max_n_fwd else {}
    if lh.available()[0] and n <= lh.LIMITS.max_n_fwd:
        fwd["helion"] = lambda: lh.native_layer_norm(x, [n], w, b, EPS)[0]
    fwd["routed"] = lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS)
    if ok("liger"):
        fwd["liger"] = lambda: found["liger"].apply(x, w, b, EPS)
    if ok("quack"):
        fwd["quack"], quack_bwd = _quack_layer_norm(found["quack"], x, w, b, dy)
    bwd = {"triton": lambda: lt.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)[0]} \
        if n <= lt.LIMITS.max_n_bwd else {}
    if lh.available()[0] and n <= lh.LIMITS.max_n_bwd:
        bwd["helion"] = lambda: lh.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)[0]
    from accel.kernels.ops.layer_norm import cutedsl_impl as lc

    if lc.usable(x, n, mean, rstd, w):
        bwd["cutedsl"] = lambda: lc.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)[0]
    bwd["routed"] = lambda: torch.ops.aten.native_layer_norm_backward.default(dy, x, [n], mean, rstd, w, b, mask)[0]
    if ok("liger"):
        bwd["liger"] = _autograd_bwd(lambda t, w_, b_: found["liger"].apply(t, w_, b_, EPS), (x, w, b), dy)
    if ok("quack"):
        bwd["quack"] = quack_bwd
    out["fwd"] = (lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS), fwd)
    out["bwd"] = (lambda: torch.ops.aten.native_layer_norm_backward.default(dy, x, [n], mean, rstd, w, b, mask)[0],
                  bwd)
    return out


def _first(out: Any) -> Any:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def checked(aten: Callable[[], Any], cands: dict[str, Callable[[], Any]], ref: Any, view: Callable[[Any], Any],
            errors: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """The functions to time for one row: ``{"aten": aten}`` and each candidate whose result, through ``view``,
    matches ``ref`` (:func:`accel.kernels.tuning.tolerance.compare`). A wrong or raising candidate goes to ``errors``
    instead (one failing candidate must not end the run); the peers (Liger, quack) are timed even when they
    round differently (Liger's "llama" casting)."""
    from accel.kernels import _tolerance

    timed = {"aten": aten}
    for name, fn in cands.items():
        try:
            problem = _tolerance.compare(view(fn()), ref)[1]
        except Exception as exc:  # noqa: BLE001
            errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if problem is not None and name not in ("liger", "quack"):
            errors[name] = f"wrong result: {problem}"
            continue
        timed[name] = fn
    return timed


def run_family(family: str, report: dict, timer: Any, device: torch.device, dtypes, started: float,
               budget_s: float, ceiling: float, shapes=None, rounds: int = 1) -> None:
    """Append ``family``'s rows (forward and backward, each of ``shapes``, default :data:`SHAPES`) to ``report``
    (``timer``: :class:`accel.kernels.bench._Timer`; ``rounds``: its :meth:`~accel.kernels.bench._Timer.interleaved`)."""
    import accel.kernels as ak

    found = peers(family)
    report["peers"].update({f"{family}.{k}": (None if not isinstance(v, Exception) else f"{type(v).__name__}: {v}")
                            for k, v in found.items()})
    for dname in dtypes:
        dtype = _DTYPES[dname]
        for m, n in shapes or SHAPES[family]:
            if time.perf_counter() - started > budget_s:
                report["skipped"].append(f"{family} {dname} {m}x{n}: time budget {budget_s} s spent")
                continue
            for direction, (aten, cands) in _cases(family, m, n, dtype, device, found).items():
                moved = (2 if direction == "fwd" else 3) * m * n * torch.empty((), dtype=dtype).element_size()
                with ak.disabled():
                    ref = _first(aten())
                errors: dict[str, str] = {}
                before = {o.name: o.routed for o in ak.overrides()}
                timed = checked(aten, cands, ref, _first, errors)
                results = timer.interleaved(timed, rounds, errors)
                # what the routed candidate ran: the override whose routed count grew (ATen if none)
                grew = [o.name for o in ak.overrides() if o.routed > before.get(o.name, 0)]
                routed_to = grew[0] if len(grew) == 1 else "aten" if not grew else "+".join(grew)
                peer_times = [results[p] for p in ("liger", "quack") if p in results]
                best_peer = min(peer_times) if peer_times else None
                row = {"op": family, "dtype": dname, "shape": [m, n], "direction": direction, "bytes": moved,
                       "routed_to": routed_to, "errors": errors, "impls": {}}
                for name, us in results.items():
                    gbs = moved / us / 1e3
                    row["impls"][name] = {"us": us, "gbs": gbs, "pct_ceiling": 100 * gbs / ceiling,
                                          "vs_aten": results["aten"] / us,
                                          "vs_best_peer": (best_peer / us) if best_peer else None}
                report["rows"].append(row)
