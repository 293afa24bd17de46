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
from accel.kernels._launch import lazy_module, sm_count
from accel.kernels._tuning import dtype_name

from . import BWD_OP, cutedsl_configs
from ._backward import Partials, launcher, make_backward
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "config_reason", "usable", "native_layer_norm_backward", "register", "launch_bwd", "plan_bwd"]

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


class _Plan:
    """One backward launch with all but its tensors fixed (once per argument signature: the registry's plan,
    :mod:`accel.kernels._plans`): ``plan(dy, x, w, mean, rstd, dx) -> (dw, db)``.

    A call is one partials buffer (:class:`._backward.Partials`), the kernel (its TVM-FFI call where
    available, :class:`accel.kernels._cutedsl.Kernel`) and one launch summing and casting the CTAs' dw/db
    partials into two fresh tensors.
    """

    __slots__ = ("m", "n", "want_dx", "partials", "threads", "kernel", "index", "x_dtype", "w_dtype")

    def __init__(self, x: torch.Tensor, w: torch.Tensor | None, want: Sequence[bool], cfg: Mapping[str, Any],
                 has_b: bool, cast: torch.dtype | None = None) -> None:
        self.m, self.n = x.shape
        self.want_dx = bool(want[0])
        groups = max(1, min(self.m, sm_count(x.device) * int(cfg["ctas_per_sm"])))
        self.partials = Partials(bool(want[1]) and w is not None, bool(want[2]) and has_b, groups, self.n, cast,
                                 x.device)
        self.threads, self.kernel, self.index = int(cfg["threads"]), None, x.get_device()
        self.x_dtype, self.w_dtype = dtype_name(x.dtype), dtype_name(w.dtype) if w is not None else None

    def __call__(self, dy, x, w, mean, rstd, dx):
        p = self.partials
        if self.m == 0:  # no rows: no launch
            return p.zeros(x.device)
        kernel = self.kernel
        if kernel is None:
            with _launch.device_guard(x.device):  # compiles for the current device on a cache miss
                kernel = self.kernel = _k().build(self.x_dtype, self.w_dtype, self.n, self.threads,
                                                  (self.want_dx and dx is not None, p.want_dw, p.want_db),
                                                  arch(x.device))
        buf = p.alloc(x.device)
        dw, db = p.addresses(buf, mean.data_ptr())
        _cutedsl.launch(kernel, self.index, dy.data_ptr(), x.data_ptr(), (w if w is not None else x).data_ptr(),
                        mean.data_ptr(), rstd.data_ptr(), (dx if dx is not None else x).data_ptr(), dw, db,
                        self.m, p.groups)
        return p.finish(buf)


def plan_bwd(x: torch.Tensor, w: torch.Tensor | None, want: Sequence[bool], cfg: Mapping[str, Any], has_b: bool,
             cast: torch.dtype | None) -> _Plan:
    """The backward's launch for rows like ``x`` (``[M, N]``) fixed once: call it with
    ``(dy, x, w, mean, rstd, dx)``; it returns ``(dw, db)`` as ``[N]`` in ``cast`` (fp32 when ``None``)."""
    return _Plan(x, w, want, cfg, has_b, cast)


#: One call of the backward (configs ``{"threads", "ctas_per_sm"}``): :func:`._backward.launcher`.
launch_bwd = launcher(plan_bwd)
native_layer_norm_backward = make_backward("CuTeDSL", _config, plan_bwd)


def register(backends: Sequence[str] = ("cuda",), *, suffix: str = "") -> list[str]:
    """Register the backward as an accel override for ``backends`` (name ``layer_norm_bwd.cutedsl``).

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    from accel.kernels import register as register_op

    _, bwd = make_conds(DSL, backends, LIMITS, extra=config_reason)
    return [register_op(BWD_OP, impl=native_layer_norm_backward, cond=bwd, backends=backends, dsl=DSL,
                        name=f"layer_norm_bwd.{DSL}{suffix}")]
