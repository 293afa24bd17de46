"""Low-precision GEMM behind one call: fp8, MXFP8, MXFP4 and NVFP4 on every vendor.

:func:`quantize` turns a float tensor into one of the formats below;
:func:`scaled_mm` multiplies two quantized matrices, natively where the device and
the running torch support the format (``torch._scaled_mm`` for fp8,
``torch.nn.functional.scaled_mm`` for the block-scaled formats), else it raises
:class:`~accel.errors.UnsupportedFormatError`, or, with ``fallback="reference"``,
runs the documented reference: dequantize both operands to float32, ``matmul`` in
float32, cast to ``out_dtype``.

Formats (``format`` argument of :func:`quantize`):

============== ============ ===================== ============================== ================
name           element      scale                 granularity                    native on
============== ============ ===================== ============================== ================
``fp8_e4m3``   e4m3 [1]_    float32               tensor or row (``dim``)        ``capabilities().fp8``
``fp8_e5m2``   e5m2 [1]_    float32               tensor or row (``dim``)        ``capabilities().fp8``
``mxfp8``      e4m3fn       e8m0 (power of two)   block of 32 along ``dim``      ``.mxfp8`` (Blackwell, gfx950, XPU)
``mxfp4``      e2m1 (x2)    e8m0 (power of two)   block of 32 along ``dim``      ``.mxfp4`` (Blackwell, gfx950, XPU)
``nvfp4``      e2m1 (x2)    e4m3fn + fp32 global  block of 16 along ``dim``      ``.nvfp4`` (Blackwell)
============== ============ ===================== ============================== ================

.. [1] The device's fp8 flavour: OCP ``float8_e4m3fn``/``float8_e5m2``, or
   ``float8_e4m3fnuz``/``float8_e5m2fnuz`` on AMD gfx942 (MI300). A torch fp8 dtype
   may be passed instead of the name to force one.

Conventions: ``dim`` is the contraction dimension, along which one scale is shared.
For ``A @ B`` with ``A`` ``[M, K]`` and ``B`` ``[K, N]``: ``quantize(A, f)`` (``dim=-1``)
and ``quantize(B, f, dim=0)``. Scales keep the data's rank: row-wise ``A`` -> ``[M, 1]``,
``B`` -> ``[1, N]``; block-scaled ``A`` -> ``[M, K / block]``, ``B`` -> ``[K / block, N]``.
``B`` comes back column-major, as ``torch._scaled_mm`` wants it. fp4 data packs two
values per byte along ``dim`` (element ``2i`` in the low nibble, as cuBLAS and torch
tests do), so ``A`` ``[M, K]`` -> ``[M, K / 2]``. Scales are *dequantization*
scales: ``x ≈ data * scale``.

Rounding: fp8 by torch's cast (round to nearest even, saturated to the largest
finite value); e2m1 to nearest, ties to even. MX block scales are
``2 ** ceil(log2(amax / max_element))``, rounded *up* (as NVIDIA's MXFP8 recipe and
torch's ``to_mxfp`` "rceil" do) so no element saturates. NVFP4 follows NVIDIA's
two-level recipe: global ``amax / (448 * 6)``, block scale ``amax_block / 6 / global``
in e4m3.

Non-finite input: :func:`quantize` refuses ``inf`` and ``NaN`` with
:class:`~accel.errors.NonFiniteInputError` (a scale read from them is ``inf`` or ``NaN``);
``quantize(..., nonfinite="saturate")`` stores ``±inf`` as the format's largest magnitude
instead, with scales read from the finite values (``NaN`` is refused either way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from accel import _compat
from accel._options import check_choice, did_you_mean
from accel.errors import NonFiniteInputError, QuantizationError, UnsupportedFormatError

__all__ = [
    "FORMATS",
    "Quantized",
    "Support",
    "dequantize",
    "fp8_dtype",
    "native_formats",
    "native_support",
    "quantize",
    "reference_mm",
    "scaled_mm",
    "to_blocked",
]


@dataclass(frozen=True)
class _Format:
    name: str
    capability: str  # the Capabilities field that says "native"
    block: int | None  # elements per scale along dim; None: tensor / row
    element: str  # "fp8" or "e2m1"
    scale: str  # "float32", "e8m0", "e4m3+fp32"


#: The formats :func:`quantize` knows, by name (facts of the OCP MX v1.0 spec and NVIDIA's NVFP4).
FORMATS: dict[str, _Format] = {
    "fp8_e4m3": _Format("fp8_e4m3", "fp8", None, "fp8", "float32"),
    "fp8_e5m2": _Format("fp8_e5m2", "fp8", None, "fp8", "float32"),
    "mxfp8": _Format("mxfp8", "mxfp8", 32, "fp8", "e8m0"),
    "mxfp4": _Format("mxfp4", "mxfp4", 32, "e2m1", "e8m0"),
    "nvfp4": _Format("nvfp4", "nvfp4", 16, "e2m1", "e4m3+fp32"),
}

_FP8_NAMES = {
    "ocp": {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"},
    "fnuz": {"e4m3": "float8_e4m3fnuz", "e5m2": "float8_e5m2fnuz"},
}
_FP8_FLAVOUR = {name: flavour for flavour, d in _FP8_NAMES.items() for name in d.values()}

#: e2m1 magnitudes by 3-bit code (OCP MX v1.0, section 5.3.3) and the midpoints between them.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MID = tuple((a + b) / 2 for a, b in zip(_E2M1, _E2M1[1:]))
_E2M1_MAX = 6.0
_E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


class Support(NamedTuple):
    """Whether a format runs natively on a device, and why (one line)."""

    native: bool
    reason: str


@dataclass(frozen=True)
class Quantized:
    """A quantized tensor: pass ``data`` and ``scale`` to :func:`scaled_mm`.

    Attributes:
        data: the low-precision values (fp8 dtype, or ``torch.float4_e2m1fn_x2`` packed
            two per byte along ``dim``).
        scale: dequantization scale(s): a float32 / e8m0 tensor, or for NVFP4 the pair
            ``(block scales in float8_e4m3fn, global float32 scalar)``.
        format: the format name (``"fp8_e4m3"``, ``"mxfp8"``, ...).
        dim: the dimension the scales are shared along (non-negative).
        dtype: the dtype of the tensor that was quantized.
    """

    data: torch.Tensor
    scale: Any
    format: str
    dim: int
    dtype: torch.dtype

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The values ``data * scale`` in ``dtype`` (see :func:`dequantize`)."""
        return dequantize(self.data, self.scale, dim=self.dim, dtype=dtype)


