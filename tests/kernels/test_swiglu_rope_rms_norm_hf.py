"""accel's own ops for Hugging Face models: ``accel::swiglu``, ``accel::rope``, ``accel::rms_norm_hf``.

Per op family the four kernel tests (cond on meta and fake-CUDA tensors; numerics against the reference
with fresh random inputs, per-dtype tolerances and NaN-poisoned outputs; register -> route -> unregister
-> fallback on both registry paths; all kernel code in Triton's interpreter on CPU, in one subprocess
because ``TRITON_INTERPRET=1`` must be set before Triton is imported), and the custom ops themselves:
the reference equals Hugging Face's eager arithmetic and its autograd, the fake kernels and autograd
registrations pass ``torch.library.opcheck``, and the ops trace under ``torch.compile``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from accel.kernels.ops.rms_norm_hf import conditions as rn_conditions
from accel.kernels.ops.rms_norm_hf import op as rn_op
from accel.kernels.ops.rope import conditions as rope_conditions
from accel.kernels.ops.rope import op as rope_op
from accel.kernels.ops.rope import reference as rope_reference
from accel.kernels.ops.swiglu import conditions as sw_conditions
from accel.kernels.ops.swiglu import op as sw_op
from accel.kernels.ops.swiglu import reference as sw_reference
from accel.kernels.tuning import table as tuning

from accel import _compat
from _kernel_helpers import meta_floors  # noqa: F401 (fixture)
from _kernel_helpers import interpreted_report, rope_compare


@pytest.fixture(autouse=True)
def _meta_floors(meta_floors):
    """The meta arch declares the 2**20 floors (:func:`_kernel_helpers.meta_floors`)."""
    return meta_floors

pytestmark = pytest.mark.cpu

PATHS = ["accel"] + (["native"] if _compat.native_dsl_registry() is not None else [])
TRITON = importlib.util.find_spec("triton") is not None


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture(autouse=True)
def _fresh_arch():
    from accel.kernels.ops import conds

    conds.arch.cache_clear()
    yield
    conds.arch.cache_clear()


# ------------------------------------------------------------------------------------- cond on meta tensors
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
def test_swiglu_cond_accepts_rows_and_strided_halves_on_meta(dtype):
    fwd, bwd = sw_conditions.make_conds("triton", ["meta"])
    a = _meta(8, 1024, 5632, dtype=dtype)
    assert fwd(a, a) and fwd.why_not(a, a) is None and bwd(a, a, a)
    gate_up = _meta(8192, 2 * 5632, dtype=dtype)
    gate, up = gate_up.chunk(2, dim=-1)  # Phi-3's fused projection: rows of stride 2N
    assert fwd(gate, up) and bwd(a.view(8192, 5632), gate, up)
    assert sw_conditions.row_stride(gate) == 2 * 5632


def test_swiglu_cond_rejects_with_reasons_on_meta():
    fwd, bwd = sw_conditions.make_conds("triton", ["meta"])
    a = _meta(4096, 4096)
    cases = [((a, _meta(4096, 4096, dtype=torch.float32)), "differ in shape, dtype"),
             ((_meta(4096, 4096, dtype=torch.float64),) * 2, "not in fp32/bf16/fp16"),
             ((a.t(), a.t()), "not rows of unit stride"),
             ((_meta(4, 64), _meta(4, 64)), "default floor"),
             ((torch.empty(2048, 1024), torch.empty(2048, 1024)), "device type 'cpu'")]
    for args, reason in cases:
        assert fwd(*args) is False and reason in fwd.why_not(*args), reason
    assert "differ in shape" in bwd.why_not(_meta(4096, 2048), a, a)
    assert "unit stride" in bwd.why_not(a.t(), a, a)


def test_rope_cond_accepts_hf_layouts_and_rejects_with_reasons_on_meta():
    fwd, bwd = rope_conditions.make_conds("triton", ["meta"])
    q = _meta(4, 2048, 16, 128).transpose(1, 2)  # HF: q_proj(x).view(B, S, H, D).transpose(1, 2)
    k = _meta(4, 2048, 8, 128).transpose(1, 2)
    cos = _meta(1, 2048, 128)
    assert fwd(q, k, cos, cos, 1) and bwd(q, k, cos, cos, 1) and fwd.why_not(q, k, cos, cos) is None
    assert fwd(_meta(4, 2048, 16, 128), _meta(4, 2048, 8, 128), _meta(4, 2048, 128), _meta(4, 2048, 128), 2)
    strided_d = _meta(4, 16, 2048, 256)[..., ::2]
    cases = [((q, k, _meta(1, 2048, 64), _meta(1, 2048, 64), 1), "do not have the shapes"),
             ((q, k, cos, cos, 2), "do not have the shapes"),
             ((q, k, cos.float(), cos.float(), 1), "do not have the shapes"),
             ((strided_d, strided_d, cos, cos, 1), "unit stride on its last dim"),
             ((_meta(1, 1, 8, 8), _meta(1, 1, 8, 8), _meta(1, 8, 8), _meta(1, 8, 8), 1), "default floor")]
    for args, reason in cases:
        assert fwd(*args) is False and reason in fwd.why_not(*args), reason


def test_rms_norm_hf_cond_accepts_and_rejects_with_reasons_on_meta():
    fwd, bwd = rn_conditions.make_conds("triton", ["meta"])
    x, w = _meta(8192, 2048), _meta(2048)
    rstd = torch.empty(8192, device="meta")
    for unit in (False, True):
        assert fwd(x, w, 1e-6, unit) and fwd.why_not(x, w, 1e-6, unit) is None
        assert bwd(x, x, w, rstd, unit, True, True)
    assert fwd(_meta(16, 512, 16, 128), _meta(128), 1e-6)  # Qwen3's per-head q/k norms
    cases = [((x, _meta(2048, dtype=torch.float32), 1e-6), "differs from the input in dtype"),
             ((x, _meta(1024), 1e-6), "not [N] for input"),
             ((_meta(2048, 8192).t(), w, 1e-6), "not contiguous"),
             ((_meta(64, 32768), _meta(32768), 1e-6), "N > 16384"),
             ((_meta(4, 64), _meta(64), 1e-6), "default floor")]
    for args, reason in cases:
        assert fwd(*args) is False and reason in fwd.why_not(*args), reason
    assert "rstd" in bwd.why_not(x, x, w, rstd.to(torch.bfloat16), False, True, True)
    assert "grad_out" in bwd.why_not(_meta(8192, 1024), x, w, rstd, False, True, True)
    assert bwd(_meta(2048, 8192).t(), x, w, rstd, False, True, True)  # a strided gradient: the impl copies it


def test_conds_consult_the_tuning_table_and_the_vendor_on_fake_cuda_tensors(fake_backend, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    folded: dict = {}
    entries = [{"op": "rms_norm_hf_fwd", "dtype": "bfloat16", "m": 8192, "n": 2048, "impl": "aten"},
               {"op": "swiglu_fwd", "dtype": "bfloat16", "m": 8192, "n": 5632, "impl": "aten"}]
    tuning._fold(folded, entries, "user")
    monkeypatch.setattr(tuning, "table", lambda arch: folded if arch == "sm_90" else {})
    rn_fwd, _ = rn_conditions.make_conds("triton", ["cuda"])
    sw_fwd, _ = sw_conditions.make_conds("triton", ["cuda"])
    rope_fwd, _ = rope_conditions.make_conds("triton", ["cuda"])
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        def cuda(*shape):
            return torch.empty(*shape, dtype=torch.bfloat16, device="cuda")

        x, w, a, other = cuda(8192, 2048), cuda(2048), cuda(8192, 5632), cuda(4096, 2048)
        q, cos = cuda(4, 16, 2048, 128), cuda(1, 2048, 128)
        with fake_backend("cuda", arch="sm_90"):
            assert "sm_90 picks aten" in rn_fwd.why_not(x, w, 1e-6)
            assert "sm_90 picks aten" in sw_fwd.why_not(a, a)
            assert rn_fwd(other, w, 1e-6) and sw_fwd(other, other)  # other buckets: table misses, large enough
            assert rope_fwd(q, q, cos, cos)
        with fake_backend("rocm"):
            assert "ROCm build" in rope_fwd.why_not(q, q, cos, cos)


# ---------------------------------------------------------- the references are Hugging Face's arithmetic
def _hf_rms_norm(x, w, eps, gemma):
    if gemma:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())).type_as(x)
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _hf_rope(q, k, cos, sin):
    def rot(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def _grads(fn, inputs, seed=0):
    inputs = [t.detach().requires_grad_(t.dtype.is_floating_point) for t in inputs]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, [t for t in inputs if t.requires_grad], cotangents)
    return outs, grads


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_references_and_their_autograd_match_hugging_face_eager(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(3, 5, 24, generator=g).to(dtype) for _ in range(2))
    ours, ours_g = _grads(sw_op.swiglu, [a, b])
    theirs, theirs_g = _grads(lambda a, b: F.silu(a) * b, [a, b])
    assert all(torch.equal(x, y) for x, y in zip(ours + ours_g, theirs + theirs_g))  # bit for bit, as in eager

    q = torch.randn(2, 5, 4, 16, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(2, 5, 2, 16, generator=g).to(dtype).transpose(1, 2)
    cos, sin = (torch.randn(2, 5, 16, generator=g).to(dtype) for _ in range(2))  # unequal halves: the exact adjoint
    ours, ours_g = _grads(lambda q, k: rope_op.rope(q, k, cos, sin), [q, k])
    theirs, theirs_g = _grads(lambda q, k: _hf_rope(q, k, cos, sin), [q, k])
    assert all(torch.equal(x, y) for x, y in zip(ours + ours_g, theirs + theirs_g))
    assert ours[0].stride() == torch.empty_like(q).stride()  # the layout the fake kernel promises

    x = (torch.randn(3, 7, 48, generator=g) * 4).to(dtype)
    for gemma in (False, True):
        w = torch.randn(48, generator=g).to(dtype)
        ours, ours_g = _grads(lambda x, w, gemma=gemma: rn_op.rms_norm(x, w, 1e-6, gemma), [x, w])
        theirs, theirs_g = _grads(lambda x, w, gemma=gemma: _hf_rms_norm(x, w, 1e-6, gemma), [x, w])
        assert torch.equal(ours[0], theirs[0])
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        for o, t in zip(ours_g, theirs_g):  # the backward's fp32 formula: not op for op, within rounding
            torch.testing.assert_close(o, t, **tol)
    mixed = rn_op.rms_norm(x.bfloat16(), torch.randn(48, generator=g), 1e-6)  # Llama: bf16 input, fp32 weight
    assert mixed.dtype == torch.float32


def test_rope_refuses_to_differentiate_cos_and_sin():
    from accel.errors import UnsupportedOperationError

    q = torch.randn(1, 2, 3, 8, requires_grad=True)
    cos = torch.randn(1, 3, 8, requires_grad=True)
    with pytest.raises(UnsupportedOperationError, match="cos .* requires grad"):
        rope_op.rope(q, q, cos, cos.detach())
    assert not rope_reference.accepts(q, q, cos, cos)
    with pytest.raises(RuntimeError, match="accel::swiglu: a is \\[2, 3\\], b is \\[3, 2\\]"):
        sw_op.swiglu(torch.ones(2, 3), torch.ones(3, 2))


def test_custom_ops_pass_opcheck_and_trace_under_compile():
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 6, generator=g, requires_grad=True)
    torch.library.opcheck(sw_op.swiglu, (a, torch.randn(4, 6, generator=g, requires_grad=True)), test_utils=checks)
    q = torch.randn(2, 5, 3, 8, generator=g).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 5, 1, 8, generator=g).transpose(1, 2).requires_grad_()
    cos, sin = torch.randn(1, 5, 8, generator=g), torch.randn(1, 5, 8, generator=g)
    torch.library.opcheck(rope_op.rope, (q, k, cos, sin, 1), test_utils=checks)
    x, w = torch.randn(3, 4, 16, generator=g, requires_grad=True), torch.randn(16, generator=g, requires_grad=True)
    for unit in (False, True):
        torch.library.opcheck(rn_op.rms_norm_hf, (x, w, 1e-6, unit), test_utils=checks)

    def step(x, w, a, q, k):
        qo, ko = rope_op.rope(q, k, cos, sin)
        return rn_op.rms_norm(x, w, 1e-6).sum() + sw_op.swiglu(a, a).sum() + qo.sum() + ko.sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    args = (x, w, a, q, k)
    torch.testing.assert_close(compiled(*args), step(*args))
    grads = torch.autograd.grad(compiled(*args), args)
    torch.testing.assert_close(grads, torch.autograd.grad(step(*args), args))


# ------------------------------------------------------------------------------------ interpreter runs
SCRIPT = textwrap.dedent("""
    import json, sys, torch
    import accel.kernels as ak
    from accel.kernels.tuning import tolerance as _tolerance, table as tuning
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.ops.swiglu import reference as sw_ref, triton_impl as sw_impl, op as sw_op
    from accel.kernels.ops.rope import reference as rope_ref, triton_impl as rope_impl, op as rope_op
    from accel.kernels.ops.rms_norm_hf import reference as rn_ref, triton_impl as rn_impl, op as rn_op
    from _kernel_helpers import UNIT_ROUNDOFF, rope_compare
    _launch.poison_outputs = True          # unwritten outputs stay NaN and fail the comparison
    tuning.MIN_NUMEL["triton"] = 0         # tiny interpreter shapes must route
    torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 0)  # the same inputs every run
    report = {"numerics": [], "routing": {}}

    def check(op, dtype, shape, out, ref, result=None):
        err, problem = result or _tolerance.compare(out, ref)
        report["numerics"].append(dict(op=op, dtype=str(dtype), shape=list(shape), err=err, problem=problem))

    def check_norm_bwd(op, dtype, shape, out, ref, dy, x, rstd):
        # dx as every output; dw is a sum over rows whose terms dy * x_hat each carry one rounding of x_hat
        # to the input dtype (the model's rounding) in one of the two: where the terms cancel, the two
        # differ by up to that rounding of the terms' absolute sum, which the elementwise tolerance ignores
        (dx, dw), (rdx, rdw) = out, ref
        check(op + ":dx", dtype, shape, dx, rdx)
        if rdw.numel() == 0:  # not asked for: an empty [0] tensor in both
            check(op + ":dw", dtype, shape, dw, rdw)
            return
        err = (dw.float() - rdw.float()).abs()
        terms = (dy.float() * x.float() * rstd.float().unsqueeze(-1)).abs().reshape(-1, shape[-1]).sum(0)
        rtol, atol = _tolerance.tolerance(dtype)
        bound = atol + rtol * rdw.float().abs() + 2 * UNIT_ROUNDOFF[dtype] * terms
        bad = (err > bound) | ~torch.isfinite(dw.float()) if dw.shape == rdw.shape else torch.ones(1, dtype=torch.bool)
        report["numerics"].append(dict(op=op + ":dw", dtype=str(dtype), shape=list(shape), err=float(err.max()),
                                       problem=f"{int(bad.sum())} dw elements beyond the bound" if bad.any() else None))

    for dtype in (torch.float32, torch.bfloat16, torch.float16) if sys.argv[2] == "numerics" else ():
        for shape in ((1, 1), (7, 1000), (2, 3, 40), (3, 2500)):
            a, b, dy = (torch.randn(shape, dtype=dtype) for _ in range(3))
            check("swiglu", dtype, shape, sw_impl.swiglu(a, b), sw_ref.swiglu(a, b))
            check("swiglu_bwd", dtype, shape, sw_impl.swiglu_backward(dy, a, b), sw_ref.swiglu_backward(dy, a, b))
        gate, up = torch.randn(4, 6, 2 * 96, dtype=dtype).chunk(2, dim=-1)   # strided halves (Phi-3)
        dy = torch.randn(4, 6, 96, dtype=dtype)
        check("swiglu_strided", dtype, gate.shape, sw_impl.swiglu(gate, up), sw_ref.swiglu(gate, up))
        check("swiglu_bwd_strided", dtype, gate.shape, sw_impl.swiglu_backward(dy, gate, up),
              sw_ref.swiglu_backward(dy, gate, up))
        for b_, hq, hk, s, d, bc, ud in ((2, 4, 2, 5, 16, 1, 1), (1, 3, 3, 7, 8, 1, 2), (2, 5, 1, 3, 64, 2, 1),
                                         (1, 40, 8, 2, 128, 1, 1)):
            if ud == 1:   # HF's layout: a transposed view of [B, S, H, D]
                q = torch.randn(b_, s, hq, d, dtype=dtype).transpose(1, 2)
                k = torch.randn(b_, s, hk, d, dtype=dtype).transpose(1, 2)
            else:
                q, k = torch.randn(b_, s, hq, d, dtype=dtype), torch.randn(b_, s, hk, d, dtype=dtype)
            cos, sin = torch.randn(bc, s, d, dtype=dtype), torch.randn(bc, s, d, dtype=dtype)
            out = rope_impl.rope(q, k, cos, sin, ud)
            ref = rope_ref.rope(q, k, cos, sin, ud)
            check("rope", dtype, q.shape, out, ref, rope_compare(out, ref, q, k, cos, sin, ud, False))
            check("rope_layout", dtype, q.shape, out[0].stride() == torch.empty_like(q).stride(), True)
            out, ref = rope_impl.rope_backward(q, k, cos, sin, ud), rope_ref.rope_backward(q, k, cos, sin, ud)
            check("rope_bwd", dtype, q.shape, out, ref, rope_compare(out, ref, q, k, cos, sin, ud, True))
        for shape in ((1, 8), (7, 1000), (2, 3, 40), (3, 5000)):
            x = torch.randn(shape, dtype=dtype) * 3
            w, dy = torch.randn(shape[-1], dtype=dtype), torch.randn(shape, dtype=dtype)
            for unit in (False, True):
                eps = float(torch.rand(())) * 1e-4
                out = rn_impl.rms_norm_hf(x, w, eps, unit)
                ref = rn_ref.rms_norm_hf(x, w, eps, unit)
                check(f"rms_norm_hf[{unit}]", dtype, shape, out, ref)
                for mask in ((True, True), (True, False), (False, True)):
                    check_norm_bwd(f"rms_norm_hf_bwd[{unit},{mask}]", dtype, shape,
                                   rn_impl.rms_norm_hf_backward(dy, x, w, ref[1], unit, *mask),
                                   rn_ref.rms_norm_hf_backward(dy, x, w, ref[1], unit, *mask), dy, x, ref[1])
                strided = torch.randn(shape[::-1], dtype=dtype).permute(*range(len(shape) - 1, -1, -1))
                check_norm_bwd(f"rms_norm_hf_bwd[{unit},strided]", dtype, shape,   # a transposed view's gradient
                               rn_impl.rms_norm_hf_backward(strided, x, w, ref[1], unit, True, True),
                               rn_ref.rms_norm_hf_backward(strided, x, w, ref[1], unit, True, True), strided, x,
                               ref[1])

    # register -> call the op with autograd -> routed -> unregister -> the reference again
    ak.use_registry(sys.argv[1])
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(6, 40, generator=g).requires_grad_() for _ in range(2))
    q = torch.randn(2, 5, 4, 16, generator=g).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 5, 2, 16, generator=g).transpose(1, 2).requires_grad_()
    cos, sin = torch.randn(1, 5, 16, generator=g), torch.randn(1, 5, 16, generator=g)
    x, w = torch.randn(3, 4, 32, generator=g).requires_grad_(), torch.randn(32, generator=g).requires_grad_()
    calls = {"swiglu": (sw_impl, lambda: sw_op.swiglu(a, b), (a, b)),
             "rope": (rope_impl, lambda: sum(o.square().sum() for o in rope_op.rope(q, k, cos, sin)), (q, k)),
             "rms_norm_hf": (rn_impl, lambda: rn_op.rms_norm(x, w, 1e-6, True), (x, w))}
    for name, (impl, call, leaves) in calls.items():
        def run():
            out = call()
            grads = torch.autograd.grad(out.square().sum(), leaves)
            return (out.detach(), *grads)
        names = impl.register(["cpu"])
        info = {o.name: o for o in ak.overrides()}
        entry = {"names": names, "paths": [info[n].paths for n in names],
                 "explain": ak.explain(torch.ops.accel.swiglu.default, a, b).kernel if name == "swiglu" else None}
        got = run()
        info = {o.name: o for o in ak.overrides()}
        entry["routed"] = [info[n].routed for n in names]
        entry["failed"] = [info[n].failed for n in names]
        for n in names:
            ak.unregister(n)
        entry["after_unregister"] = [o.name for o in ak.overrides()]
        entry["matches_reference"] = _tolerance.compare(got, run())[1]
        report["routing"][name] = entry
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def interpreted():
    if not TRITON:
        pytest.skip("triton not installed (tox envs install it)")
    cache: dict = {}

    def get(path):
        if path not in cache:
            numerics = "numerics" if path == PATHS[-1] else "-"  # the numerics once: they do not depend on the path
            cache[path] = interpreted_report(SCRIPT, path, numerics)
        return cache[path]

    return get


