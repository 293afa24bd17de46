"""accel.quant: formats, numerics against float32 with stated bounds, native-vs-reference decisions.

Tolerances (elementwise, per quantized value x, with s its effective scale):

    |dequant(quant(x)) - x| <= REL * |x| + ABS * s  (+ 1e-6 |x| for float32 arithmetic)

REL is half an ulp of the element format relative to the value, 2**-(mantissa bits + 1):
2**-4 for e4m3, 2**-3 for e5m2, 2**-2 for e2m1. ABS is half the subnormal step of the
element format (in units of the scale): values below the smallest normal are rounded
with that absolute error. MX scales are rounded up, so nothing saturates; NVFP4 may clip
by at most 1/16 (e4m3 rounding of its block scale), inside REL.

A product then obeys |Aq Bq - A B| <= eA |B| + |A| eB + eA eB (+ K * 2**-23 |A| |B| for
float32 accumulation), with eA, eB the elementwise bounds above.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import accel
import accel.quant as q
from accel.backends.cuda import CudaBackend
from accel.backends.xpu import XpuBackend
from accel.errors import QuantizationError, UnsupportedFormatError
from accel.testing import fake_backend

MANTISSA = {"float8_e4m3fn": 3, "float8_e4m3fnuz": 3, "float8_e5m2": 2, "float8_e5m2fnuz": 2}
FP8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def _elem_bound(x, quantized):
    """Elementwise error bound for ``quantized`` (a Quantized of x), per the module docstring."""
    fmt = quantized.format
    d = quantized.dim
    if fmt.startswith("fp8"):
        dt = quantized.data.dtype
        m = MANTISSA[str(dt).removeprefix("torch.")]
        rel, absf = 2.0 ** -(m + 1), torch.finfo(dt).smallest_normal * 2.0 ** -m / 2
        s = quantized.scale.to(torch.float32)
        s = s if s.dim() else s.expand_as(x)
    else:
        block = q.FORMATS[fmt].block
        if fmt == "mxfp8":
            rel, absf = 2.0 ** -4, torch.finfo(torch.float8_e4m3fn).smallest_normal * 2.0 ** -3 / 2
        else:
            rel, absf = 2.0 ** -2, 0.25
        scale = quantized.scale
        s = (scale[0].to(torch.float32) * scale[1]) if isinstance(scale, tuple) else scale.to(torch.float32)
        s = s.repeat_interleave(block, dim=d)
    return rel * x.abs() + absf * s.expand_as(x) + 1e-6 * x.abs()


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, 128, generator=g)
    b = torch.randn(128, 96, generator=g)
    a[:8] *= 1e-3  # small rows: row-wise and block scales must follow them
    b[:, :4] *= 50.0
    return a, b


CASES = [("fp8_e4m3", "tensor"), ("fp8_e4m3", "row"), ("fp8_e5m2", "tensor"), ("fp8_e5m2", "row"),
         (torch.float8_e4m3fnuz, "row"), (torch.float8_e5m2fnuz, "tensor"),
         ("mxfp8", None), ("mxfp4", None), ("nvfp4", None)]


@pytest.mark.parametrize("fmt,gran", CASES)
def test_quantize_error_within_stated_bound(fmt, gran):
    a, b = _inputs()
    for x, dim in ((a, -1), (b, 0)):
        qx = q.quantize(x, fmt, granularity=gran, dim=dim)
        err = (qx.dequantize() - x).abs()
        bound = _elem_bound(x, qx)
        assert bool((err <= bound).all()), f"max excess {(err - bound).max().item()}"
        assert err.max() > 0  # a real rounding happened (the test can see errors)


@pytest.mark.parametrize("fmt,gran", CASES)
def test_reference_scaled_mm_within_stated_bound(fmt, gran):
    a, b = _inputs(1)
    qa, qb = q.quantize(a, fmt, granularity=gran), q.quantize(b, fmt, granularity=gran, dim=0)
    c = q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32, fallback="reference")
    assert c.shape == (64, 96) and c.dtype == torch.float32
    ea, eb = _elem_bound(a, qa), _elem_bound(b, qb)
    exact = a.double() @ b.double()
    bound = (ea @ b.abs() + a.abs() @ eb + ea @ eb + 128 * 2.0 ** -23 * (a.abs() @ b.abs())).double()
    assert bool(((c.double() - exact).abs() <= bound).all())


def test_row_wise_follows_small_rows_tensor_wise_cannot():
    a, _ = _inputs()
    a[:8] *= 1e-2  # rows ~1e-5 of the largest values: below e4m3's normal range under one tensor scale
    rel = {g: ((q.quantize(a, "fp8_e4m3", granularity=g).dequantize() - a)[:8].abs() / a[:8].abs()).max()
           for g in ("tensor", "row")}
    assert rel["row"] <= 2.0 ** -4 + 1e-6
    assert rel["tensor"] > 0.5


def test_layouts_and_dtypes():
    a, b = _inputs()
    qa, qb = q.quantize(a, "fp8_e4m3", granularity="row"), q.quantize(b, "fp8_e4m3", granularity="row", dim=0)
    assert qa.scale.shape == (64, 1) and qb.scale.shape == (1, 96)
    assert qb.data.stride() == (1, 128)  # column-major, as torch._scaled_mm wants b
    m8 = q.quantize(b, "mxfp8", dim=0)
    assert m8.data.dtype == torch.float8_e4m3fn and m8.scale.dtype == torch.float8_e8m0fnu
    assert m8.scale.shape == (4, 96)
    m4 = q.quantize(a, "mxfp4")
    assert m4.data.dtype == torch.float4_e2m1fn_x2 and m4.data.shape == (64, 64) and m4.scale.shape == (64, 4)
    n4 = q.quantize(b, "nvfp4", dim=0)
    assert n4.data.shape == (64, 96) and n4.scale[0].shape == (8, 96) and n4.scale[0].dtype == torch.float8_e4m3fn
    assert n4.scale[1].dim() == 0 and n4.scale[1].dtype == torch.float32
    assert q.quantize(a.to(torch.bfloat16), "fp8_e5m2").dtype == torch.bfloat16


@pytest.mark.parametrize("fmt,emax", [("mxfp8", 448.0), ("mxfp4", 6.0)])
def test_mx_scales_are_tight_powers_of_two(fmt, emax):
    a, _ = _inputs()
    qa = q.quantize(a, fmt)
    s = qa.scale.to(torch.float32)
    assert bool((torch.log2(s) == torch.round(torch.log2(s))).all())
    amax = a.reshape(64, 4, 32).abs().amax(-1)
    ratio = amax / s
    assert bool((ratio <= emax).all()) and bool((ratio > emax / 2).all())  # rounded up, by at most one binade


def test_e2m1_grid_round_trips_and_ties_go_to_even():
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    x = torch.cat([grid, -grid[1:], torch.tensor([0.0])])
    assert q._unpack_e2m1(q._pack_e2m1(x)).tolist() == x.tolist()
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75])
    assert q._unpack_e2m1(q._pack_e2m1(mids)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0]


def test_e2m1_packing_puts_even_element_in_low_nibble():
    packed = q._pack_e2m1(torch.tensor([0.5, -6.0])).view(torch.uint8)
    assert packed.tolist() == [0x1 | (0xF << 4)]


def _to_blocked_by_tiles(x):
    """cuBLAS layout from its tile description: 128x4 tiles, each stored as 32 x (4 x 4)."""
    rows, cols = x.shape
    rt, ct = -(-rows // 128), -(-cols // 4)
    padded = torch.zeros(rt * 128, ct * 4, dtype=x.dtype)
    padded[:rows, :cols] = x
    tiles = padded.view(rt, 128, ct, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1)


@pytest.mark.parametrize("shape", [(128, 4), (130, 6), (5, 3), (256, 8)])
def test_to_blocked_matches_cublas_tile_layout(shape):
    x = (torch.arange(shape[0] * shape[1]) % 251 + 1).to(torch.uint8).view(shape)
    assert torch.equal(q.to_blocked(x), _to_blocked_by_tiles(x))
    e8 = x.view(torch.float8_e8m0fnu)
    assert q.to_blocked(e8).dtype == torch.float8_e8m0fnu


# -- native or not: capabilities x running torch -----------------------------------------------
def _block_ok():
    """The running torch has what the block-scaled native path needs (the torch half of the decision)."""
    from accel import _compat

    return _compat.has_scaled_mm_v2() and _compat.has_dtype("float8_e8m0fnu") and _compat.has_dtype("float4_e2m1fn_x2")


def test_native_support_per_vendor():
    mx = ["mxfp8", "mxfp4"] if _block_ok() else []
    with fake_backend("cuda", arch="sm_90"):
        assert q.native_support("fp8_e4m3", "cuda").native
        assert q.native_formats("cuda") == ["fp8_e4m3", "fp8_e5m2"]
        s = q.native_support("mxfp8", "cuda")
        assert not s.native and "Capabilities.mxfp8 is False" in s.reason
    with fake_backend("cuda", arch="sm_100"):
        assert q.native_formats("cuda") == ["fp8_e4m3", "fp8_e5m2"] + (mx + ["nvfp4"] if mx else [])
    with fake_backend("cuda", arch="sm_80"):
        assert q.native_formats("cuda") == [] and "no fp8" in q.native_support("fp8_e4m3", "cuda").reason
    with fake_backend("rocm", arch="gfx942:sramecc+:xnack-"):
        assert q.fp8_dtype("e4m3", "cuda") == torch.float8_e4m3fnuz
        assert q.fp8_dtype("e5m2", "cuda") == torch.float8_e5m2fnuz
        assert q.native_support(torch.float8_e4m3fnuz, "cuda").native
        s = q.native_support(torch.float8_e4m3fn, "cuda")
        assert not s.native and "'fnuz' flavour" in s.reason
        assert q.native_formats("cuda") == ["fp8_e4m3", "fp8_e5m2"]
    with fake_backend("rocm", arch="gfx950"):
        assert q.fp8_dtype("e4m3", "cuda") == torch.float8_e4m3fn
        assert q.native_formats("cuda") == ["fp8_e4m3", "fp8_e5m2"] + mx
    with fake_backend("xpu"):
        assert q.native_formats("xpu") == ["fp8_e4m3", "fp8_e5m2"] + mx
    with fake_backend("mps"):
        assert q.native_formats("mps") == []
    assert q.native_formats("cpu") == []


def test_native_support_needs_the_running_torch(monkeypatch):
    from accel import _compat

    monkeypatch.setattr(_compat, "has_scaled_mm_v2", lambda: False)
    monkeypatch.setattr(_compat, "has_scaled_mm", lambda: False)
    with fake_backend("cuda", arch="sm_100"):
        s = q.native_support("nvfp4", "cuda")
        assert not s.native and "torch.nn.functional.scaled_mm" in s.reason
        assert "torch._scaled_mm" in q.native_support("fp8_e4m3", "cuda").reason


def test_unsupported_format_raises_with_reason_and_choices():
    a, b = _inputs()
    qa, qb = q.quantize(a, "nvfp4"), q.quantize(b, "nvfp4", dim=0)
    with pytest.raises(UnsupportedFormatError, match=r"nvfp4 \(block\) is not native on cpu: .*fallback='reference'"):
        q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale)
    with pytest.raises(RuntimeError):  # UnsupportedFormatError is a NotImplementedError, a RuntimeError
        q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale)


def _cpu_scaled_mm_refuses_row_scales() -> str | None:
    """Why this torch's CPU ``torch._scaled_mm`` kernel refuses row-wise fp8 scales, or ``None`` (torch 2.9's
    takes per-tensor scales only: "Now _scaled_mm only supports per-tensor scaling for CPU backend")."""
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    b = torch.ones(16, 16).to(torch.float8_e4m3fn).t()
    try:
        torch._scaled_mm(a, b, torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.float32)
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0][:200]
    return None


@pytest.mark.parametrize("gran", ["tensor", "row"])
def test_native_fp8_path_on_cpu_matches_reference(monkeypatch, gran):
    """torch._scaled_mm has a CPU kernel: run the native branch for real and compare."""
    refused = _cpu_scaled_mm_refuses_row_scales() if gran == "row" else None
    if refused is not None:
        pytest.skip(f"torch {torch.__version__}'s CPU torch._scaled_mm refuses row-wise fp8 scales: {refused}")
    monkeypatch.setattr(q, "native_support", lambda fmt, device=None: q.Support(True, "forced for the test"))
    a, b = _inputs(2)
    qa, qb = q.quantize(a, "fp8_e4m3", granularity=gran), q.quantize(b, "fp8_e4m3", granularity=gran, dim=0)
    rowmajor_b = qb.data.contiguous()  # not column-major: scaled_mm must fix the layout
    native = q.scaled_mm(qa.data, rowmajor_b, qa.scale, qb.scale, out_dtype=torch.float32)
    ref = q.reference_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32)
    # fp32 sums of K products in another order: |error| <= K * 2**-24 * (|A| @ |B|) (the standard
    # bound for a dot product; the CPU kernel's blocking differs per CPU, so a fixed atol is flaky)
    da, db = q.dequantize(qa.data, qa.scale, dim=-1), q.dequantize(qb.data, qb.scale, dim=0)
    bound = 1e-5 * ref.abs() + a.shape[1] * 2.0 ** -24 * (da.abs() @ db.abs())
    assert ((native - ref).abs() <= bound).all(), ((native - ref).abs() - bound).max()


@pytest.mark.parametrize("vendor_cls,swizzled", [(CudaBackend, True), (XpuBackend, False)])
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_block_scaled_native_call_arguments(monkeypatch, vendor_cls, swizzled, fmt):
    if not _block_ok():
        pytest.skip(f"torch {torch.__version__} has no torch.nn.functional.scaled_mm / e8m0 / fp4 dtypes")
    calls = []

    def fake_scaled_mm(a, b, sa, ra, sb, rb, swizzle_a=None, swizzle_b=None, output_dtype=None):
        calls.append(dict(a=a, b=b, sa=sa, ra=ra, sb=sb, rb=rb, swa=swizzle_a, swb=swizzle_b, out=output_dtype))
        return torch.zeros(a.shape[0], b.shape[1], dtype=output_dtype)

    monkeypatch.setattr(q, "native_support", lambda f, device=None: q.Support(True, "forced"))
    monkeypatch.setattr(q, "_backend_for", lambda device: vendor_cls())
    monkeypatch.setattr(F, "scaled_mm", fake_scaled_mm)
    a, b = _inputs()
    qa, qb = q.quantize(a, fmt), q.quantize(b, fmt, dim=0)
    q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.bfloat16)
    (c,) = calls
    assert c["out"] == torch.bfloat16 and c["b"].stride(0) == 1
    want = F.SwizzleType.SWIZZLE_32_4_4 if swizzled else F.SwizzleType.NO_SWIZZLE
    if fmt == "nvfp4":
        assert c["ra"] == [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
        assert c["swa"] == [want, F.SwizzleType.NO_SWIZZLE]
        block_a, block_b = c["sa"][0], c["sb"][0]
        assert c["sa"][1] is not None and c["sa"][1].dim() == 0
        plain_a, plain_b = qa.scale[0], qb.scale[0].t()
    else:
        assert c["ra"] == F.ScalingType.BlockWise1x32 and c["swa"] == want
        block_a, block_b = c["sa"], c["sb"]
        plain_a, plain_b = qa.scale, qb.scale.t()
    if swizzled:
        assert torch.equal(block_a.view(torch.uint8), q.to_blocked(plain_a).view(torch.uint8))
        assert torch.equal(block_b.view(torch.uint8), q.to_blocked(plain_b).view(torch.uint8))
    else:
        assert torch.equal(block_a.view(torch.uint8), plain_a.contiguous().view(torch.uint8))
        assert block_b.shape == (96, qb.scale.shape[0] if fmt != "nvfp4" else qb.scale[0].shape[0])


# -- bad input: typed errors, nothing changed ---------------------------------------------------------
def test_bad_inputs_raise_typed_errors():
    a, b = _inputs()
    with pytest.raises(QuantizationError, match="unknown format 'fp6'"):
        q.quantize(a, "fp6")
    with pytest.raises(QuantizationError, match="is not an fp8 dtype"):
        q.quantize(a, torch.int8)
    with pytest.raises(QuantizationError, match="Quantize a floating tensor"):
        q.quantize(torch.ones(4, dtype=torch.int32), "fp8_e4m3")
    with pytest.raises(QuantizationError, match="granularity 'block' for fp8_e4m3"):
        q.quantize(a, "fp8_e4m3", granularity="block")
    with pytest.raises(QuantizationError, match="granularity 'row' for mxfp8"):
        q.quantize(a, "mxfp8", granularity="row")
    with pytest.raises(QuantizationError, match=r"multiple of 32: got 48"):
        q.quantize(torch.randn(4, 48), "mxfp4")
    with pytest.raises(QuantizationError, match="kind 'e3m4'"):
        q.fp8_dtype("e3m4")
    qa, qb = q.quantize(a, "fp8_e4m3", granularity="row"), q.quantize(b, "fp8_e4m3", granularity="row", dim=0)
    with pytest.raises(QuantizationError, match="fallback='cpu'"):
        q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, fallback="cpu")
    with pytest.raises(QuantizationError, match="inner dimensions differ"):
        q.scaled_mm(qa.data, qa.data, qa.scale, qa.scale, fallback="reference")
    with pytest.raises(QuantizationError, match="must be 2-D"):
        q.scaled_mm(qa.data[0], qb.data, qa.scale, qb.scale, fallback="reference")
    with pytest.raises(QuantizationError, match=r"row-wise are \[M, 1\] = \[64, 1\]"):
        q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale.t(), fallback="reference")
    m4 = q.quantize(b, "mxfp4", dim=0)
    with pytest.raises(QuantizationError, match="Quantize both to one format"):
        q.scaled_mm(qa.data, m4.data, qa.scale, m4.scale, fallback="reference")
    with pytest.raises(QuantizationError, match="is not a known format"):
        q.scaled_mm(qa.data, qb.data, qa.scale.to(torch.float16), qb.scale, fallback="reference")
    with pytest.raises(QuantizationError, match="not a quantized dtype"):
        q.dequantize(a, qa.scale)
    with pytest.raises(QuantizationError, match="does not tile data"):
        q.dequantize(qa.data, torch.ones(64, 3))


def test_missing_dtype_is_a_typed_error(monkeypatch):
    from accel import _compat

    monkeypatch.setattr(_compat, "has_dtype", lambda name: name != "float4_e2m1fn_x2")
    with pytest.raises(UnsupportedFormatError, match="needs torch.float4_e2m1fn_x2"):
        q.quantize(torch.randn(4, 32), "mxfp4")


def test_public_names():
    assert accel.quant is q
    assert set(q.FORMATS) == {"fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp4", "nvfp4"}


# -- real hardware (the lead's H200: sm_90) ---------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("gran", ["tensor", "row"])
@pytest.mark.parametrize("fmts", [("fp8_e4m3", "fp8_e4m3"), ("fp8_e4m3", "fp8_e5m2")])
def test_cuda_fp8_scaled_mm_numerics(gran, fmts):
    if not q.native_support("fp8_e4m3", "cuda").native:
        pytest.skip(q.native_support("fp8_e4m3", "cuda").reason)
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 512, device="cuda", generator=g)
    b = torch.randn(512, 384, device="cuda", generator=g)
    qa, qb = q.quantize(a, fmts[0], granularity=gran), q.quantize(b, fmts[1], granularity=gran, dim=0)
    native = q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.bfloat16)
    assert native.device.type == "cuda" and native.dtype == torch.bfloat16
    ref = q.reference_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32)
    # same quantized inputs: only accumulation order and the bf16 output rounding (2**-8) differ
    torch.testing.assert_close(native.float(), ref, rtol=2.0 ** -7, atol=1e-3 * ref.abs().max().item())
    ea, eb = _elem_bound(a, qa), _elem_bound(b, qb)
    bound = ea @ b.abs() + a.abs() @ eb + ea @ eb + (512 * 2.0 ** -23 + 2.0 ** -8) * (a.abs() @ b.abs())
    assert bool(((native.float() - a @ b).abs() <= bound * 1.01).all())


@pytest.mark.cuda
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_cuda_block_scaled_numerics_where_native(fmt):
    s = q.native_support(fmt, "cuda")
    if not s.native:
        pytest.skip(s.reason)
    a = torch.randn(256, 512, device="cuda")
    b = torch.randn(512, 256, device="cuda")
    qa, qb = q.quantize(a, fmt), q.quantize(b, fmt, dim=0)
    native = q.scaled_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32)
    ref = q.reference_mm(qa.data, qb.data, qa.scale, qb.scale, out_dtype=torch.float32)
    torch.testing.assert_close(native, ref, rtol=1e-3, atol=1e-3 * math.sqrt(512))