# -- device support --------------------------------------------------------------------
def _backend_for(device: Any) -> Any:
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
    flavour = _backend_for(device).capabilities(_index(device)).fp8 or "ocp"
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
    fmt, dtype = _resolve_format(format)
    b = _backend_for(device)
    idx = _index(device)
    caps = b.capabilities(idx)
    where = f"{b.name} {b.arch(idx)}"
    if fmt.capability == "fp8":
        if caps.fp8 is None:
            return Support(False, f"{where} has no fp8 GEMM")
        want = _FP8_FLAVOUR[str(dtype).removeprefix("torch.")] if dtype is not None else caps.fp8
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


def _resolve_format(format: str | torch.dtype) -> tuple[_Format, torch.dtype | None]:  # noqa: A002
    if isinstance(format, torch.dtype):
        name = str(format).removeprefix("torch.")
        if name not in _FP8_FLAVOUR:
            raise QuantizationError(
                f"quantize: dtype {format} is not an fp8 dtype. Pass one of "
                f"{sorted(_FP8_FLAVOUR)} or a format name: {', '.join(FORMATS)}."
            )
        return FORMATS["fp8_e5m2" if "e5m2" in name else "fp8_e4m3"], format
    if not isinstance(format, str) or format not in FORMATS:
        raise QuantizationError(f"quantize: unknown format {format!r}.{did_you_mean(format, FORMATS)} Valid: "
                                f"{', '.join(FORMATS)} or a torch fp8 dtype.")
    return FORMATS[format], None


# -- quantize / dequantize --------------------------------------------------------------
#: What :func:`quantize` does with ``inf`` / ``NaN`` in its input (``nonfinite=``).
NONFINITE = ("error", "saturate")


