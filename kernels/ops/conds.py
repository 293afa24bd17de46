"""Pieces every op's ``cond`` shares: vendor of the device, arch name, dtypes, alignment, reasons.

A ``cond`` runs on every call of its ATen op, so the checks here are cheap and
ordered cheapest first; each returns a short reason key (formatted into a
sentence only by ``why_not``, for :func:`accel.kernels.explain`). Works on
meta and fake tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from accel.kernels.dsl.launch import arch, kernel_limits
from accel.kernels.dsl.triton_configs import for_wave
from accel.kernels.tuning import table

__all__ = ["ALIGN", "DTYPES", "Limits", "arch", "device_reason", "device_types_for", "entry_reason",
           "table_declines", "table_reason", "floors", "tuned_config"]

#: dtypes the kernels compute (fp32 accumulation for all).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Row and base-pointer alignment the kernels' vector loads need, bytes.
ALIGN = 16


class Limits:
    """Shape bounds of one DSL's kernels for one op (rows ``N`` held in registers, etc.).

    Args:
        max_n_fwd: longest row the forward takes (elements).
        max_n_bwd: longest row the backward takes (elements).
        needs_weight: the kernels need the affine weight (and bias, for LayerNorm).
        max_numel: most elements (Helion's generated code indexes with int32).
    """

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


#: Reason sentences for the keys :func:`device_reason` returns.
DEVICE_REASONS = {
    "device": "device type {device!r} not served (registered for {devices})",
    "rocm": "ROCm build: the {dsl} kernels are registered for NVIDIA only (accel.kernels.core.spec.DSL_BACKENDS)",
    "not_rocm": "not a ROCm build",
    "dtype": "dtype {dtype} not in fp32/bf16/fp16",
}


def device_reason(input: torch.Tensor, devices: dict[str, str | None]) -> str | None:
    """``None`` when ``input``'s device, vendor and dtype are served; else a key of :data:`DEVICE_REASONS`."""
    if input.is_cuda:
        vendor = devices.get("cuda", "")
        if vendor and (vendor == "nvidia") == bool(torch.version.hip):  # read per call: tests fake ROCm
            return "rocm" if vendor == "nvidia" else "not_rocm"
        if vendor == "":
            return "device"
    elif input.device.type not in devices:
        return "device"
    if input.dtype not in DTYPES:
        return "dtype"
    return None


#: Reason sentences for the keys :func:`rows_reason` returns.
ROW_REASONS = {
    "layout": "input not contiguous",
    "align": "input or its rows not {align}-byte aligned (N={n}, {esize}-byte elements)",
    "long_row": "N={n} > {max_n} (row bound of the {dsl} kernel)",
    "empty": "empty input or rows",
}


def rows_reason(input: torch.Tensor, n: int, max_n: int, *, align: bool = True) -> str | None:
    """``None`` when ``input`` (rows of ``n``) is contiguous, aligned and ``n <= max_n``; else a :data:`ROW_REASONS` key."""
    if n < 1 or input.numel() == 0:
        return "empty"
    if not input.is_contiguous():
        return "layout"
    if align and (input.data_ptr() % ALIGN or (n * input.element_size()) % ALIGN):
        return "align"
    if n > max_n:
        return "long_row"
    return None


def reason_text(key: str, *, input: torch.Tensor, devices: dict[str, str | None], dsl: str, n: int,
                max_n: int, extra: dict[str, str] | None = None) -> str:
    """The sentence for a reason key of :func:`device_reason`, :func:`rows_reason` or ``extra``."""
    template = {**DEVICE_REASONS, **ROW_REASONS, **(extra or {})}.get(key, key)
    return template.format(device=input.device.type, devices=", ".join(devices), dtype=input.dtype, align=ALIGN,
                           n=n, esize=input.element_size(), max_n=max_n, dsl=dsl)


def key_text(key: str | None, t: torch.Tensor, op: str, dsl: str, devices: dict[str, str | None],
             reasons: dict[str, str]) -> str | None:
    """The sentence for reason key ``key`` of a cond over ``t`` (``None`` for ``None``): the tuning table's
    words for ``"table"``, else ``reasons[key]`` formatted with the DSL, device, backends and dtype."""
    if key is None:
        return None
    if key == "table":
        return table_reason(op, dsl, t, t.shape[-1] if t.dim() else 0)
    return reasons[key].format(dsl=dsl, device=t.device.type, devices=", ".join(devices), dtype=t.dtype)


def table_declines(op: str, dsl: str, t: torch.Tensor, numel: int, n: int) -> bool:
    """Whether the tuning table sends ``t`` (``numel`` elements in rows of ``n``) away from ``dsl``'s kernel.

    Reason key ``"table"``; :func:`table_reason` gives its sentence.
    """
    return n <= 0 or not table.takes(op, dsl, arch(t.device), table.dtype_name(t.dtype), numel // n, n)


def table_reason(op: str, dsl: str, t: torch.Tensor, n: int) -> str:
    """The sentence for reason key ``"table"`` (what :func:`accel.kernels.table.route` says)."""
    if n <= 0:
        return "empty rows (N=0)"
    dtype = table.dtype_name(t.dtype)
    if dtype not in table.DTYPE_NAMES:  # no table can hold it: say the dtype, not "run accel bench --tune"
        return DEVICE_REASONS["dtype"].format(dtype=t.dtype)
    return table.route(op, dsl, arch(t.device), dtype, t.numel() // n, n) or "tuning table"


def entry_reason(input: torch.Tensor, numel: int, op: str, dsl: str, devices: dict[str, str | None],
                 max_numel: int) -> str | None:
    """The checks every cond starts with, cheapest first: the tuning floor (small inputs: one compare,
    key ``"table"``), the element bound (``"numel_big"``), then device, vendor and dtype
    (:func:`device_reason`). ``None`` when all pass."""
    if numel < table.floor(op, dsl):
        return "table"
    if numel > max_numel:
        return "numel_big"
    return device_reason(input, devices)


def floors(fwd, bwd, family: str, dsl: str):
    """Give the ``(fwd, bwd)`` conds of ``family`` their ``floor`` and ``cacheable`` attributes and return them.

    ``cacheable = True``: the built-in conds read only what :func:`accel.kernels.core.plans.signature`
    keys by (dtypes, devices, shapes, strides, 16-byte alignment, the other arguments' values) and
    the tuning tables, so the registry asks each once per signature (:mod:`accel.kernels.core.plans`).

    ``cond.floor()`` is :func:`accel.kernels.table.floor` for the op and DSL: the size below
    which the cond declines (:func:`entry_reason`'s first check, on the same element count as
    the op's first tensor argument). accel's router uses it to send small calls to ATen with one
    compare for all overrides of the op (:func:`accel.kernels.core.router._floor_gate`).
    """
    fwd.floor = functools.partial(table.floor, f"{family}_fwd", dsl)
    bwd.floor = functools.partial(table.floor, f"{family}_bwd", dsl)
    fwd.cacheable = bwd.cacheable = True
    return fwd, bwd


def tuned_config(op: str, dsl: str, t: torch.Tensor, m: int, n: int, default: Any) -> Any:
    """The tuning table's kernel config of ``dsl`` for ``op`` on ``t``'s arch and dtype at ``[m, n]``
    (:func:`accel.kernels.table.config`), else ``default``: a config, or a callable of ``n``
    returning one (called only on a miss), adapted to the device's wave size
    (:func:`accel.kernels.dsl.triton_configs.for_wave`: half the warps on AMD CDNA's wave64, as is on
    wave32 devices). One O(1) lookup; the impls call it per launch."""
    cfg = table.config(op, dsl, arch(t.device), table.dtype_name(t.dtype), m, n)
    if cfg is not None:
        return cfg
    cfg = default(n) if callable(default) else default
    wave = kernel_limits(t.device).wave_size
    return for_wave(cfg, wave) if wave > 32 else cfg
