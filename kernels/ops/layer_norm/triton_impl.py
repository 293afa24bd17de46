"""LayerNorm forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton. Launch configs: the tuning table's
(:mod:`accel.kernels.tuning.table`), else the kernel module's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.errors import UnsupportedOperationError
from accel.kernels.ops.conds import Limits, tuned_config
from accel.kernels.dsl.triton_configs import next_power_of_2
from accel.kernels.dsl.launch import empty, empty_like, lazy_module, row_count, row_programs, sm_count
from accel.kernels.dsl.triton_utils import LaunchPlan, SplitLaunch, row_launch
from accel.kernels.dsl.triton_utils import available

from . import FAMILY, reference
from ._backward import Partials, launcher, make_backward
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "native_layer_norm", "native_layer_norm_backward", "register",
           "launch_fwd", "launch_bwd", "plan_bwd"]

DSL = "triton"
#: Rows up to 16384 elements, whole in registers (triton_kernel.MAX_BLOCK_N); longer rows stay with ATen.
LIMITS = Limits(max_n_fwd=16384, max_n_bwd=16384)


_k = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


def fwd_launch(cfg: Mapping[str, Any], m: int, n: int, eps: float, has_w: bool, has_b: bool) -> LaunchPlan:
    """The forward's launch for ``m`` rows of ``n <= LIMITS.max_n_fwd`` (the cond checks it) with config ``cfg``
    (``hints``: L2 eviction hints, default off: :mod:`accel.kernels.dsl.triton_lang`); call it with
    ``(x, w, b, y, mean, rstd)`` (``x`` in place of a missing ``w`` or ``b``).

    Raises:
        UnsupportedOperationError: ``n`` above ``LIMITS.max_n_fwd`` (no Triton kernel for such rows: ATen's).
    """
    if n > LIMITS.max_n_fwd:
        raise UnsupportedOperationError(
            f"Triton LayerNorm forward: rows of {n} elements > LIMITS.max_n_fwd={LIMITS.max_n_fwd}. Only rows held "
            f"whole in registers have a Triton kernel; call torch.nn.functional.layer_norm (ATen) for longer rows.")
    return row_launch(None, _k().layer_norm_fwd_rows, cfg, m, n, (eps,), HAS_W=has_w, HAS_B=has_b)


def launch_fwd(x, w, b, y, mean, rstd, eps: float, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the forward on ``x`` (``[M, N]``, or contiguous with ``m``, ``n`` given) with launch config ``cfg``
    (``w``/``b`` may be ``None``; the tuner's entry point)."""
    if m is None:
        m, n = x.shape
    fwd_launch(cfg, m, n, eps, w is not None, b is not None)(x, w if w is not None else x, b if b is not None else x,
                                                          y, mean, rstd)


class _BwdPlan:
    """One backward launch with all but its tensors fixed (once per argument signature: the registry's plan,
    :mod:`accel.kernels.core.plans`): ``plan(dy, x, w, mean, rstd, dx) -> (dw, db)`` in ``cast`` (fp32 when
    ``None``). A call is one partials buffer (:class:`._backward.Partials`), the kernel (its compiled
    launcher from the third call, :class:`accel.kernels.dsl.triton_utils.LaunchPlan`) and one launch summing and casting
    the programs' dw/db partials into two fresh tensors.

    ``cfg``: ``{"block_n", "num_warps", "programs_per_sm"}``: the rows kernel, or with ``"split"`` the split
    kernel (:class:`accel.kernels.dsl.launch.SplitLaunch`; ``block_n`` is the part).
    """

    __slots__ = ("m", "want_dx", "partials", "launch")

    def __init__(self, x: torch.Tensor, w: torch.Tensor | None, want: Sequence[bool], cfg: Mapping[str, Any],
                 has_b: bool, cast: torch.dtype | None = None) -> None:
        k = _k()
        m, n = x.shape
        self.m, self.want_dx = m, bool(want[0])
        want_dw, want_db = bool(want[1]) and w is not None, bool(want[2]) and has_b
        flags = dict(HAS_W=w is not None, WANT_DX=self.want_dx, WANT_DW=want_dw, WANT_DB=want_db)
        self.launch: Any = None
        if cfg.get("split"):
            groups, rows = k.split_groups(max(m, 1), cfg["split"], sm_count(x.device) * cfg["programs_per_sm"])
            if m:
                self.launch = SplitLaunch(k.layer_norm_bwd_split, cfg, m, n, (m, n, rows), groups, **flags)
        else:
            groups, per_program = row_programs(m, x.device, cfg["programs_per_sm"])
            if m:
                self.launch = LaunchPlan(k.layer_norm_bwd_rows, (groups,), (m, n, per_program),
                                         num_warps=cfg["num_warps"], BLOCK_N=max(cfg["block_n"], next_power_of_2(n)),
                                         **flags)
        self.partials = Partials(want_dw, want_db, groups, n, cast, x.device)

    def __call__(self, dy, x, w, mean, rstd, dx):
        p = self.partials
        if self.m == 0:  # no rows: no launch (an empty grid); dw and db are sums over nothing
            return p.zeros(x.device)
        buf = p.alloc(x.device)
        dw, db = p.views(buf)
        self.launch(dy, x, w if w is not None else x, mean, rstd, dx if dx is not None else x,
                    dw if dw is not None else x, db if db is not None else x)
        return p.finish(buf)


def plan_bwd(x: torch.Tensor, w: torch.Tensor | None, want: Sequence[bool], cfg: Mapping[str, Any], has_b: bool,
             cast: torch.dtype | None) -> _BwdPlan:
    """The backward's launch for rows like ``x`` (``[M, N]``) fixed once: call it with
    ``(dy, x, w, mean, rstd, dx)``; it returns ``(dw, db)`` as ``[N]`` in ``cast`` (fp32 when ``None``)."""
    return _BwdPlan(x, w, want, cfg, has_b, cast)


def native_layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float):
    """``aten::native_layer_norm`` in Triton; same results as :func:`.reference.native_layer_norm`.

    Contiguous input (the cond checks it), read as ``[M, N]`` rows without a view; the
    outputs are allocated in their final shapes. The registry calls :func:`plan_fwd`'s result
    instead, once per argument signature (``native_layer_norm.plan``).
    """
    return plan_fwd(input, normalized_shape, weight, bias, eps)(input, normalized_shape, weight, bias, eps)