def quantize(x: torch.Tensor, format: str | torch.dtype, *, granularity: str | None = None,  # noqa: A002
             dim: int = -1, nonfinite: str = "error") -> Quantized:
    """Quantize ``x`` to ``format`` with scales shared along ``dim`` (the contraction dim).

    Args:
        x: a floating tensor, any shape with at least one dim.
        format: ``"fp8_e4m3"``, ``"fp8_e5m2"`` (the device's flavour, from ``x.device``),
            a torch fp8 dtype, ``"mxfp8"``, ``"mxfp4"`` or ``"nvfp4"``.
        granularity: fp8 only: ``"tensor"`` (default, one scale) or ``"row"`` (one
            scale per slice along ``dim``). Block formats are always ``"block"``.
        dim: the dimension scales are shared along (an int in ``-x.dim() .. x.dim() - 1``);
            ``x.shape[dim]`` must be a multiple of the block (32 MX, 16 NVFP4).
        nonfinite: what to do with ``inf`` / ``NaN`` in ``x``. ``"error"`` (default): raise
            :class:`~accel.errors.NonFiniteInputError` (a scale computed from them would be ``inf``,
            making every value dequantize to NaN, or would skip the NaN and clip the rest).
            ``"saturate"``: scales come from the finite values only and ``±inf`` is stored as the
            format's largest magnitude of its sign (a saturating cast: it dequantizes to the largest
            value its scale represents); ``NaN`` is refused in both modes (it has no value to saturate to).

    Returns:
        :class:`Quantized`. ``data`` has ``x``'s shape (``dim`` halved for fp4).

    Raises:
        NonFiniteInputError: (a ``QuantizationError``) ``x`` holds ``NaN``, or ``inf`` with
            ``nonfinite="error"``; nothing was quantized.
        QuantizationError: unknown format, granularity or ``nonfinite``, non-floating ``x``,
            ``dim`` not a dimension of ``x``, or ``x.shape[dim]`` not a multiple of the block.
        UnsupportedFormatError: the running torch lacks the dtype the format needs.

    .. note:: Checking for non-finite values reads one flag back from the device (a host sync).

    Example:
        >>> import torch, accel.quant
        >>> q = accel.quant.quantize(torch.tensor([[1.0, -2.0], [0.5, 4.0]]), "fp8_e4m3", granularity="row")
        >>> q.data.dtype, q.scale.shape, q.dequantize().tolist()
        (torch.float8_e4m3fn, torch.Size([2, 1]), [[1.0, -2.0], [0.5, 4.0]])
    """
    fmt, dtype = _resolve_format(format)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise QuantizationError(
            f"quantize: got {type(x).__name__} {getattr(x, 'dtype', '')} with shape {tuple(getattr(x, 'shape', ()))}. "
            "Quantize a floating tensor with at least one dimension."
        )
    check_choice(nonfinite, NONFINITE, what="quantize: nonfinite", error=QuantizationError,
                 fix="'error' refuses inf/NaN input; 'saturate' stores ±inf as the format's largest magnitude.")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise QuantizationError(
            f"quantize: dim={dim!r} ({type(dim).__name__}) is not a dimension of x (shape {tuple(x.shape)}). "
            f"Pass an int in {-x.dim()}..{x.dim() - 1}: the contraction dimension (-1 for a, 0 for b of a matmul)."
        )
    d = dim % x.dim()
    size = x.shape[d]
    if fmt.block is None:
        granularity = "tensor" if granularity is None else granularity
        if granularity not in ("tensor", "row"):
            raise QuantizationError(f"quantize: granularity {granularity!r} for {fmt.name}."
                                    f"{did_you_mean(granularity, ('tensor', 'row'))} Valid: 'tensor', 'row' "
                                    "(unset: 'tensor').")
    elif granularity not in (None, "block"):
        raise QuantizationError(f"quantize: granularity {granularity!r} for {fmt.name}, which is block-scaled "
                                f"(block {fmt.block}). Leave granularity unset (or pass 'block').")
    elif size % fmt.block:
        raise QuantizationError(
            f"quantize: {fmt.name} needs x.shape[{dim}] to be a multiple of {fmt.block}: got {size} "
            f"(shape {tuple(x.shape)}). Pad that dimension to a multiple of {fmt.block}."
        )
    _require_dtypes(fmt)
    xt = x.detach().movedim(d, -1).to(torch.float32).contiguous()
    xs = _finite_part(x, xt, fmt.name if dtype is None else str(dtype), nonfinite)  # what the scales are read from
    if fmt.block is None:
        dtype = dtype or fp8_dtype(fmt.name.removeprefix("fp8_"), x.device)
        data, scale = _quantize_fp8(xt, xs, dtype, granularity)
    elif fmt.name == "nvfp4":
        data, scale = _quantize_nvfp4(xt, xs)
    else:
        data, scale = _quantize_mx(xt, xs, fmt)
    data = data.contiguous().movedim(-1, d)
    if isinstance(scale, tuple):
        scale = (scale[0].movedim(-1, d), scale[1])
    elif scale.dim():
        scale = scale.movedim(-1, d)
    return Quantized(data, scale, fmt.name, d, x.dtype)


