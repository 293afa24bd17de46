"""``accel::add_rms_norm_hf``: the residual add fused into the model-rounding RMSNorm.

The four kernel tests (cond on meta and fake-CUDA tensors; numerics; register -> route -> unregister ->
fallback; all kernel code in Triton's interpreter on CPU, in one subprocess because ``TRITON_INTERPRET=1``
must be set before Triton is imported), and the custom ops themselves: the reference is the unfused
``input + residual`` and ``accel::rms_norm_hf`` bit for bit, forward and autograd (Llama and Gemma rounding,
fp32 and bf16), the fake kernels and autograd registrations pass ``torch.library.opcheck``, the ops trace under
``torch.compile``, and bad arguments raise the reference check's message.

Bit for bit in the interpreter: the kernels' sum is torch's ``input + residual``, their ``(y, rstd)`` are
rms_norm_hf's kernel's on that sum, their input gradient is rms_norm_hf's kernel's plus ``grad_sum`` in the
dtype, and the routed fused op's gradients are the routed unfused ops'. Against the eager reference itself
``y``, ``rstd`` and the gradients agree within the per-dtype tolerance only, as rms_norm_hf's kernels do
(another summation order; the interpreter's fp32 -> bf16 cast truncates).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from accel.kernels.ops.add_rms_norm_hf import conditions as add_conditions
from accel.kernels.ops.add_rms_norm_hf import op as add_op
from accel.kernels.ops.add_rms_norm_hf import reference as add_reference
from accel.kernels.ops.rms_norm_hf import op as rn_op
from accel.kernels.ops.rms_norm_hf import reference as rn_reference
from accel.kernels.tuning import table as tuning

from accel import _compat
from _kernel_helpers import meta_floors  # noqa: F401 (fixture: the meta arch declares the 2**20 floors)
from _kernel_helpers import OpLog, interpreted_report, saved_storages

pytestmark = [pytest.mark.cpu, pytest.mark.usefixtures("meta_floors")]

PATHS = ["accel"] + (["native"] if _compat.native_dsl_registry() is not None else [])
TRITON = importlib.util.find_spec("triton") is not None
EPS = 1e-6


@pytest.fixture(autouse=True)
def _fresh_arch():
    from accel.kernels.ops import conds

    conds.arch.cache_clear()
    yield
    conds.arch.cache_clear()


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


# ------------------------------------------------------------------------------------- cond on meta tensors
def test_cond_accepts_and_rejects_with_reasons_on_meta():
    fwd, bwd = add_conditions.make_conds("triton", ["meta"])
    x, w = _meta(8192, 2048), _meta(2048)
    rstd = torch.empty(8192, device="meta")
    for unit in (False, True):
        assert fwd(x, x, w, EPS, unit) and fwd.why_not(x, x, w, EPS, unit) is None
        assert bwd(x, x, x, w, rstd, unit, True, True) and bwd(x, None, x, w, rstd, unit, True, True)
    assert fwd(_meta(4, 2048, 2048), _meta(4, 2048, 2048), w, EPS)  # [B, S, D] hidden states
    cases = [((x, _meta(8192, 2048, dtype=torch.float32), w, EPS), "residual differs from the input"),
             ((x, _meta(4096, 4096), w, EPS), "residual differs from the input"),
             ((x, _meta(2048, 8192).t(), w, EPS), "residual differs from the input"),
             ((x, x, _meta(2048, dtype=torch.float32), EPS), "weight differs from the input in dtype"),
             ((x, x, _meta(1024), EPS), "not [N] for input"),
             ((_meta(2048, 8192).t(), x, w, EPS), "input (sum, for the backward) not contiguous"),
             ((_meta(64, 32768), _meta(64, 32768), _meta(32768), EPS), "N > 16384"),
             ((_meta(4, 64), _meta(4, 64), _meta(64), EPS), "default floor"),
             ((torch.empty(2048, 1024), torch.empty(2048, 1024), torch.empty(1024), EPS), "device type 'cpu'")]
    for args, reason in cases:
        assert fwd(*args) is False and reason in fwd.why_not(*args), reason
    for grad_sum, reason in ((_meta(8192, 2048, dtype=torch.float32), "grad_sum differs from sum"),
                             (_meta(2048, 8192).t(), "grad_sum differs from sum")):
        assert reason in bwd.why_not(x, grad_sum, x, w, rstd, False, True, True)
        assert bwd(x, grad_sum, x, w, rstd, False, False, True)  # no input gradient: grad_sum is not read
    assert "grad_y differs from sum" in bwd.why_not(_meta(8192, 1024), x, x, w, rstd, False, True, True)
    assert "rstd" in bwd.why_not(x, x, x, w, rstd.to(torch.bfloat16), False, True, True)
    assert bwd(_meta(2048, 8192).t(), x, x, w, rstd, False, True, True)  # a strided grad_y: the impl copies it


def test_conds_consult_the_tuning_table_and_the_shipped_defaults_on_fake_cuda_tensors(fake_backend, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    shipped = tuning.defaults("sm_90")
    for dtype in ("bfloat16", "float16", "float32"):  # the floors of rms_norm_hf's rows, declared per op
        for direction in ("fwd", "bwd"):
            ours = shipped[(f"add_rms_norm_hf_{direction}", dtype, "triton")]
            assert ours.min_numel == shipped[(f"rms_norm_hf_{direction}", dtype, "triton")].min_numel == 1 << 20
            assert "rms_norm_hf" in ours.why or "not measured" in ours.why
    folded: dict = {}
    tuning._fold(folded, [{"op": "add_rms_norm_hf_fwd", "dtype": "bfloat16", "m": 8192, "n": 2048,
                           "impl": "aten"}], "user")
    monkeypatch.setattr(tuning, "table", lambda arch: folded if arch == "sm_90" else {})
    fwd, _ = add_conditions.make_conds("triton", ["cuda"])
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        x = torch.empty(8192, 2048, dtype=torch.bfloat16, device="cuda")
        other = torch.empty(4096, 2048, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(2048, dtype=torch.bfloat16, device="cuda")
        with fake_backend("cuda", arch="sm_90"):
            assert "sm_90 picks aten" in fwd.why_not(x, x, w, EPS)
            assert fwd(other, other, w, EPS)  # another bucket: a table miss, large enough


# ------------------------------------------------------------- the reference is the unfused ops bit for bit
def _inputs(dtype, shape=(3, 7, 48), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(shape, generator=g) * 4).to(dtype)
    r = (torch.randn(shape, generator=g) * 4).to(dtype)
    w = torch.randn(shape[-1], generator=g).to(dtype)
    g1, g2 = (torch.randn(shape, generator=g).to(dtype) for _ in range(2))
    return a, r, w, g1, g2


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("unit", (False, True), ids=("llama", "gemma"))
def test_reference_forward_is_the_add_then_rms_norm_hf(dtype, unit):
    a, r, w, _, _ = _inputs(dtype)
    s, y, rstd = add_reference.add_rms_norm_hf(a, r, w, EPS, unit)
    assert s.dtype == dtype and torch.equal(s, a + r)
    ry, rrstd = rn_reference.rms_norm_hf(a + r, w, EPS, unit)
    assert torch.equal(y, ry) and torch.equal(rstd, rrstd) and rstd.shape == a.shape[:-1]
    ops = torch.ops.accel.add_rms_norm_hf(a, r, w, EPS, unit)  # the custom op's default kernel: the same
    assert all(torch.equal(p, q) for p, q in zip(ops, (s, y, rstd)))
    s, mixed = add_op.add_rms_norm(a.bfloat16(), r.bfloat16(), w.float(), EPS, unit)  # bf16 in, fp32 weight
    assert s.dtype == torch.bfloat16 and mixed.dtype == (torch.bfloat16 if unit else torch.float32)


def _grads(fn, leaves, loss):
    leaves = [t.detach().requires_grad_() for t in leaves]
    out = fn(*leaves)
    return out, torch.autograd.grad(loss(*out), leaves, allow_unused=True)


def _fused(unit):
    return lambda a, r, w: add_op.add_rms_norm(a, r, w, EPS, unit)


def _unfused(unit):
    def run(a, r, w):
        s = a + r
        return s, rn_op.rms_norm(s, w, EPS, unit)

    return run


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("unit", (False, True), ids=("llama", "gemma"))
def test_autograd_equals_the_unfused_ops_bit_for_bit(dtype, unit):
    a, r, w, g1, g2 = _inputs(dtype)
    losses = {"sum and y": lambda s, y: (s * g1).sum() + (y * g2).sum(),  # grad_sum and grad_y
              "y only": lambda s, y: (y * g2).sum(),                      # grad_sum None
              "sum only": lambda s, y: (s * g1).sum() + 0 * y.detach().sum()}  # grad_y None
    for name, loss in losses.items():
        (s, y), ours = _grads(_fused(unit), [a, r, w], loss)
        (us, uy), theirs = _grads(_unfused(unit), [a, r, w], loss)
        assert torch.equal(s, us) and torch.equal(y, uy), name
        for which, o, t in zip(("input", "residual", "weight"), ours, theirs):
            assert (o is None) == (t is None), (name, which)
            assert o is None or (o.dtype == t.dtype and torch.equal(o, t)), (name, which)
    (_, _), (ga, gr, gw) = _grads(_fused(unit), [a, r, w], losses["sum only"])
    assert torch.equal(ga, g1) and torch.equal(gr, g1) and gw is None  # grad_sum itself, no kernel


def test_frozen_leaves_get_no_gradient_and_the_rest_the_unfused_bits():
    a, r, w, g1, g2 = _inputs(torch.bfloat16, seed=1)
    for frozen in ("input", "residual", "weight"):
        leaves = {"input": a, "residual": r, "weight": w}
        grads = {}
        for name, fn in (("fused", _fused(False)), ("unfused", _unfused(False))):
            xs = {k: v.detach().requires_grad_(k != frozen) for k, v in leaves.items()}
            s, y = fn(*xs.values())
            want = [v for k, v in xs.items() if k != frozen]
            grads[name] = torch.autograd.grad((s * g1).sum() + (y * g2).sum(), want)
        assert all(torch.equal(o, t) for o, t in zip(grads["fused"], grads["unfused"])), frozen


def test_grad_y_none_runs_no_backward_kernel_and_both_none_gives_nones():
    a, r, w, g1, _ = _inputs(torch.float32)
    a, r, w = (t.requires_grad_() for t in (a, r, w))
    s, y = add_op.add_rms_norm(a, r, w, EPS)
    with OpLog() as seen:
        s.backward(g1)
    assert not any("add_rms_norm_hf_backward" in o for o in seen.ops), seen.ops
    assert torch.equal(a.grad, g1) and torch.equal(r.grad, g1) and w.grad is None
    s, y, rstd = torch.ops.accel.add_rms_norm_hf(a, r, w, EPS, False)
    assert not rstd.requires_grad  # non-differentiable
    assert torch.autograd.grad(rstd.sum() * 0 + s.sum() * 0, [w], allow_unused=True) == (None,)


def test_backward_op_adds_grad_sum_in_the_dtype_and_leaves_out_what_is_not_asked():
    a, r, w, g1, g2 = _inputs(torch.bfloat16, seed=2)
    s, _, rstd = add_reference.add_rms_norm_hf(a, r, w, EPS, False)
    dx, dw = rn_reference.rms_norm_hf_backward(g2, s, w, rstd, False, True, True)
    gx, gw = torch.ops.accel.add_rms_norm_hf_backward(g2, g1, s, w, rstd, False, True, True)
    assert torch.equal(gx, dx + g1) and torch.equal(gw, dw) and gx.dtype == torch.bfloat16
    gx, gw = torch.ops.accel.add_rms_norm_hf_backward(g2, None, s, w, rstd, False, True, False)
    assert torch.equal(gx, dx) and gw.shape == (0,)
    gx, gw = torch.ops.accel.add_rms_norm_hf_backward(g2, g1, s, w, rstd, False, False, True)
    assert gx.shape == (0,) and torch.equal(gw, dw)


def test_autograd_saves_the_sum_weight_and_rstd_only():
    a, r, w, _, _ = _inputs(torch.bfloat16)
    a, r, w = (t.requires_grad_() for t in (a, r, w))
    (s, y), saved = saved_storages(lambda: add_op.add_rms_norm(a, r, w, EPS), exclude=())
    kept = set(saved)
    assert s.untyped_storage().data_ptr() in kept and w.untyped_storage().data_ptr() in kept
    assert a.untyped_storage().data_ptr() not in kept and r.untyped_storage().data_ptr() not in kept
    assert len(kept) == 3  # sum, weight, rstd


def test_bad_arguments_raise_the_reference_checks_message():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(2, 4)
    cases = [((x, torch.randn(2, 4, dtype=torch.bfloat16), torch.ones(4)),
              r"accel::add_rms_norm_hf: input \[2, 4\] torch.float32 on cpu, residual \[2, 4\] torch.bfloat16 on "
              r"cpu. The residual must have the input's shape, dtype and device"),
             ((x, torch.randn(4, 2), torch.ones(4)), r"input \[2, 4\] torch.float32 on cpu, residual \[4, 2\]"),
             ((x, x, torch.ones(3)), r"accel::add_rms_norm_hf: input \[2, 4\], weight \[3\]. The weight must be")]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=message):
            add_op.add_rms_norm(*args, EPS)
        with pytest.raises(RuntimeError, match=message):
            with FakeTensorMode() as mode:
                torch.ops.accel.add_rms_norm_hf(*(mode.from_tensor(t) for t in args), EPS)
    s, _, rstd = add_reference.add_rms_norm_hf(x, x, torch.ones(4), EPS)
    with pytest.raises(RuntimeError, match=r"accel::add_rms_norm_hf_backward: sum \[2, 4\] torch.float32 on cpu, "
                                           r"grad_sum \[2, 4\] torch.float16 on cpu. The grad_sum must have"):
        torch.ops.accel.add_rms_norm_hf_backward(x, x.half(), s, torch.ones(4), rstd, False, True, True)


def test_custom_ops_pass_opcheck_and_trace_under_compile():
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    a, r, w, g1, g2 = _inputs(torch.float32, shape=(3, 4, 16))
    a, r, w = (t.requires_grad_() for t in (a, r, w))
    for unit in (False, True):
        torch.library.opcheck(add_op.add_rms_norm_hf, (a, r, w, EPS, unit), test_utils=checks)
    s, _, rstd = add_reference.add_rms_norm_hf(a.detach(), r.detach(), w.detach(), EPS)
    for grad_sum in (g1, None):
        torch.library.opcheck(add_op.add_rms_norm_hf_backward, (g2, grad_sum, s, w.detach(), rstd, False, True, True),
                              test_utils=("test_schema", "test_faketensor"))

    def step(a, r, w):
        s, y = add_op.add_rms_norm(a, r, w, EPS)
        return (s * g1).sum() + (y * g2).sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(a, r, w), step(a, r, w), rtol=0, atol=0)
    grads = torch.autograd.grad(compiled(a, r, w), (a, r, w))
    assert all(torch.equal(p, q) for p, q in zip(grads, torch.autograd.grad(step(a, r, w), (a, r, w))))


def test_docstring_examples_run():
    import doctest

    for module in (add_reference, add_op):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__


# ------------------------------------------------------------------------------------ interpreter runs
SCRIPT = textwrap.dedent("""
    import json, sys, torch
    import accel.kernels as ak
    from accel.kernels.tuning import tolerance as _tolerance, table as tuning
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.ops.add_rms_norm_hf import reference as ref, triton_impl as impl, op as add_op
    from accel.kernels.ops.rms_norm_hf import reference as rn_ref, triton_impl as rn_impl, op as rn_op
    _launch.poison_outputs = True          # unwritten outputs stay NaN and fail the comparison
    tuning.MIN_NUMEL["triton"] = 0         # tiny interpreter shapes must route
    torch.manual_seed(0)
    report = {"numerics": [], "routing": {}}

    def exact(op, dtype, shape, out, want):
        outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
        bad = [i for i, (o, w) in enumerate(zip(outs, wants))
               if o.dtype != w.dtype or o.shape != w.shape or not torch.equal(o, w)]
        report["numerics"].append(dict(op=op, dtype=str(dtype), shape=list(shape), kind="exact",
                                       problem=f"outputs {bad} differ" if bad else None))

    def close(op, dtype, shape, out, want):
        report["numerics"].append(dict(op=op, dtype=str(dtype), shape=list(shape), kind="close",
                                       problem=_tolerance.compare(out, want)[1]))

    bf16 = torch.bfloat16
    # sums half an ulp from two bf16 values (ties: to even), overflow to inf, inf, signed zeros (not subnormals:
    # the interpreter's bf16 -> fp32 load flushes them)
    ties = torch.tensor([1.0, 1.0078125, -1.0, 3.0e38, float("inf"), 256.0, 258.0, -0.0], dtype=bf16)
    halves = torch.tensor([0.00390625, 0.00390625, -0.00390625, 3.0e38, 1.0, 1.0, 1.0, -0.0], dtype=bf16)

    for dtype in (torch.float32, torch.bfloat16, torch.float16) if sys.argv[2] == "numerics" else ():
        shapes = [(1, 8), (7, 1000), (2, 3, 40), (3, 5000)]
        for shape in shapes:
            x, r = torch.randn(shape, dtype=dtype) * 3, torch.randn(shape, dtype=dtype) * 3
            w = torch.randn(shape[-1], dtype=dtype)
            dy, ds = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
            for unit in (False, True):
                eps = float(torch.rand(())) * 1e-4
                s, y, rstd = impl.add_rms_norm_hf(x, r, w, eps, unit)
                exact(f"sum[{unit}]", dtype, shape, s, x + r)
                exact(f"norm[{unit}]", dtype, shape, (y, rstd), rn_impl.rms_norm_hf(x + r, w, eps, unit))
                close(f"fwd_vs_reference[{unit}]", dtype, shape, (s, y, rstd), ref.add_rms_norm_hf(x, r, w, eps, unit))
                for mask in ((True, True), (True, False), (False, True)):
                    dx, dw = rn_impl.rms_norm_hf_backward(dy, s, w, rstd, unit, *mask)
                    want = (dx + ds if mask[0] else dx, dw)
                    exact(f"bwd[{unit},{mask}]", dtype, shape,
                          impl.add_rms_norm_hf_backward(dy, ds, s, w, rstd, unit, *mask), want)
                    exact(f"bwd_no_grad_sum[{unit},{mask}]", dtype, shape,
                          impl.add_rms_norm_hf_backward(dy, None, s, w, rstd, unit, *mask), (dx, dw))
                    gx, _ = impl.add_rms_norm_hf_backward(dy, ds, s, w, rstd, unit, *mask)
                    if mask[0]:
                        close(f"bwd_vs_reference[{unit},{mask}]", dtype, shape, gx,
                              ref.add_rms_norm_hf_backward(dy, ds, s, w, rstd, unit, *mask)[0])
                strided = torch.randn(shape[::-1], dtype=dtype).permute(*range(len(shape) - 1, -1, -1))
                dx, dw = rn_impl.rms_norm_hf_backward(strided, s, w, rstd, unit, True, True)
                exact(f"bwd_strided[{unit}]", dtype, shape,
                      impl.add_rms_norm_hf_backward(strided, ds, s, w, rstd, unit, True, True), (dx + ds, dw))
        if dtype == bf16:   # torch's rounding where it is easiest to get wrong
            x, r = ties.repeat(4, 1), halves.repeat(4, 1)
            exact("sum_rounding", dtype, x.shape, impl.add_rms_norm_hf(x, r, torch.ones(8, dtype=bf16), 1e-6)[0], x + r)

    # register -> call the op with autograd -> routed -> unregister -> the reference again
    ak.use_registry(sys.argv[1])
    g = torch.Generator().manual_seed(0)
    a, r = (torch.randn(3, 4, 32, generator=g).requires_grad_() for _ in range(2))
    w = torch.randn(32, generator=g).requires_grad_()
    g1, g2 = torch.randn(3, 4, 32, generator=g), torch.randn(3, 4, 32, generator=g)

    def run(fused=True, unit=True):
        if fused:
            s, y = add_op.add_rms_norm(a, r, w, 1e-6, unit)
        else:
            s = a + r
            y = rn_op.rms_norm(s, w, 1e-6, unit)
        grads = torch.autograd.grad((s * g1).sum() + (y * g2).sum(), (a, r, w))
        return (s.detach(), y.detach(), *grads)

    names = impl.register(["cpu"])
    info = {o.name: o for o in ak.overrides()}
    entry = {"names": names, "paths": [info[n].paths for n in names]}
    got = run()
    info = {o.name: o for o in ak.overrides()}
    entry["routed"] = [info[n].routed for n in names]
    entry["failed"] = [info[n].failed for n in names]
    rn_names = rn_impl.register(["cpu"])   # the unfused ops through rms_norm_hf's kernels: the same bits
    entry["equals_unfused_routed"] = [bool(torch.equal(p, q)) for p, q in zip(got, run(fused=False))]
    entry["unfused_routed"] = [o.routed for o in ak.overrides() if o.name in rn_names]
    for n in rn_names + names:
        ak.unregister(n)
    entry["after_unregister"] = [o.name for o in ak.overrides()]
    entry["matches_reference"] = _tolerance.compare(got, run())[1]
    report["routing"] = entry
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


