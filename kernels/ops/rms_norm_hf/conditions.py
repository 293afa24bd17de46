"""The ``cond`` of accel's model-rounding RMSNorm kernels: vendor, dtype, layout, row bound, tuning table.

Each check returns a reason key when the kernel must not run, ``None`` when it may; ``why_not`` turns the
key into a sentence for :func:`accel.kernels.explain`. Shapes, strides, dtypes and devices only (works on
meta and fake tensors). The tuning table is keyed by ``[M, N]`` (rows, normalised size) as for
``aten::_fused_rms_norm`` (``rms_norm_hf_fwd`` / ``rms_norm_hf_bwd``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.ops.conds import DEVICE_REASONS, conds_from_keys, device_types_for, entry_reason, table_declines

__all__ = ["MAX_N", "REASONS", "check", "check_backward", "make_conds"]

#: Longest row the kernels keep in registers (elements), forward and backward.
MAX_N = 16384

#: Reason key -> sentence (:func:`accel.kernels.ops.conds.conds_from_keys`).
REASONS = {
    **DEVICE_REASONS,
    "numel_big": "too many elements for the {dsl} kernel",
    "shape": "weight is not [N] for input [..., N], or the input is empty",
    "weight": "weight differs from the input in dtype or device, or is not contiguous",
    "layout": "input not contiguous",
    "long_row": "N > 16384 (row bound of the {dsl} kernel)",
    "grad_out": "grad_out differs from the input in shape, dtype or device",
    "rstd": "rstd is not a contiguous fp32 tensor with one value per row",
}


def check(input, weight, devices, dsl, op) -> str | None:
    """The reason key (:data:`REASONS`) why the kernels must not take ``input`` ``[..., N]`` and ``weight``
    ``[N]`` for tuning-table op ``op``, or ``None``: floor, device and dtype, shapes, row bound, table,
    weight, layout (also the checks of :mod:`accel.kernels.ops.add_rms_norm_hf.conditions`)."""
    numel = input.numel()
    key = entry_reason(input, numel, op, dsl, devices, 1 << 62)
    if key is not None:
        return key
    if input.dim() < 1 or weight.dim() != 1 or weight.shape[0] != input.shape[-1] or numel == 0:
        return "shape"
    n = input.shape[-1]
    if n > MAX_N:
        return "long_row"
    if table_declines(op, dsl, input, numel, n):
        return "table"
    if weight.dtype != input.dtype or weight.device != input.device or not weight.is_contiguous():
        return "weight"
    if not input.is_contiguous():
        return "layout"
    return None


def check_backward(grad_out, input, weight, rstd, devices, dsl, op) -> str | None:
    """:func:`check` and the backward's own checks (``grad_out`` like the input in any layout, ``rstd`` a
    contiguous fp32 value per row): a reason key of :data:`REASONS`, or ``None``."""
    key = check(input, weight, devices, dsl, op)
    if key is not None:
        return key
    if grad_out.shape != input.shape or grad_out.dtype != input.dtype or grad_out.device != input.device:
        return "grad_out"  # any layout: the impl copies a strided one (cheaper than the eager backward)
    if rstd.dtype != torch.float32 or rstd.numel() * input.shape[-1] != input.numel() or not rstd.is_contiguous():
        return "rstd"
    return None


def make_conds(dsl: str, backends: Sequence[str]) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` with the two ops' signatures, each with ``why_not``, ``floor`` and
    ``cacheable`` (:func:`accel.kernels.ops.conds.conds_from_keys`; the sentences name ``input``'s device and
    dtype)."""
    devices = device_types_for(backends)

    def key_fwd(input, weight, eps, unit_offset=False):
        return check(input, weight, devices, dsl, "rms_norm_hf_fwd")

    def key_bwd(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad):
        return check_backward(grad_out, input, weight, rstd, devices, dsl, "rms_norm_hf_bwd")

    return conds_from_keys("rms_norm_hf", dsl, devices, REASONS, key_fwd, key_bwd)
