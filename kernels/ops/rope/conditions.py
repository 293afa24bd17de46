"""The ``cond`` of accel's RoPE kernel: vendor, dtype, shapes, unit stride on the head dim, tuning table.

Each check returns a reason key when the kernel must not run, ``None`` when it may; ``why_not`` turns the
key into a sentence for :func:`accel.kernels.explain`. Shapes, strides, dtypes and devices only (works on
meta and fake tensors). The tuning table is keyed by ``[M, N] = [B * S * Hq, D]`` of ``q``
(``rope_fwd`` / ``rope_bwd``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.ops.conds import DEVICE_REASONS, conds_from_keys, device_types_for, entry_reason, table_declines

__all__ = ["MAX_HEAD_DIM", "make_conds"]

#: Largest head size ``D`` the kernel holds (a half row of 1024 per head in registers).
MAX_HEAD_DIM = 2048

_REASONS = {
    **DEVICE_REASONS,
    "numel_big": "too many elements for the {dsl} kernel",
    "shape": "q, k, cos, sin do not have the shapes, dtype and device accel::rope takes (4-d q and k, "
             "[B or 1, S, D] cos and sin, D even, one dtype), or are empty",
    "layout": "q, k, cos, sin or a gradient does not have unit stride on its last dim",
    "head_dim": "head size D > 2048",
}


def _shapes_ok(q, k, cos, sin, unsqueeze_dim) -> bool:
    if unsqueeze_dim not in (1, 2) or q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or cos.shape != sin.shape:
        return False
    seq = 3 - unsqueeze_dim
    d = cos.shape[2]
    return (q.shape[3] == d == k.shape[3] and d % 2 == 0 and q.shape[0] == k.shape[0]
            and q.shape[seq] == cos.shape[1] == k.shape[seq] and cos.shape[0] in (1, q.shape[0])
            and q.dtype == k.dtype == cos.dtype == sin.dtype and q.device == k.device == cos.device == sin.device
            and q.numel() > 0 and k.numel() > 0)


def _unit(*tensors: torch.Tensor) -> bool:
    return all(t.stride(-1) == 1 for t in tensors)


def _check(q, k, cos, sin, unsqueeze_dim, devices, dsl, op) -> str | None:
    numel = q.numel()
    key = entry_reason(q, numel, op, dsl, devices, 1 << 62)
    if key is not None:
        return key
    if not _shapes_ok(q, k, cos, sin, unsqueeze_dim):
        return "shape"
    d = q.shape[3]
    if d > MAX_HEAD_DIM:
        return "head_dim"
    if table_declines(op, dsl, q, numel, d):
        return "table"
    if not _unit(q, k, cos, sin):
        return "layout"
    return None


def make_conds(dsl: str, backends: Sequence[str]) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` with the two ops' signatures (``(q, k, cos, sin, unsqueeze_dim=1)``,
    ``(grad_q, grad_k, cos, sin, unsqueeze_dim=1)``), each with ``why_not``, ``floor`` and ``cacheable``
    (:func:`accel.kernels.ops.conds.conds_from_keys`; the sentences name ``q``'s and ``grad_q``'s device and dtype)."""
    devices = device_types_for(backends)

    def key_fwd(q, k, cos, sin, unsqueeze_dim=1):
        return _check(q, k, cos, sin, unsqueeze_dim, devices, dsl, "rope_fwd")

    def key_bwd(grad_q, grad_k, cos, sin, unsqueeze_dim=1):
        return _check(grad_q, grad_k, cos, sin, unsqueeze_dim, devices, dsl, "rope_bwd")

    return conds_from_keys("rope", dsl, devices, _REASONS, key_fwd, key_bwd, subject_fwd="q", subject_bwd="grad_q")
