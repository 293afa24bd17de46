"""RMSNorm forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton: the kernel module is imported at the
first call. :func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.kernels.dsl.launch import empty, empty_like, lazy_module, row_count, row_programs
from accel.kernels.dsl.triton_utils import LaunchPlan, available, row_launch
from accel.kernels.ops.conds import tuned_config

from . import FAMILY, reference
from .conditions import Limits, make_conds

__all__ = ["DSL", "LIMITS", "available", "backward", "conds", "forward", "fused_rms_norm", "fused_rms_norm_backward",
           "launch_fwd", "register"]

DSL = "triton"
#: Row bounds: forward any N up to 65536 (looped above triton_kernel.MAX_BLOCK_N);
#: backward keeps the row in registers (N <= triton_kernel.MAX_BLOCK_N = 16384).
LIMITS = Limits(max_n_fwd=65536, max_n_bwd=16384)


_kernels = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


_FP32_EPS = torch.finfo(torch.float32).eps


def fused_rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                   eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten::_fused_rms_norm`` in Triton; same arguments and results as :func:`.reference.fused_rms_norm`.

    Input must be contiguous (the cond checks it): the kernel reads it as ``[M, N]`` rows
    without a view, and the outputs are allocated in their final shapes. The registry calls
    :func:`plan_fwd`'s result instead, once per argument signature (``fused_rms_norm.plan``).
    """
    return plan_fwd(input, normalized_shape, weight, eps)(input, normalized_shape, weight, eps)


def plan_fwd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
             eps: float | None = None) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """:func:`fused_rms_norm` for every call with these arguments' signature (shapes, dtypes, device,
    alignment, ``eps``): rows, launch config (tuning table) and launch fixed here, so a call is two
    allocations and a :class:`~accel.kernels.dsl.triton_utils.LaunchPlan` call."""
    n = row_count(normalized_shape)
    m = input.numel() // n
    has_w = weight is not None
    launch = fwd_launch(tuned_config("rms_norm_fwd", DSL, input, m, n, _kernels().default_config), m, n,
                        _FP32_EPS if eps is None else float(eps), has_w)
    stat, device, f32 = reference.stat_shape(input, normalized_shape), input.device, torch.float32

    def run(input, normalized_shape, weight=None, eps=None):
        y = empty_like(input)
        rstd = empty(stat, f32, device)
        launch(input, weight if has_w else input, y, rstd)
        return y, rstd

    run.launch = launch  # type: ignore[attr-defined]  # (tests look at its capture)
    return run


fused_rms_norm.plan = plan_fwd  # type: ignore[attr-defined]


def fwd_launch(cfg: Mapping[str, Any], m: int, n: int, eps: float, has_w: bool) -> LaunchPlan:
    """The forward's launch for ``m`` rows of ``n`` with config ``cfg`` (``looped``, ``block_n``, ``rows``,
    ``num_warps``, optionally ``hints``: L2 eviction hints, default off); call it with ``(x, w, y, rstd)``
    (``w`` is ``x`` without a weight). int32 offsets where every program's (masked) offsets stay below ``2**31``."""
    k = _kernels()
    return row_launch(k.rms_norm_fwd_looped, k.rms_norm_fwd_rows, cfg, m, n, (eps,), HAS_W=has_w)


def launch_fwd(x: torch.Tensor, weight: torch.Tensor | None, y: torch.Tensor, rstd: torch.Tensor, eps: float,
               cfg: Mapping[str, Any], m: int, n: int) -> None:
    """Run the forward on contiguous ``x`` (``m`` rows of ``n``) into ``y`` and ``rstd`` (fp32, ``m`` values)
    with launch config ``cfg`` (the tuner's entry point)."""
    fwd_launch(cfg, m, n, eps, weight is not None)(x, weight if weight is not None else x, y, rstd)


def fused_rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                            rstd: torch.Tensor, weight: torch.Tensor | None,
                            output_mask: Sequence[bool]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``aten::_fused_rms_norm_backward`` in Triton; same as :func:`.reference.fused_rms_norm_backward`.

    Contiguous ``grad_out`` and ``input`` (the cond checks both). The registry calls :func:`plan_bwd`'s
    result instead, once per argument signature (``fused_rms_norm_backward.plan``)."""
    return plan_bwd(grad_out, input, normalized_shape, rstd, weight, output_mask)(
        grad_out, input, normalized_shape, rstd, weight, output_mask)


def plan_bwd(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int], rstd: torch.Tensor,
             weight: torch.Tensor | None, output_mask: Sequence[bool]) -> Callable[..., tuple]:
    """:func:`fused_rms_norm_backward` for every call with these arguments' signature: the program grid
    (a few programs per SM, each walking a range of rows and keeping its ``dw`` partial), outputs and
    launch fixed here; a call is the allocations, the launch and, for ``dw``, the sum of the partials."""
    want_dx = bool(output_mask[0])
    want_dw = bool(output_mask[1]) and weight is not None
    if not (want_dx or want_dw):
        return _no_grads
    k = _kernels()
    n = row_count(normalized_shape)
    m = input.numel() // n
    block_n, warps = k.bwd_config(n)
    programs, per_program = row_programs(m, input.device, 4 if block_n <= 4096 else 2)
    has_w, device, f32 = weight is not None, input.device, torch.float32
    launch = LaunchPlan(k.rms_norm_bwd_rows, (programs,), (m, n, per_program), BLOCK_N=block_n, HAS_W=has_w,
                        WANT_DX=want_dx, WANT_DW=want_dw, num_warps=warps)
    w_shape = tuple(weight.shape) if has_w else None
    reshape_dw = has_w and weight.dim() != 1

    def run(grad_out, input, normalized_shape, rstd, weight, output_mask):
        dx = empty_like(input) if want_dx else input
        partial = empty((programs, n), f32, device) if want_dw else input
        launch(grad_out, input, weight if has_w else input, rstd, dx, partial)
        if not want_dw:
            return dx, None
        dw = partial.sum(0).to(weight.dtype)
        return (dx if want_dx else None), (dw.view(w_shape) if reshape_dw else dw)

    run.launch = launch  # type: ignore[attr-defined]  # (tests look at its capture)
    return run


def _no_grads(*args: Any) -> tuple[None, None]:
    """The backward when ``output_mask`` asks for nothing (or ``dw`` without a weight)."""
    return None, None


fused_rms_norm_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds` with :data:`LIMITS`)."""
    return make_conds(DSL, backends, LIMITS)


forward, backward = fused_rms_norm, fused_rms_norm_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
