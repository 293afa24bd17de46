"""LayerNorm backward through the CuTeDSL kernel of :mod:`.cutedsl_kernel` (``aten::native_layer_norm_backward``).

Only the backward: the Triton forward already runs at 90-97 % of the copy ceiling on the H200. Importing
this module imports no CuTeDSL; the kernel is imported and compiled (about a second, once per process per
dtype, row length, config and wanted outputs) at the first launch. Routing: only where the tuning table
names this DSL (a table miss never routes to CuTeDSL: :data:`accel.kernels.tuning.table.MIN_NUMEL`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accel.kernels.dsl import cutedsl_utils
from accel.kernels.ops.conds import Limits, arch, tuned_config
from accel.kernels.dsl.cutedsl_utils import available
from accel.kernels.dsl.launch import device_guard, lazy_module, sm_count
from accel.kernels.tuning.table import dtype_name

from . import FAMILY, cutedsl_configs
from ._backward import Partials, launcher, make_backward
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "config_reason", "usable", "native_layer_norm_backward", "register", "launch_bwd", "plan_bwd"]

DSL = "cutedsl"
#: Rows up to 8192 elements (CTAs of 256 threads, 32 values each: :func:`.cutedsl_configs.fits`), below
#: 2**31 elements in all (32-bit row offsets); the forward is never this DSL's.
LIMITS = Limits(max_n_fwd=0, max_n_bwd=8192, max_numel=cutedsl_utils.MAX_NUMEL)

_k = lazy_module(__package__ + ".cutedsl_kernel")


def _config(x: torch.Tensor, m: int, n: int) -> Mapping[str, Any] | None:
    """The tuning table's config for these rows when it fits them (:func:`accel.kernels.dsl.cutedsl_utils.tuned`), else
    the default for rows of ``n``, else ``None``."""
    size = x.element_size()
    default = cutedsl_configs.default_config(n, size)
    return cutedsl_utils.tuned(tuned_config("layer_norm_bwd", DSL, x, m, n, default), ("threads", "ctas_per_sm"),
                          lambda threads, ctas_per_sm: cutedsl_configs.fits(n, size, threads) and ctas_per_sm >= 1,
                          default)


def config_reason(x: torch.Tensor, n: int, mean: torch.Tensor, rstd: torch.Tensor,
                  weight: torch.Tensor | None = None) -> str | None:
    """``None`` when the kernel takes rows of ``n`` of ``x``; else why not: the arch (SM 9.0+), fp32
    statistics, 16-byte aligned ``x`` and ``weight`` (both loaded in 16-byte vectors), a config (tuned
    or default) covering rows of ``n``."""
    why = cutedsl_utils.arch_reason(x.device)
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
    :mod:`accel.kernels.core.plans`): ``plan(dy, x, w, mean, rstd, dx) -> (dw, db)``.

    A call is one partials buffer (:class:`._backward.Partials`), the kernel (its TVM-FFI call where
    available, :class:`accel.kernels.dsl.cutedsl_utils.Kernel`) and one launch summing and casting the CTAs' dw/db
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
            with device_guard(x.device):  # compiles for the current device on a cache miss
                kernel = self.kernel = _k().build(self.x_dtype, self.w_dtype, self.n, self.threads,
                                                  (self.want_dx and dx is not None, p.want_dw, p.want_db),
                                                  arch(x.device))
        buf = p.alloc(x.device)
        dw, db = p.addresses(buf, mean.data_ptr())
        cutedsl_utils.launch(kernel, self.index, dy.data_ptr(), x.data_ptr(), (w if w is not None else x).data_ptr(),
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


def conds(backends: Sequence[str]) -> tuple:
    """``(None, backward cond)`` for ``backends``: this DSL has no forward kernel."""
    return None, make_conds(DSL, backends, LIMITS, extra=config_reason)[1]


def covers(table_op: str, n: int, dtype: str) -> bool:
    """Whether a config of the backward takes rows of ``n`` elements of ``dtype`` (a dtype name): the tuning
    table's partial-DSL check (``False`` for the forward, which this DSL has no kernel of)."""
    itemsize = cutedsl_utils.ITEMSIZE.get(dtype)
    return table_op == "layer_norm_bwd" and itemsize is not None and \
        bool(cutedsl_configs.candidate_configs(n, itemsize))


def availability_note() -> str:
    """Said beside this kernel's availability (``accel kernels``)."""
    return cutedsl_utils.availability_note("; the backward only")


forward, backward = None, native_layer_norm_backward
#: ``register(backends=("cuda",), *, suffix="")``: the backward as an accel override (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