def _require_dtypes(fmt: _Format) -> None:
    need = {"e8m0": ["float8_e8m0fnu"], "e4m3+fp32": ["float8_e4m3fn"]}.get(fmt.scale, [])
    if fmt.element == "e2m1":
        need.append("float4_e2m1fn_x2")
    missing = [n for n in need if not _compat.has_dtype(n)]
    if missing:
        raise UnsupportedFormatError(
            f"quantize: {fmt.name} needs torch.{', torch.'.join(missing)}, which torch {torch.__version__} lacks. "
            "Upgrade torch, or use an fp8 format."
        )


def _finite_part(x: torch.Tensor, xt: torch.Tensor, name: str, nonfinite: str) -> torch.Tensor:
    """``xt`` itself when it is all finite, else ``xt`` with ``±inf`` as 0 (``nonfinite="saturate"``: the scales
    are read from the finite values). Raises :class:`NonFiniteInputError` for NaN, and for inf unless saturating."""
    if xt.numel() == 0 or bool(torch.isfinite(xt.abs().amax())):  # amax is NaN with any NaN, inf with any inf
        return xt
    nan, inf = torch.isnan(xt), torch.isinf(xt)
    n_nan, n_inf = int(nan.sum()), int(inf.sum())
    if n_nan == 0 and nonfinite == "saturate":
        return torch.where(inf, torch.zeros_like(xt), xt)
    bad = torch.nonzero(torch.isnan(x) | torch.isinf(x))[0].tolist()
    first = x.detach()[tuple(bad)].item()
    counted = ", ".join(f"{n} {what}" for n, what in ((n_nan, "NaN"), (n_inf, "inf")) if n)
    fix = ("Pass finite values (and ±inf only with nonfinite='saturate'). NaN has no value to saturate to, so "
           "it is refused in both modes: find where it came from (torch.isnan) or replace it (torch.nan_to_num) "
           "before quantizing." if n_nan else
           "Pass finite values, or nonfinite='saturate' to store ±inf as the format's largest magnitude.")
    raise NonFiniteInputError(
        f"quantize({name}): x (shape {tuple(x.shape)}, {x.dtype}) holds {counted} of {x.numel()} values "
        f"(first at index {tuple(bad)}: {first}). A scale read from them is inf or NaN: every value would "
        f"dequantize to NaN, or the NaN would be skipped and the rest clipped. Nothing was quantized. {fix}"
    )


def _quantize_fp8(xt: torch.Tensor, xs: torch.Tensor, dtype: torch.dtype,
                  granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    fmax = torch.finfo(dtype).max
    amax = xs.abs().amax() if granularity == "tensor" else xs.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / fmax, torch.ones_like(amax)).to(torch.float32)
    data = (xt / scale).clamp(-fmax, fmax).to(dtype)
    return data, scale.reshape(()) if granularity == "tensor" else scale


