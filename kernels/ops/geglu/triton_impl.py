"""GeGLU forward and backward through SwiGLU's Triton kernels with the GELU-tanh activation
(:mod:`accel.kernels.ops.swiglu.triton_kernel`, ``ACT = GELU_TANH``): the same tiles, layouts, plans and cond;
the tuning tables are this family's (``geglu_fwd`` / ``geglu_bwd``).

Importing this module imports no Triton (nor defines the custom ops' kernels): the kernel module is imported at the
first launch. :func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from accel.kernels.dsl.triton_utils import available
from accel.kernels.ops.swiglu import GELU_TANH
from accel.kernels.ops.swiglu import triton_impl as swiglu_impl
from accel.kernels.ops.swiglu.conditions import make_conds

from . import FAMILY, op  # noqa: F401 - op defines accel::geglu, which registration resolves

__all__ = ["DSL", "available", "backward", "conds", "forward", "geglu", "geglu_backward", "register"]

DSL = "triton"


def plan_fwd(a: torch.Tensor, b: torch.Tensor):
    """:func:`geglu` for every call with these arguments' signature (SwiGLU's plan, the GELU-tanh activation)."""
    return swiglu_impl.plan_fwd(a, b, family="geglu", act=GELU_TANH)


def plan_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    """:func:`geglu_backward` for every call with these arguments' signature."""
    return swiglu_impl.plan_bwd(grad_out, a, b, family="geglu", act=GELU_TANH)


def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``accel::geglu`` in Triton; same arguments and result as :func:`.reference.geglu` (the cond checks the
    layout). The registry calls :func:`plan_fwd`'s result instead, once per argument signature."""
    return plan_fwd(a, b)(a, b)


def geglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::geglu_backward`` in Triton; same as :func:`.reference.geglu_backward`."""
    return plan_bwd(grad_out, a, b)(grad_out, a, b)


geglu.plan = plan_fwd  # type: ignore[attr-defined]
geglu_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (SwiGLU's checks, this family's tuning tables)."""
    return make_conds(DSL, backends, "geglu")


forward, backward = geglu, geglu_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
