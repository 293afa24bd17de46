"""Issue 24 item 6: quantizing non-finite input refuses it with a typed error by default, in every flavour;
``nonfinite="saturate"`` (documented opt-in) stores ±inf as the format's largest magnitude.

Before: ``inf`` gave scale ``inf`` and an all-NaN dequantized result; a ``NaN`` made the scale fall back
to 1.0 and silently clamped 1000 to 448.
"""

from __future__ import annotations

import math

import pytest
import torch

import accel.quant as q
from accel.errors import NonFiniteInputError, QuantizationError

#: every flavour: the four fp8 dtypes (OCP and AMD fnuz), the MX block formats and NVFP4
FLAVOURS = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz,
            "fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp4", "nvfp4"]
GRANULARITIES = {"fp8": ["tensor", "row"], "block": [None]}


def _grans(fmt):
    return GRANULARITIES["block" if fmt in ("mxfp8", "mxfp4", "nvfp4") else "fp8"]


def _x(bad: float) -> torch.Tensor:
    x = torch.linspace(-3.0, 3.0, 64).reshape(2, 32)
    x[0, 5] = 1000.0
    x[1, 7] = bad
    return x


def _ids(v):
    return str(v).removeprefix("torch.")


@pytest.mark.parametrize("fmt", FLAVOURS, ids=_ids)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_non_finite_input_is_refused_by_default(fmt, bad):
    for gran in _grans(fmt):
        with pytest.raises(NonFiniteInputError, match=r"holds 1 (NaN|inf) of 64 values \(first at index \(1, 7\)") as info:
            q.quantize(_x(bad), fmt, granularity=gran)
        assert isinstance(info.value, QuantizationError) and isinstance(info.value, ValueError)
        assert "Nothing was quantized" in str(info.value)


@pytest.mark.parametrize("fmt", FLAVOURS, ids=_ids)
def test_nan_is_refused_when_saturating_too(fmt):
    with pytest.raises(NonFiniteInputError, match="NaN has no value to saturate to"):
        q.quantize(_x(math.nan), fmt, nonfinite="saturate")


@pytest.mark.parametrize("mode", ["error", "saturate"])
def test_the_nan_message_says_what_input_is_accepted(mode):
    x = _x(math.nan)
    x[0, 0] = math.inf  # NaN and inf together: the NaN decides the advice
    with pytest.raises(NonFiniteInputError) as info:
        q.quantize(x, "mxfp8", nonfinite=mode)
    msg = str(info.value)
    assert "holds 1 NaN, 1 inf of 64 values" in msg
    assert msg.endswith("Nothing was quantized. Pass finite values (and ±inf only with nonfinite='saturate'). NaN "
                        "has no value to saturate to, so it is refused in both modes: find where it came from "
                        "(torch.isnan) or replace it (torch.nan_to_num) before quantizing."), msg


@pytest.mark.parametrize("fmt", FLAVOURS, ids=_ids)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_saturate_stores_inf_as_the_largest_magnitude(fmt, sign):
    for gran in _grans(fmt):
        x = _x(sign * math.inf)
        got = q.quantize(x, fmt, granularity=gran, nonfinite="saturate")
        out = got.dequantize()
        assert torch.isfinite(out).all()
        finite = x.clone()
        finite[1, 7] = 0.0
        ref = q.quantize(finite, fmt, granularity=gran).dequantize()
        # every finite value quantizes as it would without the inf (the scales come from the finite values) ...
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[1, 7] = False
        assert torch.equal(out[mask], ref[mask])
        # ... and the inf is the largest magnitude its scale represents, with its sign: no value sharing
        # its scale (the tensor, the row, or the block of 16 / 32) dequantizes larger
        group = {None: out, "tensor": out, "row": out[1]}[gran] if fmt not in ("mxfp8", "mxfp4", "nvfp4") else \
            out[1, :16] if fmt == "nvfp4" else out[1, :32]
        assert math.copysign(1.0, out[1, 7].item()) == sign
        assert out[1, 7].abs().item() >= group.abs().max().item() > 0


def test_saturate_an_all_inf_tensor_is_finite():
    x = torch.full((1, 32), math.inf)
    for fmt in FLAVOURS:
        out = q.quantize(x, fmt, nonfinite="saturate").dequantize()
        assert torch.isfinite(out).all(), fmt


def test_the_1000_is_no_longer_clamped_silently():
    """The issue's example: a NaN used to make the scale 1.0 and 1000 became 448."""
    x = torch.tensor([[1000.0, math.nan, 1.0, 2.0]])
    with pytest.raises(NonFiniteInputError):
        q.quantize(x, "fp8_e4m3")
    ok = q.quantize(torch.tensor([[1000.0, 1.0, 2.0, 4.0]]), "fp8_e4m3").dequantize()
    assert ok[0, 0].item() == 1000.0


def test_finite_input_is_unchanged_by_the_check():
    x = torch.randn(4, 64)
    for fmt in FLAVOURS:
        a = q.quantize(x, fmt)
        b = q.quantize(x, fmt, nonfinite="saturate")
        assert torch.equal(a.dequantize(), b.dequantize()), fmt


@pytest.mark.parametrize("bad", ["saturated", "clip", None, 1, True])
def test_nonfinite_option_is_checked(bad):
    with pytest.raises(QuantizationError, match="nonfinite=") as info:
        q.quantize(torch.ones(2, 32), "mxfp8", nonfinite=bad)
    if bad == "saturated":
        assert "Did you mean 'saturate'" in str(info.value)