def _blocks(xt: torch.Tensor, block: int) -> torch.Tensor:
    return xt.reshape(*xt.shape[:-1], xt.shape[-1] // block, block)


def _quantize_mx(xt: torch.Tensor, xs: torch.Tensor, fmt: _Format) -> tuple[torch.Tensor, torch.Tensor]:
    emax = _E4M3_MAX if fmt.element == "fp8" else _E2M1_MAX
    xb = _blocks(xt, fmt.block)
    amax = _blocks(xs, fmt.block).abs().amax(dim=-1, keepdim=True)
    mant, exp = torch.frexp(amax / emax)  # ratio = mant * 2**exp, mant in [0.5, 1)
    exp = torch.where(mant == 0.5, exp - 1, exp)  # exact powers of two need no rounding up
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127)).clamp(-127, 127)
    scale32 = torch.ldexp(torch.ones_like(amax), exp)
    q = (xb / scale32).clamp(-emax, emax).reshape(xt.shape)
    data = q.to(torch.float8_e4m3fn) if fmt.element == "fp8" else _pack_e2m1(q)
    scale = (exp + 127).to(torch.uint8).squeeze(-1).view(torch.float8_e8m0fnu)
    return data, scale


def _quantize_nvfp4(xt: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    amax_t = xs.abs().amax()
    glob = torch.where(amax_t > 0, amax_t / (_E4M3_MAX * _E2M1_MAX), torch.ones_like(amax_t)).to(torch.float32)
    xb = _blocks(xt, 16)
    amax_b = _blocks(xs, 16).abs().amax(dim=-1, keepdim=True)
    block = (amax_b / _E2M1_MAX / glob).clamp(max=_E4M3_MAX).to(torch.float8_e4m3fn)
    eff = block.to(torch.float32) * glob
    # a block whose scale is 0 holds zeros, or (saturating) ±inf among zeros: those take the largest code
    empty = torch.where(torch.isinf(xb), torch.copysign(torch.full_like(xb, _E2M1_MAX), xb), torch.zeros_like(xb))
    q = torch.where(eff > 0, xb / torch.where(eff > 0, eff, torch.ones_like(eff)), empty)
    data = _pack_e2m1(q.clamp(-_E2M1_MAX, _E2M1_MAX).reshape(xt.shape))
    return data, (block.squeeze(-1), glob)


def _pack_e2m1(q: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., K]`` (already scaled into [-6, 6]) -> ``float4_e2m1fn_x2`` ``[..., K/2]``."""
    mag = q.abs().contiguous()
    mids = torch.tensor(_E2M1_MID, dtype=torch.float32, device=q.device)
    idx = torch.bucketize(mag, mids)  # ties land on the lower code
    tie = (idx < len(_E2M1_MID)) & (mag == mids[idx.clamp(max=len(_E2M1_MID) - 1)])
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)  # ties to even code
    code = (idx | torch.where(q < 0, 8, 0)).to(torch.uint8)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed.contiguous().view(torch.float4_e2m1fn_x2)


def _unpack_e2m1(data: torch.Tensor) -> torch.Tensor:
    """``float4_e2m1fn_x2`` ``[..., K/2]`` (packed along the last dim) -> float32 ``[..., K]``."""
    raw = data.contiguous().view(torch.uint8)
    code = torch.stack((raw & 0xF, raw >> 4), dim=-1).reshape(*raw.shape[:-1], raw.shape[-1] * 2).long()
    table = torch.tensor(_E2M1, dtype=torch.float32, device=data.device)
    return table[code & 7] * torch.where(code >= 8, -1.0, 1.0)


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def _check_tensor(value: Any, fn: str, name: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise QuantizationError(f"{fn}: {name} is {_shown(value)}, not a tensor. Pass the tensor accel.quant.quantize "
                                "returned (Quantized.data / Quantized.scale).")


def _check_scale(scale: Any, fn: str, name: str) -> None:
    """A scale is a tensor, or the NVFP4 ``(block scale, global scale)`` pair of tensors."""
    if isinstance(scale, torch.Tensor):
        return
    if isinstance(scale, (tuple, list)) and len(scale) == 2 and all(isinstance(s, torch.Tensor) for s in scale):
        return
    raise QuantizationError(
        f"{fn}: {name} is {_shown(scale)}, not a tensor or a (block scale, global scale) pair of tensors. Pass "
        "the Quantized.scale accel.quant.quantize returned."
    )


def dequantize(data: torch.Tensor, scale: Any, *, dim: int = -1, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``data * scale`` in ``dtype``: the inverse of :func:`quantize` (up to rounding).

    Args:
        data: quantized values (fp8 dtype or ``float4_e2m1fn_x2``).
        scale: float32 (tensor / row), e8m0 (MX, block 32) or ``(e4m3, float32)`` (NVFP4, block 16).
        dim: the dimension the scales are shared along.
        dtype: result dtype.

    Returns:
        The dequantized tensor (``dim`` doubled back for fp4).

    Raises:
        QuantizationError: ``data`` / ``scale`` are not tensors, their dtypes or shapes
            do not form a format, or ``dim`` is not a dimension of ``data``.
    """
    _check_tensor(data, "dequantize", "data")
    _check_scale(scale, "dequantize", "scale")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise QuantizationError(f"dequantize: dim={dim!r} ({type(dim).__name__}) is not an int. Pass the dim "
                                "quantize was given (-1 by default; 0 for the b operand of a matmul).")
    if not -data.dim() <= dim < data.dim():
        raise QuantizationError(f"dequantize: dim={dim} is out of range for data of {data.dim()} dimension(s) "
                                f"(shape {tuple(data.shape)}). Pass a dim in {-data.dim()}..{data.dim() - 1}, the one "
                                "quantize was given.")
    d = dim % data.dim()
    vt = data.movedim(d, -1)
    if data.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        vals = _unpack_e2m1(vt)
    elif str(data.dtype).removeprefix("torch.") in _FP8_FLAVOUR:
        vals = vt.to(torch.float32)
    else:
        raise QuantizationError(f"dequantize: data dtype {data.dtype} is not a quantized dtype. "
                                "Pass the data of a Quantized (fp8 or float4_e2m1fn_x2).")
    if isinstance(scale, (tuple, list)):
        block_scale, glob = scale
        s = block_scale.movedim(d, -1).to(torch.float32) * glob.to(torch.float32)
    elif scale.dim() == 0 or scale.numel() == 1:
        return (vals * scale.to(torch.float32).reshape(())).movedim(-1, d).to(dtype)
    else:
        s = scale.movedim(d, -1).to(torch.float32)
    k, nblocks = vals.shape[-1], s.shape[-1]
    if nblocks == 0 or k % nblocks or s.shape[:-1] != vals.shape[:-1]:
        raise QuantizationError(
            f"dequantize: scale shape {tuple(scale.shape) if not isinstance(scale, (tuple, list)) else tuple(scale[0].shape)} "
            f"does not tile data of {k} values along dim {dim} (shape {tuple(data.shape)}). Pass the scale "
            "quantize returned with this data."
        )
    out = vals.reshape(*vals.shape[:-1], nblocks, k // nblocks) * s.unsqueeze(-1)
    return out.reshape(vals.shape).movedim(-1, d).to(dtype)


# -- scaled_mm -------------------------------------------------------------------------
def _detect(a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any) -> tuple[str, str]:
    """``(format name, granularity)`` of a scaled_mm call, from the dtypes and scale shapes."""
    for value, name in ((a, "a"), (b, "b")):
        _check_tensor(value, "scaled_mm", name)
    for value, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        _check_scale(value, "scaled_mm", name)
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    fp8_names = _FP8_FLAVOUR
    sa_dtype = scale_a[0].dtype if isinstance(scale_a, (tuple, list)) else scale_a.dtype
    if a.dtype != b.dtype:
        if not (str(a.dtype).removeprefix("torch.") in fp8_names and str(b.dtype).removeprefix("torch.") in fp8_names):
            raise QuantizationError(f"scaled_mm: a is {a.dtype} but b is {b.dtype}. Quantize both to one format.")
    if a.dim() != 2 or b.dim() != 2:
        raise QuantizationError(f"scaled_mm: a and b must be 2-D [M, K] and [K, N]: got {tuple(a.shape)} and "
                                f"{tuple(b.shape)}. Reshape (batch dims into M) before calling.")
    if a.shape[1] != b.shape[0]:
        raise QuantizationError(f"scaled_mm: inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}. "
                                "a must be [M, K] and b [K, N] (quantize b with dim=0).")
    if a.dtype == fp4:
        if isinstance(scale_a, (tuple, list)) or sa_dtype == torch.float8_e4m3fn:
            return "nvfp4", "block"
        if sa_dtype == e8m0:
            return "mxfp4", "block"
    elif str(a.dtype).removeprefix("torch.") in fp8_names:
        if sa_dtype == e8m0:
            return "mxfp8", "block"
        if sa_dtype == torch.float32 and isinstance(scale_b, torch.Tensor) and scale_b.dtype == torch.float32:
            name = "fp8_e5m2" if "e5m2" in str(a.dtype) else "fp8_e4m3"
            if scale_a.numel() == 1 and scale_b.numel() == 1:
                return name, "tensor"
            m, n = a.shape[0], b.shape[1]
            if tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
                return name, "row"
            raise QuantizationError(
                f"scaled_mm: fp8 scales of shapes {tuple(scale_a.shape)} and {tuple(scale_b.shape)} for a "
                f"{tuple(a.shape)} and b {tuple(b.shape)}. Tensor-wise scales have one element; row-wise are "
                f"[M, 1] = [{m}, 1] and [1, N] = [1, {n}]. Use the scales quantize returned (b with dim=0)."
            )
    raise QuantizationError(
        f"scaled_mm: a {a.dtype} with scale {sa_dtype} is not a known format. Pass data and scale from "
        f"accel.quant.quantize ({', '.join(FORMATS)})."
    )


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any, *,
              out_dtype: torch.dtype = torch.bfloat16, fallback: str = "error") -> torch.Tensor:
    """``(a * scale_a) @ (b * scale_b)`` in ``out_dtype``, natively where the device has the format.

    Args:
        a: ``[M, K]`` quantized (``[M, K/2]`` for fp4), from ``quantize(A, f)``.
        b: ``[K, N]`` quantized (``[K/2, N]`` for fp4), from ``quantize(B, f, dim=0)``;
            made column-major (a copy) if it is not.
        scale_a, scale_b: the matching ``Quantized.scale``.
        out_dtype: result dtype (``torch.bfloat16``, ``torch.float16``, ``torch.float32``).
        fallback: ``"error"`` (default): a format the device or torch lacks raises;
            ``"reference"``: run the reference instead: dequantize both to float32,
            ``torch.matmul`` in float32, cast to ``out_dtype`` (slow; for checking
            and for CPUs).

    Returns:
        ``[M, N]`` tensor of ``out_dtype`` on ``a.device``.

    Raises:
        UnsupportedFormatError: (a ``NotImplementedError``) the format is not native on
            ``a.device`` and ``fallback="error"``; the message says why.
        QuantizationError: (a ``ValueError``) shapes, dtypes or scales that do not form
            a format, or an unknown ``fallback``.

    Example:
        >>> import torch, accel.quant as q
        >>> A, B = torch.randn(32, 64), torch.randn(64, 16)
        >>> qa, qb = q.quantize(A, "mxfp8"), q.quantize(B, "mxfp8", dim=0)
        >>> C = q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32, fallback="reference")
        >>> C.shape, bool(((C - A @ B).abs() <= 0.2 * (A.abs() @ B.abs())).all())
        (torch.Size([32, 16]), True)
    """
    check_choice(fallback, ("error", "reference"), what="scaled_mm: fallback", error=QuantizationError)
    _check_out_dtype(out_dtype, "scaled_mm")
    name, granularity = _detect(a, b, scale_a, scale_b)
    support = native_support(a.dtype if name.startswith("fp8") else name, a.device)
    if support.native:
        return _native(name, a, b, scale_a, scale_b, out_dtype)
    if fallback == "reference":
        return reference_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    raise UnsupportedFormatError(
        f"scaled_mm: {name} ({granularity}) is not native on {a.device}: {support.reason}. "
        f"Pass fallback='reference' to run the dequantize-then-matmul reference, or quantize to a native "
        f"format of this device: {native_formats(a.device) or 'none'}."
    )


def reference_mm(a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any, *,
                 out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The reference of :func:`scaled_mm`: dequantize to float32, ``matmul`` in float32, cast.

    Same arguments as :func:`scaled_mm`. Runs on any device.
    """
    _check_out_dtype(out_dtype, "reference_mm")
    _detect(a, b, scale_a, scale_b)
    return (dequantize(a, scale_a, dim=-1) @ dequantize(b, scale_b, dim=0)).to(out_dtype)


#: The result dtypes :func:`scaled_mm` and :func:`reference_mm` produce.
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_out_dtype(out_dtype: Any, fn: str) -> None:
    if not isinstance(out_dtype, torch.dtype) or out_dtype not in OUT_DTYPES:
        raise QuantizationError(f"{fn}: out_dtype={out_dtype!r} is not a result dtype of a scaled GEMM. Pass one of "
                                f"{', '.join(map(str, OUT_DTYPES))}.")


def _col_major(b: torch.Tensor) -> torch.Tensor:
    return b if b.stride(0) == 1 else b.t().contiguous().t()


def _native(name: str, a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any,
            out_dtype: torch.dtype) -> torch.Tensor:
    a, b = a.contiguous(), _col_major(b)
    if name.startswith("fp8"):
        return torch._scaled_mm(a, b, scale_a.to(torch.float32).contiguous(), scale_b.to(torch.float32).contiguous(),
                                out_dtype=out_dtype)
    import torch.nn.functional as F

    swizzle = getattr(F.SwizzleType, _backend_for(a.device).block_scale_swizzle)
    swizzled = swizzle != F.SwizzleType.NO_SWIZZLE

    def layout(s: torch.Tensor, rows_first: bool) -> torch.Tensor:
        s = s if rows_first else s.t()  # [rows (M or N), K / block]
        return to_blocked(s) if swizzled else s.contiguous()

    if name == "nvfp4":
        recipe = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
        sw = [swizzle, F.SwizzleType.NO_SWIZZLE]
        sa = [layout(scale_a[0], True), scale_a[1].to(torch.float32).reshape(())]
        sb = [layout(scale_b[0], False), scale_b[1].to(torch.float32).reshape(())]
        return F.scaled_mm(a, b, sa, recipe, sb, recipe, swizzle_a=sw, swizzle_b=sw, output_dtype=out_dtype)
    recipe = F.ScalingType.BlockWise1x32
    return F.scaled_mm(a, b, layout(scale_a, True), recipe, layout(scale_b, False), recipe,
                       swizzle_a=swizzle, swizzle_b=swizzle, output_dtype=out_dtype)


def to_blocked(scale: torch.Tensor) -> torch.Tensor:
    """A block-scale matrix ``[rows, cols]`` in cuBLAS's swizzled layout (``SWIZZLE_32_4_4``), flattened.

    cuBLAS wants block scales in 128x4 tiles (rows x scale-columns), padded with
    zeros to whole tiles; inside a tile, entry ``(r, c)`` sits at
    ``(r % 32) * 16 + (r // 32) * 4 + c``; tiles are stored row of tiles by row of
    tiles. Source: cuBLAS docs, "1D Block Scaling Factors Layout"
    (https://docs.nvidia.com/cuda/cublas/#d-block-scaling-factors-layout).

    Args:
        scale: ``[rows, cols]`` scales (e8m0 or e4m3, any 1-byte dtype).

    Returns:
        1-D tensor of ``128 * ceil(rows / 128) * 4 * ceil(cols / 4)`` scales, same dtype.

    Raises:
        QuantizationError: ``scale`` is not a 2-D tensor.
    """
    _check_tensor(scale, "to_blocked", "scale")
    if scale.dim() != 2:
        raise QuantizationError(f"to_blocked: scale has shape {tuple(scale.shape)}; it must be 2-D [rows, cols]. "
                                "Pass one operand's block scales as a matrix.")
    rows, cols = scale.shape
    rt, ct = math.ceil(rows / 128), math.ceil(cols / 4)
    raw = scale.view(torch.uint8) if scale.element_size() == 1 else scale
    padded = torch.zeros((rt * 128, ct * 4), dtype=raw.dtype, device=raw.device)
    padded[:rows, :cols] = raw
    r = torch.arange(rt * 128, device=raw.device).view(-1, 1)
    c = torch.arange(ct * 4, device=raw.device).view(1, -1)
    offset = ((r // 128) * ct + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    out = torch.empty(rt * 128 * ct * 4, dtype=raw.dtype, device=raw.device)
    out[offset.flatten()] = padded.flatten()
    return out.view(scale.dtype) if scale.element_size() == 1 else out
