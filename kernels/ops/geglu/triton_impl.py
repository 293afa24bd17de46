"""GeGLU forward and backward through SwiGLU's Triton kernels with the GELU-tanh activation
(:mod:`accel.kernels.ops.swiglu.triton_kernel`, ``ACT = GELU_TANH``): the same tiles, layouts and cond; the
tuning tables are this family's (``geglu_fwd`` / ``geglu_bwd``).

Importing this module imports no Triton (nor defines the custom ops' kernels): the kernel module is imported at the
first launch. :func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.kernels.dsl.launch import empty_like, lazy_module
from accel.kernels.dsl.triton_utils import available
from accel.kernels.ops.conds import tuned_config
from accel.kernels.ops.swiglu.conditions import make_conds, row_stride
from accel.kernels.ops.swiglu.triton_impl import launch

from . import FAMILY, op  # noqa: F401 - op defines accel::geglu, which registration resolves

__all__ = ["DSL", "available", "backward", "conds", "forward", "geglu", "geglu_backward", "register"]

DSL = "triton"

_kernels = lazy_module("accel.kernels.ops.swiglu.triton_kernel")  # imports the DSL at the first launch


def _config(op_name: str, a: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    return tuned_config(op_name, DSL, a, m, n, _kernels().default_config)


def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``accel::geglu`` in Triton; same arguments and result as :func:`.reference.geglu` (the cond checks the
    layout). The registry calls :func:`plan_fwd`'s result instead, once per argument signature."""
    return plan_fwd(a, b)(a, b)


def plan_fwd(a: torch.Tensor, b: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """:func:`geglu` for every call with these arguments' signature: tile and launch fixed here."""
    n = a.shape[-1]
    m = a.numel() // n
    k = _kernels()
    y_stride = row_stride(torch.empty_like(a, device="meta"))
    plan = launch(k.swiglu_fwd, _config("geglu_fwd", a, m, n), m, n, (row_stride(a), row_stride(b), y_stride),
                  act=k.GELU_TANH)

    def run(a, b):
        y = empty_like(a)
        plan(a, b, y)
        return y

    return run


geglu.plan = plan_fwd  # type: ignore[attr-defined]


def geglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::geglu_backward`` in Triton; same as :func:`.reference.geglu_backward`."""
    return plan_bwd(grad_out, a, b)(grad_out, a, b)


def plan_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Callable[..., tuple[torch.Tensor, ...]]:
    """:func:`geglu_backward` for every call with these arguments' signature."""
    n = a.shape[-1]
    m = a.numel() // n
    k = _kernels()
    strides = (row_stride(grad_out), row_stride(a), row_stride(b), row_stride(torch.empty_like(a, device="meta")),
               row_stride(torch.empty_like(b, device="meta")))
    plan = launch(k.swiglu_bwd, _config("geglu_bwd", a, m, n), m, n, strides, act=k.GELU_TANH)

    def run(grad_out, a, b):
        da, db = empty_like(a), empty_like(b)
        plan(grad_out, a, b, da, db)
        return da, db

    return run


geglu_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (SwiGLU's checks, this family's tuning tables)."""
    return make_conds(DSL, backends, "geglu")


forward, backward = geglu, geglu_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
