"""The ``cond`` of the residual-add RMSNorm kernels: :mod:`accel.kernels.ops.rms_norm_hf.conditions`' checks
(vendor, dtype, layout, row bound, tuning table) and the added tensors'.

``residual`` (forward) and ``grad_sum`` (backward, where given and the input gradient is asked for) must have
the input's (``sum``'s) shape, dtype and device and be contiguous: the kernels read them with the input's
offsets. Shapes, strides, dtypes and devices only (works on meta and fake tensors). The tuning table is keyed
by ``[M, N]`` (rows, normalised size): ``add_rms_norm_hf_fwd`` / ``add_rms_norm_hf_bwd``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from accel.kernels.ops.conds import conds_from_keys, device_types_for
from accel.kernels.ops.rms_norm_hf import conditions as rn_conditions

__all__ = ["make_conds"]

_REASONS = {
    **rn_conditions.REASONS,
    "layout": "input (sum, for the backward) not contiguous",
    "grad_out": "grad_y differs from sum in shape, dtype or device",
    "residual": "residual differs from the input in shape, dtype or device, or is not contiguous",
    "grad_sum": "grad_sum differs from sum in shape, dtype or device, or is not contiguous",
}


def _like(t: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``t`` can be read with ``other``'s (contiguous) offsets: same shape, dtype, device, contiguous."""
    return t.shape == other.shape and t.dtype == other.dtype and t.device == other.device and t.is_contiguous()


def make_conds(dsl: str, backends: Sequence[str]) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` with the two ops' signatures, each with ``why_not``, ``floor`` and
    ``cacheable`` (:func:`accel.kernels.ops.conds.conds_from_keys`; the sentences name ``input``'s device and
    dtype, ``sum``'s for the backward)."""
    devices = device_types_for(backends)

    def key_fwd(input, residual, weight, eps, unit_offset=False):
        key = rn_conditions.check(input, weight, devices, dsl, "add_rms_norm_hf_fwd")
        if key is not None:
            return key
        return None if _like(residual, input) else "residual"

    def key_bwd(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad):
        key = rn_conditions.check_backward(grad_y, sum, weight, rstd, devices, dsl, "add_rms_norm_hf_bwd")
        if key is not None:
            return key
        if input_grad and grad_sum is not None and not _like(grad_sum, sum):
            return "grad_sum"
        return None

    return conds_from_keys("add_rms_norm_hf", dsl, devices, _REASONS, key_fwd, key_bwd, subject_bwd="sum")
