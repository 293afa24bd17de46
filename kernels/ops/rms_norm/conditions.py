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


def _common(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
            devices: dict[str, str | None], dsl: str, limits: Limits, max_n: int) -> tuple[str | None, int]:
    dev = input.device.type
    if dev not in devices:
        return f"device type {dev!r} not served (registered for {', '.join(devices)})", 0
    vendor = devices[dev]
    if vendor == "nvidia" and torch.version.hip:
        return "ROCm build: these kernels are measured on NVIDIA only", 0
    if vendor == "amd" and not torch.version.hip:
        return "not a ROCm build", 0
    dtype = input.dtype
    if dtype not in DTYPES:
        return f"dtype {dtype} not in fp32/bf16/fp16", 0
    k = len(normalized_shape)
    if k == 1:
        n = normalized_shape[0]
        if input.dim() < 1 or input.shape[-1] != n:
            return "normalized_shape does not match the input's last dim", 0
    else:
        if k == 0 or input.dim() < k or list(input.shape[-k:]) != list(normalized_shape):
            return "normalized_shape does not match the input's trailing dims", 0
        n = 1
        for s in normalized_shape:
            n *= s
    if weight is None:
        if limits.needs_weight:
            return f"{dsl} kernel needs a weight", 0
    elif weight.dtype != dtype or weight.device != input.device or weight.numel() != n or not weight.is_contiguous():
        return "weight differs in dtype/device/size or is not contiguous", 0
    if not input.is_contiguous():
        return "input not contiguous", 0
    esize = input.element_size()
    if input.data_ptr() % ALIGN or (n * esize) % ALIGN:
        return f"input or its rows not {ALIGN}-byte aligned (N={n}, {esize}-byte elements)", 0
    if n > max_n:
        return f"N={n} > {max_n} (row bound of the {dsl} kernel)", 0
    numel = input.numel()
    if numel > limits.max_numel:
        return f"{numel} elements > {limits.max_numel} (the {dsl} kernel indexes with int32)", 0
    if numel < tuning.MIN_NUMEL.get(dsl, 0):
        return f"{numel} elements < tuning.MIN_NUMEL[{dsl!r}]={tuning.MIN_NUMEL.get(dsl, 0)} (ATen is faster)", 0
    return None, n


def make_conds(dsl: str, backends: Sequence[str], limits: Limits) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` for one DSL registered for ``backends``.

    Both have the ATen op's signature and a ``why_not`` attribute (same signature,
    returns the reason or ``None``).
    """
    devices = device_types_for(backends)

    def why_not_fwd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                    eps: float | None = None) -> str | None:
        why, n = _common(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_fwd)
        if why is None and tuning.ATEN_FASTER and tuning.aten_faster(
                _arch(input.device), dsl, "fwd", str(input.dtype).removeprefix("torch."), input.numel() // n, n):
            return "tuning.ATEN_FASTER lists this shape: ATen is faster"
        return why

    def why_not_bwd(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                    rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]) -> str | None:
        why, n = _common(input, normalized_shape, weight, devices, dsl, limits, limits.max_n_bwd)
        if why is not None:
            return why
        if grad_out.shape != input.shape or grad_out.dtype != input.dtype or not grad_out.is_contiguous() \
                or grad_out.data_ptr() % ALIGN:
            return "grad_out differs from input in shape/dtype, or is not contiguous and aligned"
        if rstd.dtype != torch.float32 or rstd.numel() != input.numel() // n or not rstd.is_contiguous():
            return "rstd is not a contiguous fp32 tensor with one value per row"
        if tuning.ATEN_FASTER and tuning.aten_faster(
                _arch(input.device), dsl, "bwd", str(input.dtype).removeprefix("torch."), input.numel() // n, n):
            return "tuning.ATEN_FASTER lists this shape: ATen is faster"
        return None

    def fwd(*args, **kwargs) -> bool:
        return why_not_fwd(*args, **kwargs) is None

    def bwd(*args, **kwargs) -> bool:
        return why_not_bwd(*args, **kwargs) is None

    fwd.why_not = why_not_fwd  # type: ignore[attr-defined]
    bwd.why_not = why_not_bwd  # type: ignore[attr-defined]
    return fwd, bwd
