"""The ``cond`` of accel's RMSNorm kernels: vendor, dtype, layout, alignment, shape bounds, tuning table.

One implementation for every DSL (the bounds differ per DSL and direction, the
logic does not). Each check returns a reason string when the kernel must not
run, ``None`` when it may; ``cond`` is ``reason is None`` and carries the reason
function as ``why_not`` for :func:`accel.kernels.explain`. Works on meta tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from . import tuning

__all__ = ["DTYPES", "Limits", "make_conds", "device_types_for"]

#: dtypes the kernels compute (fp32 accumulation for all).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Row and base-pointer alignment the kernels' vector loads need, bytes.
ALIGN = 16


class Limits:
    """Shape bounds of one DSL's kernels (rows ``N`` held in registers, etc.)."""

    def __init__(self, max_n_fwd: int, max_n_bwd: int, needs_weight: bool = False, max_numel: int = 1 << 62) -> None:
        self.max_n_fwd, self.max_n_bwd, self.needs_weight = max_n_fwd, max_n_bwd, needs_weight
        self.max_numel = max_numel


def device_types_for(backends: Sequence[str]) -> dict[str, str | None]:
    """Device type -> vendor requirement for the given accel backends.

    ``cuda`` requires an NVIDIA build (``torch.version.hip is None``), ``rocm`` a
    ROCm build; both use device type ``cuda``.
    """
    out: dict[str, str | None] = {}
    for b in backends:
        if b == "cuda":
            out["cuda"] = "nvidia" if out.get("cuda", "nvidia") == "nvidia" else None
        elif b == "rocm":
            out["cuda"] = "amd" if out.get("cuda", "amd") == "amd" else None
        else:
            out[b] = None
    return out


@functools.cache
def _arch(device: torch.device) -> str:
    if device.type == "cuda":
        if torch.version.hip:
            return str(torch.cuda.get_device_properties(device).gcnArchName).split(":")[0]
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return device.type


#: Reason templates, keyed by what :func:`_check` returns (formatting only happens in ``why_not``).
_REASONS = {
    "numel_small": "{numel} elements < tuning.MIN_NUMEL[{dsl!r}]={min_numel} (ATen is faster)",
    "numel_big": "{numel} elements > {max_numel} (the {dsl} kernel indexes with int32)",
    "device": "device type {device!r} not served (registered for {devices})",
    "rocm": "ROCm build: these kernels are measured on NVIDIA only",
    "not_rocm": "not a ROCm build",
    "dtype": "dtype {dtype} not in fp32/bf16/fp16",
    "shape": "normalized_shape {normalized_shape} does not match the input's trailing dims {shape}",
    "no_weight": "{dsl} kernel needs a weight",
    "weight": "weight differs in dtype/device/size or is not contiguous",
    "layout": "input not contiguous",
    "align": "input or its rows not {align}-byte aligned (N={n}, {esize}-byte elements)",
    "long_row": "N={n} > {max_n} (row bound of the {dsl} kernel)",
}


def _check(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
           devices: dict[str, str | None], dsl: str, limits: Limits, max_n: int) -> tuple[str | None, int]:
    """``(reason key or None, N)``; cheapest rejections first (this runs on every routed-op call)."""
    numel = input.numel()
    if numel < tuning.MIN_NUMEL.get(dsl, 0):
        return "numel_small", 0
    if numel > limits.max_numel:
        return "numel_big", 0
    if input.is_cuda:
        if "cuda" not in devices:
            return "device", 0
        vendor = devices["cuda"]
        if vendor is not None and (vendor == "nvidia") == bool(torch.version.hip):
            return ("rocm" if vendor == "nvidia" else "not_rocm"), 0
    elif input.device.type not in devices:
        return "device", 0
    dtype = input.dtype
    if dtype not in DTYPES:
        return "dtype", 0
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
        numel=input.numel(), dsl=dsl, min_numel=tuning.MIN_NUMEL.get(dsl, 0), max_numel=limits.max_numel,
        device=input.device.type, devices=", ".join(devices), dtype=input.dtype,
        normalized_shape=list(normalized_shape), shape=list(input.shape), align=ALIGN, n=n,
        esize=input.element_size(), max_n=max_n)


def make_conds(dsl: str, backends: Sequence[str], limits: Limits) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` for one DSL registered for ``backends``.

    Both have the ATen op's signature and a ``why_not`` attribute (same signature,
    returns the reason or ``None``).
    """
    devices = device_types_for(backends)

    def check_fwd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                  eps: float | None = None) -> str | None:
        key, n = _check(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_fwd)
        if key is None and tuning.ATEN_FASTER and tuning.aten_faster(
                _arch(input.device), dsl, "fwd", str(input.dtype).removeprefix("torch."), input.numel() // n, n):
            return "table"
        return key

    def check_bwd(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                  rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]) -> str | None:
        key, n = _check(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_bwd)
        if key is not None:
            return key
        if grad_out.shape != input.shape or grad_out.dtype != input.dtype or not grad_out.is_contiguous() \
                or grad_out.data_ptr() % ALIGN:
            return "grad_out"
        if rstd.dtype != torch.float32 or rstd.numel() != input.numel() // n or not rstd.is_contiguous():
            return "rstd"
        if tuning.ATEN_FASTER and tuning.aten_faster(
                _arch(input.device), dsl, "bwd", str(input.dtype).removeprefix("torch."), input.numel() // n, n):
            return "table"
        return None

    extra = {"table": "tuning.ATEN_FASTER lists this shape: ATen is faster",
             "grad_out": "grad_out differs from input in shape/dtype, or is not contiguous and aligned",
             "rstd": "rstd is not a contiguous fp32 tensor with one value per row"}

    def fwd(input, normalized_shape, weight=None, eps=None) -> bool:
        return check_fwd(input, normalized_shape, weight, eps) is None

    def bwd(grad_out, input, normalized_shape, rstd, weight, output_mask) -> bool:
        return check_bwd(grad_out, input, normalized_shape, rstd, weight, output_mask) is None

    def why_not_fwd(input, normalized_shape, weight=None, eps=None) -> str | None:
        key = check_fwd(input, normalized_shape, weight, eps)
        if key is None or key in extra:
            return extra.get(key)
        return _reason(key, input, normalized_shape, devices, dsl, limits, limits.max_n_fwd)

    def why_not_bwd(grad_out, input, normalized_shape, rstd, weight, output_mask) -> str | None:
        key = check_bwd(grad_out, input, normalized_shape, rstd, weight, output_mask)
        if key is None or key in extra:
            return extra.get(key)
        return _reason(key, input, normalized_shape, devices, dsl, limits, limits.max_n_bwd)

    fwd.why_not = why_not_fwd  # type: ignore[attr-defined]
    bwd.why_not = why_not_bwd  # type: ignore[attr-defined]
    return fwd, bwd