def test_interpreter_numerics_bit_for_bit_with_poisoned_outputs(interpreted):
    report = interpreted(PATHS[-1])
    ops = {e["op"].split("[")[0] for e in report["numerics"]}
    assert ops == {"sum", "norm", "fwd_vs_reference", "bwd", "bwd_no_grad_sum", "bwd_vs_reference", "bwd_strided",
                   "sum_rounding"}
    assert {e["dtype"] for e in report["numerics"] if e["kind"] == "exact"} == {
        "torch.float32", "torch.bfloat16", "torch.float16"}
    assert len(report["numerics"]) >= 280
    assert [e for e in report["numerics"] if e["problem"] is not None] == []


@pytest.mark.parametrize("path", PATHS)
def test_interpreter_round_trip_register_route_unregister(interpreted, path):
    entry = interpreted(path)["routing"]
    assert entry["names"] == ["add_rms_norm_hf_fwd.triton", "add_rms_norm_hf_bwd.triton"]
    assert entry["paths"] == [{"CPU": "accel"}] * 2  # accel's router: the native registry serves aten ops only
    assert entry["routed"] == [1, 1] and entry["failed"] == [0, 0]
    assert entry["equals_unfused_routed"] == [True] * 5 and entry["unfused_routed"] == [1, 1]
    assert entry["after_unregister"] == []
    assert entry["matches_reference"] is None


