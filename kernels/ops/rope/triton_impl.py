"""RoPE forward and backward through the Triton kernel of :mod:`.triton_kernel` (one launch for q and k).

Importing this module imports no Triton: the kernel module is imported at the first launch.
:func:`register` installs both ops as accel overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.dsl.launch import empty_like, lazy_module
from accel.kernels.dsl.triton_utils import LaunchPlan, available
from accel.kernels.ops.conds import tuned_config

from . import FAMILY, op  # noqa: F401 - op defines accel::rope, which registration resolves
from .conditions import make_conds

__all__ = ["DSL", "available", "backward", "conds", "forward", "launch", "register", "rope", "rope_backward"]

DSL = "triton"

_kernels = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


def _bhs(t: torch.Tensor, unsqueeze_dim: int) -> tuple[int, int, int]:
    """``(batch, head, sequence)`` strides of a ``[B, H, S, D]`` (``unsqueeze_dim=1``) or ``[B, S, H, D]`` tensor."""
    st = t.stride()
    return (st[0], st[1], st[2]) if unsqueeze_dim == 1 else (st[0], st[2], st[1])


def _rows(t: torch.Tensor) -> tuple[int, int]:
    """``(batch, sequence)`` strides of a ``[B or 1, S, D]`` ``cos`` or ``sin`` (batch stride 0 where ``B`` is 1)."""
    return (t.stride(0) if t.shape[0] > 1 else 0), t.stride(1)


def launch(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_out: torch.Tensor,
           k_out: torch.Tensor, unsqueeze_dim: int, backward: bool) -> LaunchPlan:
    """The launch for tensors shaped and strided like these (any device: only shapes and strides are read);
    call it with ``(q, k, cos, sin, q_out, k_out)``. ``cos`` and ``sin`` are read with their own strides (either
    may be a strided view, such as one slice of a cache holding both). ``backward``: the adjoint rotation."""
    b, d = q.shape[0], q.shape[3]
    hq, hk = (q.shape[1], k.shape[1]) if unsqueeze_dim == 1 else (q.shape[2], k.shape[2])
    s = cos.shape[1]
    half = d // 2
    cfg = tuned_config("rope_bwd" if backward else "rope_fwd", DSL, q, q.numel() // d, d,
                       lambda n: _kernels().default_config(hq, hk, half))
    scalars = (s, hq, hk, half, *_bhs(q, unsqueeze_dim), *_bhs(k, unsqueeze_dim), *_bhs(q_out, unsqueeze_dim),
               *_bhs(k_out, unsqueeze_dim), *_rows(cos), *_rows(sin))
    return LaunchPlan(_kernels().rope_rows, (b * s,), scalars, BLOCK_D=cfg["block_d"], BLOCK_HQ=cfg["block_hq"],
                      BLOCK_HK=cfg["block_hk"], BACKWARD=backward, num_warps=cfg["num_warps"])


def _plan(q, k, cos, sin, unsqueeze_dim, backward) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    meta_q, meta_k = torch.empty_like(q, device="meta"), torch.empty_like(k, device="meta")  # the outputs' strides
    plan = launch(q, k, cos, sin, meta_q, meta_k, unsqueeze_dim, backward)

    def run(q, k, cos, sin, unsqueeze_dim=1):
        q_out, k_out = empty_like(q), empty_like(k)
        plan(q, k, cos, sin, q_out, k_out)
        return q_out, k_out

    return run


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::rope`` in Triton; same arguments and results as :func:`.reference.rope` (the cond checks them).
    The registry calls :func:`plan_fwd`'s result instead, once per argument signature."""
    return plan_fwd(q, k, cos, sin, unsqueeze_dim)(q, k, cos, sin, unsqueeze_dim)


def plan_fwd(q, k, cos, sin, unsqueeze_dim=1):
    """:func:`rope` for every call with these arguments' signature (strides and launch fixed here)."""
    return _plan(q, k, cos, sin, unsqueeze_dim, False)


def rope_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``accel::rope_backward`` in Triton; same as :func:`.reference.rope_backward`."""
    return plan_bwd(grad_q, grad_k, cos, sin, unsqueeze_dim)(grad_q, grad_k, cos, sin, unsqueeze_dim)


def plan_bwd(grad_q, grad_k, cos, sin, unsqueeze_dim=1):
    """:func:`rope_backward` for every call with these arguments' signature."""
    return _plan(grad_q, grad_k, cos, sin, unsqueeze_dim, True)


rope.plan = plan_fwd  # type: ignore[attr-defined]
rope_backward.plan = plan_bwd  # type: ignore[attr-defined]


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds`)."""
    return make_conds(DSL, backends)


forward, backward = rope, rope_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
