"""Residual-add RMSNorm forward and backward through the Triton kernels of
:mod:`accel.kernels.ops.rms_norm_hf.triton_kernel` (``RESIDUAL`` / ``ADD_GRAD`` on).

Importing this module imports no Triton: the kernel module is imported at the first launch.
:func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.dsl.launch import empty, empty_like, lazy_module
from accel.kernels.dsl.triton_utils import available, row_launch
from accel.kernels.ops.conds import tuned_config
from accel.kernels.ops.rms_norm_hf.triton_impl import backward_launch

from . import FAMILY, op  # noqa: F401 - op defines accel::add_rms_norm_hf, which registration resolves
from .conditions import make_conds

__all__ = ["DSL", "add_rms_norm_hf", "add_rms_norm_hf_backward", "available", "backward", "conds", "forward",
           "register"]

DSL = "triton"

# the RMSNorm kernels themselves, imported at the first launch (the family has no kernel module of its own)
_kernels = lazy_module("accel.kernels.ops.rms_norm_hf.triton_kernel")


def add_rms_norm_hf(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``accel::add_rms_norm_hf`` in Triton; same arguments and results as :func:`.reference.add_rms_norm_hf`
    (the cond checks the layout). The registry calls :func:`plan_fwd`'s result instead, once per argument
    signature."""
    return plan_fwd(input, residual, weight, eps, unit_offset)(input, residual, weight, eps, unit_offset)


def plan_fwd(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
             unit_offset: bool = False) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """:func:`add_rms_norm_hf` for every call with these arguments' signature: rows, launch config (tuning
    table ``add_rms_norm_hf_fwd``, else rms_norm_hf's default) and launch fixed here."""
    n = input.shape[-1]
    m = input.numel() // n
    cfg = tuned_config("add_rms_norm_hf_fwd", DSL, input, m, n, _kernels().default_config)
    plan = row_launch(None, _kernels().rms_norm_hf_fwd, cfg, m, n, (float(eps),), UNIT_OFFSET=bool(unit_offset),
                      RESIDUAL=True)
    stat, device = tuple(input.shape[:-1]), input.device

    def run(input, residual, weight, eps, unit_offset=False):
        s = empty_like(input)
        y = empty_like(input)
        rstd = empty(stat, torch.float32, device)
        plan(input, weight, y, rstd, residual, s)
        return s, y, rstd

    return run


add_rms_norm_hf.plan = plan_fwd  # type: ignore[attr-defined]


def add_rms_norm_hf_backward(grad_y: torch.Tensor, grad_sum: torch.Tensor | None, sum: torch.Tensor,
                             weight: torch.Tensor, rstd: torch.Tensor, unit_offset: bool, input_grad: bool,
                             weight_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::add_rms_norm_hf_backward`` in Triton; same as :func:`.reference.add_rms_norm_hf_backward`."""
    return plan_bwd(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad)(
        grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad)


def plan_bwd(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad):
    """:func:`add_rms_norm_hf_backward` for every call with these arguments' signature (``grad_sum`` given or
    ``None`` is part of it): rms_norm_hf's backward launch (:func:`.rms_norm_hf.triton_impl.backward_launch`),
    with ``grad_sum`` added to ``dx`` in the kernel (``ADD_GRAD``) where both are wanted."""
    want_dx = bool(input_grad)
    launch = backward_launch(sum, unit_offset, want_dx, bool(weight_grad), want_dx and grad_sum is not None)

    def run(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad):
        return launch(grad_y, sum, weight, rstd, grad_sum)

    return run


add_rms_norm_hf_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds`)."""
    return make_conds(DSL, backends)


forward, backward = add_rms_norm_hf, add_rms_norm_hf_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
