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
from typing import Any

import torch

# formats and native support are in _quant_formats, quantize / dequantize in _quantize; scaled_mm is here
from accel import _quant_formats
from accel._options import check_choice
from accel._quant_formats import FP8_FLAVOUR as _FP8_FLAVOUR
from accel._quant_formats import Format as _Format
from accel._quant_formats import Support, fp8_dtype, native_formats, native_support
from accel._quant_formats import backend_for as _backend_for
from accel._quantize import NONFINITE, Quantized, dequantize, quantize  # noqa: F401 - NONFINITE: public here too
from accel._quantize import check_scale as _check_scale
from accel._quantize import check_tensor as _check_tensor
from accel._quantize import pack_e2m1 as _pack_e2m1  # noqa: F401 - read as accel.quant._pack_e2m1 by its tests
from accel._quantize import unpack_e2m1 as _unpack_e2m1  # noqa: F401 - read as accel.quant._unpack_e2m1 by its tests
from accel.errors import QuantizationError, UnsupportedFormatError

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

#: The formats :func:`quantize` knows, by name (facts of the OCP MX v1.0 spec and NVIDIA's NVFP4).
FORMATS: dict[str, _Format] = _quant_formats.FORMATS  # the one dict, documented here where it is public


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
