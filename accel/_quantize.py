"""Quantize and dequantize for :mod:`accel.quant`: float tensors to fp8, MX and NVFP4 data and scales, and back.

Each format's rounding (fp8 by torch's cast, e2m1 to nearest even, MX scales rounded up to a power of
two, NVFP4's two-level scales), the packing of two e2m1 values per byte, the refusal of non-finite input,
and the checks of quantized data and scales that ``scaled_mm`` shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from accel import _compat
from accel._options import check_choice, did_you_mean
from accel._quant_formats import FP8_FLAVOUR, Format, fp8_dtype, resolve_format
from accel.errors import NonFiniteInputError, QuantizationError, UnsupportedFormatError

#: e2m1 magnitudes by 3-bit code (OCP MX v1.0, section 5.3.3) and the midpoints between them.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_MID = tuple((a + b) / 2 for a, b in zip(_E2M1, _E2M1[1:]))
_E2M1_MAX = 6.0
_E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


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
    fmt, dtype = resolve_format(format)
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


def _require_dtypes(fmt: Format) -> None:
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


def _quantize_mx(xt: torch.Tensor, xs: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor]:
    emax = _E4M3_MAX if fmt.element == "fp8" else _E2M1_MAX
    xb = _blocks(xt, fmt.block)
    amax = _blocks(xs, fmt.block).abs().amax(dim=-1, keepdim=True)
    mant, exp = torch.frexp(amax / emax)  # ratio = mant * 2**exp, mant in [0.5, 1)
    exp = torch.where(mant == 0.5, exp - 1, exp)  # exact powers of two need no rounding up
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127)).clamp(-127, 127)
    scale32 = torch.ldexp(torch.ones_like(amax), exp)
    q = (xb / scale32).clamp(-emax, emax).reshape(xt.shape)
    data = q.to(torch.float8_e4m3fn) if fmt.element == "fp8" else pack_e2m1(q)
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
    data = pack_e2m1(q.clamp(-_E2M1_MAX, _E2M1_MAX).reshape(xt.shape))
    return data, (block.squeeze(-1), glob)


def pack_e2m1(q: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., K]`` (already scaled into [-6, 6]) -> ``float4_e2m1fn_x2`` ``[..., K/2]``."""
    mag = q.abs().contiguous()
    mids = torch.tensor(_E2M1_MID, dtype=torch.float32, device=q.device)
    idx = torch.bucketize(mag, mids)  # ties land on the lower code
    tie = (idx < len(_E2M1_MID)) & (mag == mids[idx.clamp(max=len(_E2M1_MID) - 1)])
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)  # ties to even code
    code = (idx | torch.where(q < 0, 8, 0)).to(torch.uint8)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed.contiguous().view(torch.float4_e2m1fn_x2)


def unpack_e2m1(data: torch.Tensor) -> torch.Tensor:
    """``float4_e2m1fn_x2`` ``[..., K/2]`` (packed along the last dim) -> float32 ``[..., K]``."""
    raw = data.contiguous().view(torch.uint8)
    code = torch.stack((raw & 0xF, raw >> 4), dim=-1).reshape(*raw.shape[:-1], raw.shape[-1] * 2).long()
    table = torch.tensor(_E2M1, dtype=torch.float32, device=data.device)
    return table[code & 7] * torch.where(code >= 8, -1.0, 1.0)


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def check_tensor(value: Any, fn: str, name: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise QuantizationError(f"{fn}: {name} is {_shown(value)}, not a tensor. Pass the tensor accel.quant.quantize "
                                "returned (Quantized.data / Quantized.scale).")


def check_scale(scale: Any, fn: str, name: str) -> None:
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
    check_tensor(data, "dequantize", "data")
    check_scale(scale, "dequantize", "scale")
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
        vals = unpack_e2m1(vt)
    elif str(data.dtype).removeprefix("torch.") in FP8_FLAVOUR:
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
