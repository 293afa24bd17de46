"""Model-rounding RMSNorm forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton: the kernel module is imported at the first launch.
:func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.dsl.launch import empty, empty_like, lazy_module, row_programs
from accel.kernels.dsl.triton_utils import LaunchPlan, available, row_launch
from accel.kernels.ops.conds import tuned_config

from . import FAMILY, op  # noqa: F401 - op defines accel::rms_norm_hf, which registration resolves
from .conditions import make_conds

__all__ = ["DSL", "available", "backward", "backward_launch", "conds", "forward", "register", "rms_norm_hf",
           "rms_norm_hf_backward"]

DSL = "triton"

_kernels = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


def rms_norm_hf(input: torch.Tensor, weight: torch.Tensor, eps: float,
                unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::rms_norm_hf`` in Triton; same arguments and results as :func:`.reference.rms_norm_hf` (the cond
    checks the layout). The registry calls :func:`plan_fwd`'s result instead, once per argument signature."""
    return plan_fwd(input, weight, eps, unit_offset)(input, weight, eps, unit_offset)


def plan_fwd(input: torch.Tensor, weight: torch.Tensor, eps: float,
             unit_offset: bool = False) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """:func:`rms_norm_hf` for every call with these arguments' signature: rows, launch config (tuning table)
    and launch fixed here."""
    n = input.shape[-1]
    m = input.numel() // n
    cfg = tuned_config("rms_norm_hf_fwd", DSL, input, m, n, _kernels().default_config)
    plan = row_launch(None, _kernels().rms_norm_hf_fwd, cfg, m, n, (float(eps),), UNIT_OFFSET=bool(unit_offset),
                      RESIDUAL=False)
    stat, device = tuple(input.shape[:-1]), input.device

    def run(input, weight, eps, unit_offset=False):
        y = empty_like(input)
        rstd = empty(stat, torch.float32, device)
        plan(input, weight, y, rstd, input, y)  # R, S: unread without RESIDUAL
        return y, rstd

    return run


rms_norm_hf.plan = plan_fwd  # type: ignore[attr-defined]


def rms_norm_hf_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                         unit_offset: bool, input_grad: bool, weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::rms_norm_hf_backward`` in Triton; same as :func:`.reference.rms_norm_hf_backward`."""
    return plan_bwd(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad)(
        grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad)


def plan_bwd(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad):
    """:func:`rms_norm_hf_backward` for every call with these arguments' signature (:func:`backward_launch`)."""
    launch = backward_launch(input, unit_offset, bool(input_grad), bool(weight_grad), False)

    def run(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad):
        return launch(grad_out, input, weight, rstd, None)

    return run


def backward_launch(x: torch.Tensor, unit_offset: bool, want_dx: bool, want_dw: bool,
                    add_grad: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The backward kernel's launch for inputs like ``x`` (``[..., N]``), shared by this family and
    ``add_rms_norm_hf``: the program grid (a few programs per SM, each walking a range of rows and keeping its
    ``dw`` partial) and launch fixed here. The result ``launch(grad, x, weight, rstd, ds) -> (dx, dw)`` makes
    the allocations, the launch (with ``add_grad``, ``ds`` added to ``dx`` in the kernel: ``ADD_GRAD``; else
    ``ds`` is unread) and, for ``dw``, the sum of the partials; an empty ``[0]`` tensor for a gradient not
    wanted."""
    k = _kernels()
    n = x.shape[-1]
    m = x.numel() // n
    block_n, num_warps = k.bwd_config(n)
    programs, per_program = row_programs(m, x.device, 4 if block_n <= 4096 else 2)
    plan = LaunchPlan(k.rms_norm_hf_bwd, (programs,), (m, n, per_program), BLOCK_N=block_n,
                      UNIT_OFFSET=bool(unit_offset), WANT_DX=want_dx, WANT_DW=want_dw, ADD_GRAD=add_grad,
                      num_warps=num_warps)
    device = x.device

    def launch(grad, x, weight, rstd, ds):
        grad = grad.contiguous()  # a transposed view's gradient (Qwen3's k_norm) arrives strided
        dx = empty_like(x) if want_dx else x.new_empty(0)
        partial = empty((programs, n), torch.float32, device) if want_dw else dx
        plan(grad, x, weight, rstd, dx if want_dx else x, partial if want_dw else x, ds if add_grad else grad)
        dw = partial.sum(0).to(weight.dtype) if want_dw else weight.new_empty(0)
        return dx, dw

    return launch


rms_norm_hf_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds`)."""
    return make_conds(DSL, backends)


forward, backward = rms_norm_hf, rms_norm_hf_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