def test_registration_imports_no_dsl_runtime_and_the_family_is_listed():
    code = textwrap.dedent("""
        import sys
        from accel.kernels.ops.add_rms_norm_hf import triton_impl
        import accel.kernels as ak
        fam = ak.families()["add_rms_norm_hf"]
        assert fam.forward == "accel::add_rms_norm_hf" and fam.backward == "accel::add_rms_norm_hf_backward"
        assert fam.table_ops == ("add_rms_norm_hf_fwd", "add_rms_norm_hf_bwd") and fam.dsls == ("triton",)
        assert ("add_rms_norm_hf", "triton") in {(a.kernel, a.dsl) for a in ak.availability()}
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'helion')))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_aot_cases_compile_the_fused_flags():
    pytest.importorskip("triton")
    from accel.kernels.dsl import triton_aot
    from accel.kernels.ops import triton_aot_cases

    cases = triton_aot_cases.cases(["add_rms_norm_hf"])
    assert {(c.op, c.name) for c in cases} == {("add_rms_norm_hf_fwd", "rms_norm_hf_fwd"),
                                               ("add_rms_norm_hf_bwd", "rms_norm_hf_bwd")}
    assert all(c.constexprs.get("RESIDUAL", c.constexprs.get("ADD_GRAD")) is True for c in cases)
    plain = triton_aot_cases.cases(["rms_norm_hf"])
    assert all(c.constexprs.get("RESIDUAL", c.constexprs.get("ADD_GRAD")) is False for c in plain)
    assert triton_aot.excluded("add_rms_norm_hf_bwd", "sm_90", {"block_n": 16384}, "rms_norm_hf_bwd").kind == "spills"


# ---------------------------------------------------------------------------------- on a real NVIDIA GPU
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
def test_cuda_kernels_bit_for_bit_with_the_unfused_kernels(dtype):
    """HF Llama's hidden states (4 x 2048 tokens, d 2048), Qwen3's per-head shape, an odd one: the sum is torch's,
    the norm is rms_norm_hf's kernel's on it, the input gradient is that kernel's plus grad_sum in the dtype (fp32
    too: no FMA joins the add to the gradient's last multiply)."""
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.ops.add_rms_norm_hf import triton_impl as impl
    from accel.kernels.ops.rms_norm_hf import triton_impl as rn_impl
    from accel.kernels.tuning import tolerance as _tolerance

    bad = []
    _launch.poison_outputs = True
    try:
        for shape in ((8192, 2048), (4, 2048, 8, 128), (33, 3000)):
            x, r, dy, ds = (torch.randn(shape, dtype=dtype, device="cuda") * 3 for _ in range(4))
            w = torch.randn(shape[-1], dtype=dtype, device="cuda")
            for unit in (False, True):
                s, y, rstd = impl.add_rms_norm_hf(x, r, w, EPS, unit)
                ry, rrstd = rn_impl.rms_norm_hf(x + r, w, EPS, unit)
                checks = {"sum": (s, x + r), "y": (y, ry), "rstd": (rstd, rrstd)}
                dx, dw = rn_impl.rms_norm_hf_backward(dy, s, w, rstd, unit, True, True)
                gx, gw = impl.add_rms_norm_hf_backward(dy, ds, s, w, rstd, unit, True, True)
                checks.update(grad_input=(gx, dx + ds), grad_weight=(gw, dw))
                for name, (got, want) in checks.items():
                    if not torch.equal(got, want):
                        bad.append(f"{name} {list(shape)} {dtype} unit={unit}: "
                                   f"{int((got != want).sum())} of {got.numel()} differ")
                problem = _tolerance.compare((s, y, rstd), add_reference.add_rms_norm_hf(x, r, w, EPS, unit))[1]
                if problem is not None:
                    bad.append(f"forward vs reference {list(shape)} {dtype}: {problem}")
    finally:
        _launch.poison_outputs = False
    assert bad == []


@pytest.mark.cuda
def test_cuda_install_routes_the_custom_ops_forward_and_backward():
    import accel.kernels as ak

    names = ak.install(kernels=["add_rms_norm_hf", "rms_norm_hf"])
    try:
        assert {"add_rms_norm_hf_fwd.triton", "add_rms_norm_hf_bwd.triton"} <= set(names)
        a, r = (torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        w = torch.ones(2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g1, g2 = (torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))

        def grads(fused):
            if fused:
                s, y = add_op.add_rms_norm(a, r, w, EPS)
            else:
                s = a + r
                y = rn_op.rms_norm(s, w, EPS)
            return torch.autograd.grad((s * g1).float().sum() + (y * g2).float().sum(), (a, r, w))

        fused, unfused = grads(True), grads(False)
        assert all(torch.equal(p, q) for p, q in zip(fused, unfused))
        routed = {o.name: o.routed for o in ak.overrides()}
        assert routed["add_rms_norm_hf_fwd.triton"] >= 1 and routed["add_rms_norm_hf_bwd.triton"] >= 1, routed
    finally:
        for n in names:
            ak.unregister(n)
