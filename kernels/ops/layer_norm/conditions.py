"""The ``cond`` of accel's LayerNorm kernels: vendor, dtype, shapes, affine params, layout, bounds, tuning table.

One implementation for every DSL (shared pieces: :mod:`accel.kernels.ops.conds`).
The affine weight and bias may be in the input's dtype or fp32 (mixed
precision, as quack's LayerNorm wants); both must be contiguous and of ``N`` elements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from accel.kernels.ops.conds import (
    ALIGN,
    Limits,
    conds_from_keys,
    device_types_for,
    entry_reason,
    reason_text,
    rows_reason,
    table_declines,
    table_reason,
)

__all__ = ["make_conds"]

_EXTRA = {
    "shape": "normalized_shape does not match the input's trailing dims",
    "no_weight": "the {dsl} kernel needs weight and bias",
    "param": "weight/bias differ in device or size, are not contiguous, or are not in the input's dtype or fp32",
    "numel_big": "too many elements for the {dsl} kernel (int32 indexing)",
    "grad_out": "grad_out differs from input in shape/dtype, or is not contiguous and aligned",
    "stats": "mean/rstd are not contiguous with one fp32 (or input-dtype) value per row",
}


def _n(input: torch.Tensor, normalized_shape: Sequence[int]) -> int:
    k = len(normalized_shape)
    if k == 0 or input.dim() < k or list(input.shape[-k:]) != list(normalized_shape):
        return 0
    return normalized_shape[0] if k == 1 else math.prod(normalized_shape)


def _param_bad(p: torch.Tensor | None, input: torch.Tensor, n: int) -> bool:
    # get_device() (an int) rather than .device (a new torch.device per read): this runs per call.
    return p is not None and ((p.dtype != input.dtype and p.dtype != torch.float32) or p.numel() != n
                              or p.get_device() != input.get_device() or p.is_cuda != input.is_cuda
                              or not p.is_contiguous())


def make_conds(dsl: str, backends: Sequence[str], limits: Limits,
               extra: Callable[..., str | None] | None = None) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` for one DSL registered for ``backends`` (each with ``why_not``, ``floor``
    and ``cacheable``: :func:`accel.kernels.ops.conds.conds_from_keys`).

    ``extra``: the DSL's own last check of the backward, ``(input, n, mean, rstd, weight)`` -> ``None`` or the
    reason sentence (the CuTeDSL kernel's arch, statistics, alignment and row-length checks).
    """
    devices = device_types_for(backends)

    def common(input, normalized_shape, weight, bias, max_n, op) -> tuple[str | None, int]:
        numel = input.numel()
        key = entry_reason(input, numel, op, dsl, devices, limits.max_numel)
        if key is not None:
            return key, 0
        n = _n(input, normalized_shape)
        if n == 0:
            return "shape", 0
        if table_declines(op, dsl, input, numel, n):
            return "table", n
        if limits.needs_weight and (weight is None or bias is None):
            return "no_weight", n
        if _param_bad(weight, input, n) or _param_bad(bias, input, n) or (
                weight is not None and bias is not None and weight.dtype != bias.dtype):
            return "param", n
        return rows_reason(input, n, max_n), n

    def check_fwd(input, normalized_shape, weight=None, bias=None, eps=1e-5) -> str | None:
        return common(input, normalized_shape, weight, bias, limits.max_n_fwd, "layer_norm_fwd")[0]

    def check_bwd(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask) -> str | None:
        key, n = common(input, normalized_shape, weight, bias, limits.max_n_bwd, "layer_norm_bwd")
        if key is not None:
            return key
        if grad_out.shape != input.shape or grad_out.dtype != input.dtype or not grad_out.is_contiguous() \
                or grad_out.data_ptr() % ALIGN:
            return "grad_out"
        m = input.numel() // n
        for s in (mean, rstd):
            if s.dtype not in (torch.float32, input.dtype) or s.numel() != m or not s.is_contiguous():
                return "stats"
        if extra is not None and extra(input, n, mean, rstd, weight) is not None:
            return "extra"
        return None

    max_n = {"layer_norm_fwd": limits.max_n_fwd, "layer_norm_bwd": limits.max_n_bwd}

    def text(key: str, op: str, input: torch.Tensor, normalized_shape: Sequence[int], *stats: Any) -> str:
        n = _n(input, normalized_shape)
        if key == "extra":  # the backward's only: stats is its (mean, rstd, weight)
            return extra(input, n, *stats) or "the DSL's own check"  # type: ignore[misc]
        if key == "table":
            return table_reason(op, dsl, input, n or math.prod(normalized_shape))
        return reason_text(key, input=input, devices=devices, dsl=dsl, n=n, max_n=max_n[op], extra=_EXTRA)

    return conds_from_keys("layer_norm", dsl, devices, text, check_fwd, check_bwd,
                           subject_fwd=("input", "normalized_shape"),
                           subject_bwd=("input", "normalized_shape", "mean", "rstd", "weight"))
