"""SwiGLU forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton (nor defines the custom ops' kernels): the kernel module is
imported at the first launch. :func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from accel.kernels.dsl.launch import empty_like, lazy_module
from accel.kernels.core.plans import MAX_ENTRIES, signature
from accel.kernels.dsl.triton_utils import LaunchPlan, available
from accel.kernels.ops.conds import tuned_config
from accel.kernels.tuning import table

from . import FAMILY, SILU, op  # op defines accel::swiglu, which registration resolves
from .conditions import make_conds, row_stride

__all__ = ["DSL", "available", "backward", "conds", "forward", "launch", "register", "swiglu", "swiglu_backward",
           "swiglu_backward_product"]

DSL = "triton"

_kernels = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


def launch(kernel: Any, cfg: Mapping[str, Any], m: int, n: int, strides: Sequence[int], act: int = SILU) -> LaunchPlan:
    """The launch of ``kernel`` (``swiglu_fwd`` or ``swiglu_bwd``) over ``m`` rows of ``n`` with tile ``cfg``
    (``block_n``, ``rows``, ``num_warps``) and the tensors' row ``strides``; int64 offsets where an offset
    could reach ``2**31``. ``act``: the gate's activation (``triton_kernel.SILU`` or ``GELU_TANH``)."""
    rows, block_n = cfg["rows"], cfg["block_n"]
    wide = (m + rows) * max(max(strides), n) >= 1 << 31
    return LaunchPlan(kernel, (-(-m // rows), -(-n // block_n)), (m, n, *strides), BLOCK_N=block_n, ROWS=rows,
                      WIDE=wide, ACT=act, num_warps=cfg["num_warps"])


def _config(op_name: str, a: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    return tuned_config(op_name, DSL, a, m, n, _kernels().default_config)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``accel::swiglu`` in Triton; same arguments and result as :func:`.reference.swiglu` (the cond checks the
    layout). The registry calls :func:`plan_fwd`'s result instead, once per argument signature."""
    return plan_fwd(a, b)(a, b)


def plan_fwd(a: torch.Tensor, b: torch.Tensor, *, family: str = "swiglu",
             act: int = SILU) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """:func:`swiglu` for every call with these arguments' signature: tile and launch fixed here. ``family`` and
    ``act``: another gated activation on the same kernel (GeGLU's: ``"geglu"``, ``GELU_TANH``), its tuning table
    ``<family>_fwd``."""
    n = a.shape[-1]
    m = a.numel() // n
    y_stride = row_stride(torch.empty_like(a, device="meta"))
    plan = launch(_kernels().swiglu_fwd, _config(f"{family}_fwd", a, m, n), m, n,
                  (row_stride(a), row_stride(b), y_stride), act)

    def run(a, b):
        y = empty_like(a)
        plan(a, b, y)
        return y

    return run


swiglu.plan = plan_fwd  # type: ignore[attr-defined]


def swiglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::swiglu_backward`` in Triton; same as :func:`.reference.swiglu_backward`."""
    return plan_bwd(grad_out, a, b)(grad_out, a, b)


def plan_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, product: bool = False,
             family: str = "swiglu", act: int = SILU) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """:func:`swiglu_backward` for every call with these arguments' signature (``product``: the launch of
    :func:`swiglu_backward_product`; the same tile, from the ``<family>_bwd`` table entry; ``family``, ``act``
    as :func:`plan_fwd`'s)."""
    n = a.shape[-1]
    m = a.numel() // n
    da_stride = row_stride(torch.empty_like(a, device="meta"))
    db_stride = row_stride(torch.empty_like(b, device="meta"))
    strides = (row_stride(grad_out), row_stride(a), row_stride(b), da_stride, db_stride)
    kernel = _kernels().swiglu_bwd_product if product else _kernels().swiglu_bwd
    plan = launch(kernel, _config(f"{family}_bwd", a, m, n), m, n, strides, act)

    def run(grad_out, a, b, consume=False):
        # consume: the gradients over a and b (contiguous, so laid out as empty_like's), which each program reads
        # before it writes them
        da, db = (a, b) if consume else (empty_like(a), empty_like(b))
        plan(grad_out, a, b, da, db)
        return da, db

    return run


swiglu_backward.plan = plan_bwd  # type: ignore[attr-defined]

_PRODUCT_PLANS: dict = {}


def swiglu_backward_product(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                            consume: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`swiglu_backward`, and ``silu(a) * b`` written over ``grad_out`` (which must be the caller's own
    temporary, laid out as the cond of ``accel::swiglu_backward`` accepts: the caller asks that cond first,
    :func:`.op.backward_with_product`). ``consume``: the two gradients are written over ``a`` and ``b``
    (contiguous, the caller's own and dead after) and returned as them. The launch is kept per argument
    signature."""
    sig = signature((grad_out, a, b))
    key = None if sig is None else (table.GENERATION, sig)  # a re-tune (new generation) plans again
    run = _PRODUCT_PLANS.get(key) if key is not None else None
    if run is None:
        run = plan_bwd(grad_out, a, b, product=True)
        if key is not None:
            if len(_PRODUCT_PLANS) >= MAX_ENTRIES:
                _PRODUCT_PLANS.clear()
            _PRODUCT_PLANS[key] = run
    return run(grad_out, a, b, consume)


op.WITH_PRODUCT[swiglu_backward] = (swiglu_backward_product, swiglu)


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds`)."""
    return make_conds(DSL, backends)


forward, backward = swiglu, swiglu_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
