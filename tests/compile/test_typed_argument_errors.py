"""Typed errors naming the value for bad arguments: accel.testing.fake_backend, accel.quant, accel.compile_plan."""

from __future__ import annotations

import pytest
import torch

import accel
import accel.quant as q
from accel.errors import CompileOptionError, FakeBackendError, QuantizationError
from accel.testing import fake_backend


# -- fake_backend -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_9", "sm_", "90", "sm_\u00b9\u2070", "sm_9x", "sm_1000"])
def test_fake_cuda_arch_not_of_the_sm_form(arch):
    with pytest.raises(FakeBackendError, match=rf"fake_backend\('cuda'\): arch {arch!r} is not of the form") as info:
        with fake_backend("cuda", arch=arch):
            pass  # pragma: no cover - never entered
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("arch", [9, b"sm_90"])
def test_fake_arch_not_a_string(arch):
    with pytest.raises(FakeBackendError, match=rf"arch={arch!r} \({type(arch).__name__}\) is not a str"):
        with fake_backend("rocm", arch=arch):
            pass  # pragma: no cover


@pytest.mark.parametrize("count", ["2", 1.0, True, -1, None])
def test_fake_device_count_must_be_an_int(count):
    with pytest.raises(FakeBackendError, match=rf"device_count={count!r} \({type(count).__name__}\) is not an int"):
        with fake_backend("cuda", device_count=count):
            pass  # pragma: no cover


@pytest.mark.parametrize(("arch", "cc"), [("sm_90", (9, 0)), ("sm_90a", (9, 0)), ("sm_100f", (10, 0)),
                                          ("sm_121", (12, 1))])
def test_fake_cuda_arch_forms_still_accepted(arch, cc):
    with fake_backend("cuda", arch=arch) as fake:
        assert (fake.properties.major, fake.properties.minor) == cc


# -- accel.quant ---------------------------------------------------------------------------------------------------
@pytest.fixture
def mx():
    return q.quantize(torch.randn(4, 64), "mxfp8"), q.quantize(torch.randn(64, 8), "mxfp8", dim=0)


@pytest.mark.parametrize(("data", "scale", "match"), [
    ([1, 2], None, r"dequantize: data is list \[1, 2\], not a tensor"),
    ("x", None, r"dequantize: data is str 'x', not a tensor"),
    (None, 2.0, r"dequantize: scale is float 2.0, not a tensor or a \(block scale, global scale\) pair"),
    (None, (), r"dequantize: scale is tuple \(\), not a tensor or a \(block scale, global scale\) pair"),
    (None, (torch.ones(1), 3), r"dequantize: scale is tuple .*, not a tensor or a \(block scale, global"),
])
def test_dequantize_non_tensors(mx, data, scale, match):
    qa, _ = mx
    with pytest.raises(QuantizationError, match=match):
        q.dequantize(qa.data if data is None else data, qa.scale if scale is None else scale)


@pytest.mark.parametrize(("dim", "match"), [("x", r"dim='x' \(str\) is not an int"),
                                             (True, r"dim=True \(bool\) is not an int"),
                                             (2, r"dim=2 is out of range for data of 2 dimension"),
                                             (-3, r"dim=-3 is out of range")])
def test_dequantize_bad_dim(mx, dim, match):
    qa, _ = mx
    with pytest.raises(QuantizationError, match=match):
        q.dequantize(qa.data, qa.scale, dim=dim)


def test_dequantize_zero_dim_data():
    with pytest.raises(QuantizationError, match=r"dim=-1 is out of range for data of 0 dimension"):
        q.dequantize(torch.tensor(1.0).to(torch.float8_e4m3fn), torch.tensor(1.0))


@pytest.mark.parametrize("fn", [q.reference_mm, lambda *a: q.scaled_mm(*a, fallback="reference")])
@pytest.mark.parametrize(("which", "value", "match"), [
    (0, 1, r"a is int 1, not a tensor"),
    (1, [1.0], r"b is list \[1.0\], not a tensor"),
    (2, None, r"scale_a is NoneType None, not a tensor or a \(block scale, global scale\) pair"),
    (3, "s", r"scale_b is str 's', not a tensor or a \(block scale, global scale\) pair"),
])
def test_mm_non_tensors(mx, fn, which, value, match):
    qa, qb = mx
    args = [qa.data, qb.data, qa.scale, qb.scale]
    args[which] = value
    with pytest.raises(QuantizationError, match=match):
        fn(*args)


def test_mm_still_works(mx):
    qa, qb = mx
    assert q.reference_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32).shape == (4, 8)


@pytest.mark.parametrize(("scale", "match"), [([1], r"to_blocked: scale is list \[1\], not a tensor"),
                                               (torch.ones(3), r"to_blocked: scale has shape \(3,\); it must be "
                                                               r"2-D")])
def test_to_blocked_bad_scale(scale, match):
    with pytest.raises(QuantizationError, match=match):
        q.to_blocked(scale)


# -- compile_plan --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "match"), [
    ([("max_autotune", True)], r"options is list .*, not a dict"),
    ("x", r"options is str 'x', not a dict"),
    (0, r"options is int 0, not a dict"),
    ({1: 2}, r"options has key 1 \(int\); Inductor option names are str"),
])
def test_compile_plan_options_must_be_a_dict_of_str(options, match):
    with fake_backend("cpu"):
        with pytest.raises(CompileOptionError, match=match):
            accel.compile_plan(options=options)
        with pytest.raises(CompileOptionError, match=match):
            accel.compile(lambda x: x, options=options)
