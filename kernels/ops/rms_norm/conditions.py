"""The ``cond`` of accel's RMSNorm kernels: vendor, dtype, layout, alignment, shape bounds, tuning table.

Shared pieces (vendor, arch, dtypes, alignment) live in :mod:`accel.kernels.ops.conds`;
the tuning table in :mod:`accel.kernels.tuning.table`.

One implementation for every DSL (the bounds differ per DSL and direction, the
logic does not). Each check returns a reason string when the kernel must not
run, ``None`` when it may; ``cond`` is ``reason is None`` and carries the reason
function as ``why_not`` for :func:`accel.kernels.explain`. Works on meta tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from accel.kernels.ops.conds import (
    ALIGN,
    DEVICE_REASONS,
    DTYPES,
    Limits,
    arch,
    conds_from_keys,
    device_types_for,
    entry_reason,
    table_declines,
    table_reason,
)

__all__ = ["DTYPES", "Limits", "make_conds", "device_types_for"]

_arch = arch  # tests clear its cache

#: Reason templates, keyed by what :func:`_check` returns (formatting only happens in ``why_not``).
_REASONS = {
    "numel_big": "{numel} elements > {max_numel} (the {dsl} kernel indexes with int32)",
    **DEVICE_REASONS,
    "shape": "normalized_shape {normalized_shape} does not match the input's trailing dims {shape}",
    "empty": "empty input (no rows or N=0) is left to ATen",
    "no_weight": "{dsl} kernel needs a weight",
    "weight": "weight differs in dtype/device/size or is not contiguous",
    "layout": "input not contiguous",
    "align": "input or its rows not {align}-byte aligned (N={n}, {esize}-byte elements)",
    "long_row": "N={n} > {max_n} (row bound of the {dsl} kernel)",
}


def _check(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
           devices: dict[str, str | None], dsl: str, limits: Limits, max_n: int, op: str) -> tuple[str | None, int]:
    """``(reason key or None, N)``; cheapest rejections first (this runs on every routed-op call).

    The tuning table comes right after the shape, so the DSL the table does not pick
    declines before the per-tensor checks (one of two DSL conds runs them, not both).
    """
    numel = input.numel()
    key = entry_reason(input, numel, op, dsl, devices, limits.max_numel)
    if key is not None:
        return key, 0
    if numel == 0:  # reached only where the floor is 0: the backward's grid has no rows to share out
        return "empty", 0
    dtype = input.dtype
    shape = input.shape
    if len(normalized_shape) == 1:
        n = normalized_shape[0]
        if not shape or shape[-1] != n:
            return "shape", 0
    else:
        k = len(normalized_shape)
        if k == 0 or len(shape) < k or list(shape[-k:]) != list(normalized_shape):
            return "shape", 0
        n = _prod(normalized_shape)
    if table_declines(op, dsl, input, numel, n):
        return "table", n
    if weight is None:
        if limits.needs_weight:
            return "no_weight", 0
    elif (weight.dtype != dtype or weight.get_device() != input.get_device() or weight.numel() != n
          or not weight.is_contiguous()):
        return "weight", 0
    if not input.is_contiguous():
        return "layout", 0
    esize = input.element_size()
    if input.data_ptr() % ALIGN or (n * esize) % ALIGN:
        return "align", 0
    if n > max_n:
        return "long_row", 0
    return None, n


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _reason(key: str, input: torch.Tensor, normalized_shape: Sequence[int], devices: dict[str, str | None],
            dsl: str, limits: Limits, max_n: int) -> str:
    n = _prod(normalized_shape) if normalized_shape else 0
    return _REASONS[key].format(
        numel=input.numel(), dsl=dsl, max_numel=limits.max_numel,
        device=input.device.type, devices=", ".join(devices), dtype=input.dtype,
        normalized_shape=list(normalized_shape), shape=list(input.shape), align=ALIGN, n=n,
        esize=input.element_size(), max_n=max_n)


def make_conds(dsl: str, backends: Sequence[str], limits: Limits) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` for one DSL registered for ``backends``.

    Both have the ATen op's signature and a ``why_not`` attribute (same signature,
    returns the reason or ``None``), ``floor`` and ``cacheable``
    (:func:`accel.kernels.ops.conds.conds_from_keys`).
    """
    devices = device_types_for(backends)

    def check_fwd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                  eps: float | None = None) -> str | None:
        return _check(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_fwd, "rms_norm_fwd")[0]

    def check_bwd(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                  rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]) -> str | None:
        key, n = _check(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_bwd, "rms_norm_bwd")
        if key is not None:
            return key
        if grad_out.shape != input.shape or grad_out.dtype != input.dtype or not grad_out.is_contiguous() \
                or grad_out.data_ptr() % ALIGN:
            return "grad_out"
        if rstd.dtype != torch.float32 or rstd.numel() != input.numel() // n or not rstd.is_contiguous():
            return "rstd"
        return None

    extra = {"grad_out": "grad_out differs from input in shape/dtype, or is not contiguous and aligned",
             "rstd": "rstd is not a contiguous fp32 tensor with one value per row"}
    max_n = {"rms_norm_fwd": limits.max_n_fwd, "rms_norm_bwd": limits.max_n_bwd}

    def text(key: str, op: str, input: torch.Tensor, normalized_shape: Sequence[int]) -> str:
        if key == "table":
            return table_reason(op, dsl, input, _prod(normalized_shape))
        if key in extra:
            return extra[key]
        return _reason(key, input, normalized_shape, devices, dsl, limits, max_n[op])

    subject = ("input", "normalized_shape")
    return conds_from_keys("rms_norm", dsl, devices, text, check_fwd, check_bwd, subject_fwd=subject,
                           subject_bwd=subject)
