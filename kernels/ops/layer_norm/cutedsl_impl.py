"""LayerNorm backward through the CuTeDSL kernel of :mod:`.cutedsl_kernel` (``aten::native_layer_norm_backward``).

Only the backward: the Triton forward already runs at 90-97 % of the copy ceiling on the H200. Importing
this module imports no CuTeDSL; the kernel is imported and compiled (about a second, once per process per
dtype, row length, config and wanted outputs) at the first launch. Routing: only where the tuning table
names this DSL (a table miss never routes to CuTeDSL: :data:`accel.kernels._tuning.MIN_NUMEL`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accel.kernels import _cutedsl
from accel.kernels import _launch
from accel.kernels._conds import Limits, arch, tuned_config
from accel.kernels._cutedsl import available
from accel.kernels._launch import empty, lazy_module, sm_count
from accel.kernels._tuning import dtype_name

from . import BWD_OP, cutedsl_configs
from ._backward import make_backward
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "config_reason", "usable", "native_layer_norm_backward", "register", "launch_bwd"]

DSL = "cutedsl"
#: Rows up to 8192 elements (CTAs of 256 threads, 32 values each: :func:`.cutedsl_configs.fits`), below
#: 2**31 elements in all (32-bit row offsets); the forward is never this DSL's.
LIMITS = Limits(max_n_fwd=0, max_n_bwd=8192, max_numel=_cutedsl.MAX_NUMEL)

_k = lazy_module(__package__ + ".cutedsl_kernel")


def _config(x: torch.Tensor, m: int, n: int) -> Mapping[str, Any] | None:
    """The tuning table's config for these rows when it fits them (:func:`accel.kernels._cutedsl.tuned`), else
    the default for rows of ``n``, else ``None``."""
    size = x.element_size()
    default = cutedsl_configs.default_config(n, size)
    return _cutedsl.tuned(tuned_config("layer_norm_bwd", DSL, x, m, n, default), ("threads", "ctas_per_sm"),
                          lambda threads, ctas_per_sm: cutedsl_configs.fits(n, size, threads) and ctas_per_sm >= 1,
                          default)


def config_reason(x: torch.Tensor, n: int, mean: torch.Tensor, rstd: torch.Tensor,
                  weight: torch.Tensor | None = None) -> str | None:
    """``None`` when the kernel takes rows of ``n`` of ``x``; else why not: the arch (SM 9.0+), fp32
    statistics, 16-byte aligned ``x`` and ``weight`` (both loaded in 16-byte vectors), a config (tuned
    or default) covering rows of ``n``."""
    why = _cutedsl.arch_reason(x.device)
    if why is not None:
        return why
    if mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        return "the CuTeDSL LayerNorm backward reads fp32 mean/rstd"
    if x.data_ptr() % 16 or (weight is not None and weight.data_ptr() % 16):
        return "the input or the weight is not 16-byte aligned (the kernel loads 16-byte vectors)"
    if _config(x, x.numel() // n if n else 0, n) is None:
        return (f"no CuTeDSL config covers rows of {n} {dtype_name(x.dtype)} elements (N must be a multiple of "
                f"threads * {cutedsl_configs.vector_elements(x.element_size())}, at most "
                f"{cutedsl_configs.MAX_VALUES_PER_THREAD} values per thread)")
    return None


def usable(x: torch.Tensor, n: int, mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None = None
           ) -> bool:
    """Whether CuTeDSL is installed and the kernel takes these rows (within :data:`LIMITS`, and
    :func:`config_reason` is ``None``): the benchmark's and the tuner's test before they time it."""
    return available()[0] and n <= LIMITS.max_n_bwd and config_reason(x, n, mean, rstd, weight) is None


def launch_bwd(dy, x, w, mean, rstd, dx, want: Sequence[bool], cfg: Mapping[str, Any], has_b: bool):
    """Run the backward on ``[M, N]`` rows; returns ``(dw fp32 [N] or None, db fp32 [N] or None)``.

    ``cfg``: ``{"threads", "ctas_per_sm"}``; ``w``: the weight or None; ``dx``: the output or None when not wanted.
    """
    m, n = x.shape
    want_dx, want_dw, want_db = bool(want[0]) and dx is not None, bool(want[1]) and w is not None, \
        bool(want[2]) and has_b
    if m == 0:  # no rows: no launch; dw and db are sums over nothing
        zeros = torch.zeros(n, dtype=torch.float32, device=x.device)
        return (zeros if want_dw else None), (zeros.clone() if want_db else None)
    k = _k()
    groups = max(1, min(m, sm_count(x.device) * int(cfg["ctas_per_sm"])))
    dw = empty((groups, n), torch.float32, x.device) if want_dw else None
    db = empty((groups, n), torch.float32, x.device) if want_db else None
    name = dtype_name(x.dtype)
    w_name = dtype_name(w.dtype) if w is not None else None
    with _launch.device_guard(x.device):  # compiles for the current device on a cache miss
        fn = k.build(name, w_name, n, int(cfg["threads"]), (want_dx, want_dw, want_db), arch(x.device))
    ptr = k.pointer
    _cutedsl.launch(fn, x.device, ptr(name, dy.data_ptr()), ptr(name, x.data_ptr()),
                    ptr(w_name or name, (w if w is not None else x).data_ptr()), ptr("float32", mean.data_ptr()),
                    ptr("float32", rstd.data_ptr()), ptr(name, (dx if want_dx else x).data_ptr()),
                    ptr("float32", (dw if dw is not None else mean).data_ptr()),
                    ptr("float32", (db if db is not None else mean).data_ptr()), m, groups)
    return (dw.sum(0) if want_dw else None), (db.sum(0) if want_db else None)


native_layer_norm_backward = make_backward("CuTeDSL", launch_bwd, _config)


def register(backends: Sequence[str] = ("cuda",), *, suffix: str = "") -> list[str]:
    """Register the backward as an accel override for ``backends`` (name ``layer_norm_bwd.cutedsl``).

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    from accel.kernels import register as register_op

    _, bwd = make_conds(DSL, backends, LIMITS, extra=config_reason)
    return [register_op(BWD_OP, impl=native_layer_norm_backward, cond=bwd, backends=backends, dsl=DSL,
                        name=f"layer_norm_bwd.{DSL}{suffix}")]
