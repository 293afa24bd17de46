"""The formats of :mod:`accel.quant` and where each runs natively: format facts, the device's fp8 flavour.

:data:`FORMATS` holds each format's element, scale and block (facts of the OCP MX v1.0 spec and NVIDIA's
NVFP4); :func:`native_support` decides, from the backend's :class:`~accel.Capabilities` and the running torch,
whether ``scaled_mm`` runs a format natively on a device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from accel import _compat
from accel._options import did_you_mean
from accel.errors import QuantizationError


@dataclass(frozen=True)
class Format:
    name: str
    capability: str  # the Capabilities field that says "native"
    block: int | None  # elements per scale along dim; None: tensor / row
    element: str  # "fp8" or "e2m1"
    scale: str  # "float32", "e8m0", "e4m3+fp32"


#: The formats :func:`quantize` knows, by name (facts of the OCP MX v1.0 spec and NVIDIA's NVFP4).
FORMATS: dict[str, Format] = {
    "fp8_e4m3": Format("fp8_e4m3", "fp8", None, "fp8", "float32"),
    "fp8_e5m2": Format("fp8_e5m2", "fp8", None, "fp8", "float32"),
    "mxfp8": Format("mxfp8", "mxfp8", 32, "fp8", "e8m0"),
    "mxfp4": Format("mxfp4", "mxfp4", 32, "e2m1", "e8m0"),
    "nvfp4": Format("nvfp4", "nvfp4", 16, "e2m1", "e4m3+fp32"),
}

_FP8_NAMES = {
    "ocp": {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"},
    "fnuz": {"e4m3": "float8_e4m3fnuz", "e5m2": "float8_e5m2fnuz"},
}
FP8_FLAVOUR = {name: flavour for flavour, d in _FP8_NAMES.items() for name in d.values()}

class Support(NamedTuple):
    """Whether a format runs natively on a device, and why (one line)."""

    native: bool
    reason: str


# -- device support --------------------------------------------------------------------
def backend_for(device: Any) -> Any:
    from accel._select import backend

    return backend(device)


def fp8_dtype(kind: str = "e4m3", device: Any = None, /) -> torch.dtype:
    """The torch fp8 dtype of ``kind`` (``"e4m3"`` or ``"e5m2"``) in the device's flavour.

    AMD gfx942 computes in the ``fnuz`` flavour (``float8_e4m3fnuz``); every other
    device (and the reference path on CPU) uses OCP (``float8_e4m3fn``).

    Args:
        kind: ``"e4m3"`` or ``"e5m2"``.
        device: a device spec as for :func:`accel.device`; ``None`` = the active one.

    Raises:
        QuantizationError: ``kind`` is neither.

    Example:
        >>> import accel.quant
        >>> accel.quant.fp8_dtype("e4m3", "cpu")
        torch.float8_e4m3fn
    """
    if not isinstance(kind, str) or kind not in ("e4m3", "e5m2"):
        raise QuantizationError(f"fp8_dtype: kind {kind!r} is not an fp8 kind.{did_you_mean(kind, ('e4m3', 'e5m2'))} "
                                "Valid: 'e4m3', 'e5m2'.")
    flavour = backend_for(device).capabilities(_index(device)).fp8 or "ocp"
    return getattr(torch, _FP8_NAMES[flavour][kind])


def _index(device: Any) -> int:
    """The device index ``device`` names (as :func:`accel.device` parses it); 0 when it names none."""
    from accel._select import device as _device

    index = _device(device).index
    return 0 if index is None else index


def native_support(format: str | torch.dtype, device: Any = None, /) -> Support:  # noqa: A002 - the domain's word
    """Whether :func:`scaled_mm` runs ``format`` natively on ``device``, and why.

    Decided by the backend's :class:`~accel.Capabilities` (hardware) and by the
    running torch (``torch._scaled_mm``, ``torch.nn.functional.scaled_mm``, the
    e8m0 / fp4 dtypes).

    Args:
        format: a name of :data:`FORMATS` or a torch fp8 dtype.
        device: a device spec; ``None`` = the active device.

    Returns:
        :class:`Support` ``(native, reason)``.

    Raises:
        QuantizationError: unknown format.

    Example:
        >>> import accel.quant
        >>> accel.quant.native_support("mxfp8", "cpu").native
        False
    """
    fmt, dtype = resolve_format(format)
    b = backend_for(device)
    idx = _index(device)
    caps = b.capabilities(idx)
    where = f"{b.name} {b.arch(idx)}"
    if fmt.capability == "fp8":
        if caps.fp8 is None:
            return Support(False, f"{where} has no fp8 GEMM")
        want = FP8_FLAVOUR[str(dtype).removeprefix("torch.")] if dtype is not None else caps.fp8
        if want != caps.fp8:
            return Support(False, f"{where} computes fp8 in the {caps.fp8!r} flavour, not {want!r} "
                                  f"(quantize with the name {fmt.name!r} to get the device's flavour)")
        if not _compat.has_scaled_mm():
            return Support(False, f"the running torch {torch.__version__} has no torch._scaled_mm")
        return Support(True, f"{where} has fp8 ({caps.fp8}) tensor cores; torch._scaled_mm")
    if not getattr(caps, fmt.capability):
        return Support(False, f"{where} has no {fmt.name} block-scaled GEMM "
                              f"(Capabilities.{fmt.capability} is False)")
    missing = [n for n in ("float8_e8m0fnu", "float4_e2m1fn_x2") if not _compat.has_dtype(n)]
    if missing or not _compat.has_scaled_mm_v2():
        return Support(False, f"the running torch {torch.__version__} lacks "
                              f"{', '.join(missing) or 'torch.nn.functional.scaled_mm'}")
    if b.block_scale_swizzle is None:
        return Support(False, f"accel does not know the {b.name} scale layout for block-scaled GEMM")
    return Support(True, f"{where} has {fmt.name} in hardware; torch.nn.functional.scaled_mm")


def native_formats(device: Any = None, /) -> list[str]:
    """The :data:`FORMATS` names that run natively on ``device`` (``None`` = active)."""
    return [name for name in FORMATS if native_support(name, device).native]


def resolve_format(format: str | torch.dtype) -> tuple[Format, torch.dtype | None]:  # noqa: A002
    if isinstance(format, torch.dtype):
        name = str(format).removeprefix("torch.")
        if name not in FP8_FLAVOUR:
            raise QuantizationError(
                f"quantize: dtype {format} is not an fp8 dtype. Pass one of "
                f"{sorted(FP8_FLAVOUR)} or a format name: {', '.join(FORMATS)}."
            )
        return FORMATS["fp8_e5m2" if "e5m2" in name else "fp8_e4m3"], format
    if not isinstance(format, str) or format not in FORMATS:
        raise QuantizationError(f"quantize: unknown format {format!r}.{did_you_mean(format, FORMATS)} Valid: "
                                f"{', '.join(FORMATS)} or a torch fp8 dtype.")
    return FORMATS[format], None