def test_interpreter_numerics_match_the_reference_with_poisoned_outputs(interpreted):
    report = interpreted(PATHS[-1])
    ops = {e["op"].split("[")[0] for e in report["numerics"]}
    assert ops == {"swiglu", "swiglu_bwd", "swiglu_strided", "swiglu_bwd_strided", "rope", "rope_layout",
                   "rope_bwd", "rms_norm_hf", "rms_norm_hf_bwd"}
    assert len(report["numerics"]) >= 100
    assert [e for e in report["numerics"] if e["problem"] is not None] == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("family", ["swiglu", "rope", "rms_norm_hf"])
def test_interpreter_round_trip_register_route_unregister(interpreted, path, family):
    entry = interpreted(path)["routing"][family]
    assert entry["names"] == [f"{family}_fwd.triton", f"{family}_bwd.triton"]
    assert entry["paths"] == [{"CPU": "accel"}] * 2  # accel's router: the native registry serves aten ops only
    assert entry["routed"] == [1, 1] and entry["failed"] == [0, 0]
    assert entry["after_unregister"] == []
    assert entry["matches_reference"] is None
    if family == "swiglu":
        assert entry["explain"] == "swiglu_fwd.triton"


def test_registration_imports_no_dsl_runtime():
    code = textwrap.dedent("""
        import sys
        from accel.kernels.ops.swiglu import triton_impl as a
        from accel.kernels.ops.rope import triton_impl as b
        from accel.kernels.ops.rms_norm_hf import triton_impl as c
        import accel.kernels as ak
        assert {"swiglu", "rope", "rms_norm_hf"} <= set(ak.families())
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'helion')))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_reference_docstring_examples_run():
    import doctest

    from accel.kernels.ops.rms_norm_hf import reference as rn_reference

    for module in (sw_reference, rope_reference, rn_reference, rn_op, sw_conditions):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__


# ---------------------------------------------------------------------------------- on a real NVIDIA GPU
def _cuda_shapes():
    """Per op the shapes of issue 22's HF Llama (4 x 2048 tokens, d 2048, 16/8 heads of 128, MLP 5632) and odd ones."""
    return {"swiglu": [(8192, 5632), (3, 1000, 1000)],
            "rope": [(4, 16, 8, 2048, 128), (2, 12, 4, 77, 64)],
            "rms_norm_hf": [(8192, 2048), (4, 2048, 8, 128), (33, 3000)]}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
def test_cuda_kernels_match_the_reference_with_poisoned_outputs(dtype):
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.ops.rms_norm_hf import reference as rn_ref
    from accel.kernels.ops.rms_norm_hf import triton_impl as rn_impl
    from accel.kernels.ops.rope import triton_impl as rope_impl
    from accel.kernels.ops.swiglu import triton_impl as sw_impl
    from accel.kernels.tuning import tolerance as _tolerance

    dev = "cuda"
    bad = []
    _launch.poison_outputs = True
    try:
        for shape in _cuda_shapes()["swiglu"]:
            a, b, dy = (torch.randn(shape, dtype=dtype, device=dev) for _ in range(3))
            bad.append(_tolerance.compare(sw_impl.swiglu(a, b), sw_reference.swiglu(a, b))[1])
            bad.append(_tolerance.compare(sw_impl.swiglu_backward(dy, a, b), sw_reference.swiglu_backward(dy, a, b))[1])
        gate, up = torch.randn(4096, 2 * 5632, dtype=dtype, device=dev).chunk(2, dim=-1)
        bad.append(_tolerance.compare(sw_impl.swiglu(gate, up), sw_reference.swiglu(gate, up))[1])
        for b_, hq, hk, s, d in _cuda_shapes()["rope"]:
            q = torch.randn(b_, s, hq, d, dtype=dtype, device=dev).transpose(1, 2)
            k = torch.randn(b_, s, hk, d, dtype=dtype, device=dev).transpose(1, 2)
            cos, sin = (torch.randn(1, s, d, dtype=dtype, device=dev) for _ in range(2))
            for backward, kernel, reference in ((False, rope_impl.rope, rope_reference.rope),
                                                (True, rope_impl.rope_backward, rope_reference.rope_backward)):
                bad.append(rope_compare(kernel(q, k, cos, sin), reference(q, k, cos, sin), q, k, cos, sin, 1,
                                        backward)[1])
        for shape in _cuda_shapes()["rms_norm_hf"]:
            x = torch.randn(shape, dtype=dtype, device=dev) * 3
            w, dy = torch.randn(shape[-1], dtype=dtype, device=dev), torch.randn(shape, dtype=dtype, device=dev)
            rows = x.numel() // shape[-1]
            for unit in (False, True):
                ref = rn_ref.rms_norm_hf(x, w, 1e-6, unit)
                bad.append(_tolerance.compare(rn_impl.rms_norm_hf(x, w, 1e-6, unit), ref)[1])
                gx, gw = rn_impl.rms_norm_hf_backward(dy, x, w, ref[1], unit, True, True)
                rx, rw = rn_ref.rms_norm_hf_backward(dy, x, w, ref[1], unit, True, True)
                bad.append(_tolerance.compare(gx, rx)[1])
                rtol, atol = _tolerance.tolerance(dtype)  # dw sums every row: its rounding grows with their number
                if not torch.allclose(gw.float(), rw.float(), rtol=rtol, atol=atol * max(1.0, (rows / 1024) ** 0.5)):
                    bad.append(f"dw {list(shape)} {dtype}: max abs error {(gw.float() - rw.float()).abs().max():.3g}")
    finally:
        _launch.poison_outputs = False
    assert [p for p in bad if p is not None] == []


@pytest.mark.cuda
def test_cuda_install_routes_the_custom_ops_forward_and_backward():
    import accel.kernels as ak

    names = ak.install(kernels=["swiglu", "rope", "rms_norm_hf"])
    try:
        assert {"swiglu_fwd.triton", "rope_bwd.triton", "rms_norm_hf_fwd.triton"} <= set(names)
        dev, dt = "cuda", torch.bfloat16
        a = torch.randn(8192, 5632, device=dev, dtype=dt, requires_grad=True)
        x = torch.randn(8192, 2048, device=dev, dtype=dt, requires_grad=True)
        w = torch.ones(2048, device=dev, dtype=dt, requires_grad=True)
        q = torch.randn(4, 2048, 16, 128, device=dev, dtype=dt).transpose(1, 2).requires_grad_()
        cos, sin = (torch.randn(1, 2048, 128, device=dev, dtype=dt) for _ in range(2))
        total = sw_op.swiglu(a, a).float().sum() + rn_op.rms_norm(x, w, 1e-6).float().sum()
        total = total + sum(o.float().sum() for o in rope_op.rope(q, q, cos, sin))
        total.backward()
        routed = {o.name: o.routed for o in ak.overrides()}
        for family in ("swiglu", "rope", "rms_norm_hf"):
            assert routed[f"{family}_fwd.triton"] >= 1 and routed[f"{family}_bwd.triton"] >= 1, routed
    finally:
        for n in names:
            ak.unregister(n)