def plan_fwd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
             bias: torch.Tensor | None, eps: float) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """:func:`native_layer_norm` for every call with these arguments' signature (rows, statistics dtype
    and shape, tuning-table config and launch fixed here: a call is three allocations and a launch)."""
    n = row_count(normalized_shape)
    m = input.numel() // n
    has_w, has_b = weight is not None, bias is not None
    launch = fwd_launch(tuned_config("layer_norm_fwd", DSL, input, m, n, _k().default_config), m, n, float(eps),
                        has_w, has_b)
    sdt = reference.stat_dtype(input, weight, bias)
    shape, device = reference.stat_shape(input, normalized_shape), input.device

    def run(input, normalized_shape, weight, bias, eps):
        y = empty_like(input)
        mean, rstd = empty(shape, sdt, device), empty(shape, sdt, device)
        launch(input, weight if has_w else input, bias if has_b else input, y, mean, rstd)
        return y, mean, rstd

    run.launch = launch  # type: ignore[attr-defined]  # (tests look at its capture)
    return run


native_layer_norm.plan = plan_fwd  # type: ignore[attr-defined]


#: One call of the backward (configs: :class:`_BwdPlan`): :func:`._backward.launcher`.
launch_bwd = launcher(plan_bwd)
native_layer_norm_backward = make_backward(
    "Triton", lambda x, m, n: tuned_config("layer_norm_bwd", DSL, x, m, n, _k().bwd_config), plan_bwd)


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds` with :data:`LIMITS`)."""
    return make_conds(DSL, backends, LIMITS)


forward, backward = native_layer_norm, native_layer_norm_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
