"""accel's RMSNorm kernels on a real NVIDIA GPU: dispatch, routing, numerics, fail-safe, compile.

Marked ``cuda``: skipped (with the probe's reason) where no NVIDIA GPU is visible.
Numbers (GB/s) live in ``benchmarks/kernel_bench.py``, never here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import accel.kernels as ak
from accel.errors import KernelFallbackWarning
from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
from accel.kernels.ops.rms_norm import helion_impl, reference, triton_impl
from accel.testing.pytest_plugin import require_dsl

pytestmark = pytest.mark.cuda
FWD, BWD = "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"
IMPLS = {"triton": triton_impl, "helion": helion_impl}


@pytest.fixture(autouse=True)
def _clean():
    yield
    for o in ak.overrides():
        ak.unregister(o.name)
    ak.enable()
    ak.set_verify(False)
    _launch.poison_outputs = False


def _impl(dsl):
    ok, why = IMPLS[dsl].available()
    if not ok:
        pytest.skip(f"{dsl}: {why}")
    require_dsl(dsl)
    return IMPLS[dsl]


def test_rms_norm_dispatches_to_fused_ops_on_cuda():
    assert torch._C._dispatch_has_kernel_for_dispatch_key(FWD, "CUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(BWD, "CUDA")
    seen = []

    def cond(*args, **kwargs):
        seen.append(args[0].shape)
        return False

    ak.register(FWD, impl=reference.fused_rms_norm, cond=cond, backends=["cuda"], dsl="probe", name="f")
    ak.register(BWD, impl=reference.fused_rms_norm_backward, cond=cond, backends=["cuda"], dsl="probe", name="b")
    layer = torch.nn.RMSNorm(256, device="cuda")
    x = torch.randn(8, 256, device="cuda", requires_grad=True)
    layer(x).sum().backward()
    F.rms_norm(x.detach().half(), (256,), layer.weight.detach().half())
    assert len(seen) == 3, "nn.RMSNorm forward, its backward, and F.rms_norm in fp16 all reached the fused ops"


@pytest.mark.parametrize("dsl", sorted(IMPLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 4096), (300, 4096), (129, 1024), (64, 8192), (16, 16384), (33, 2048)])
def test_kernel_numerics_on_gpu(dsl, dtype, shape):
    impl = _impl(dsl)
    _launch.poison_outputs = True
    m, n = shape
    x = torch.randn(m, n, dtype=dtype, device="cuda")
    w = torch.randn(n, dtype=dtype, device="cuda")
    dy = torch.randn(m, n, dtype=dtype, device="cuda")
    out = impl.fused_rms_norm(x, [n], w, 1e-6)
    ref = reference.fused_rms_norm(x, [n], w, 1e-6)
    assert _tolerance.compare(out, ref)[1] is None
    aten = torch.ops.aten._fused_rms_norm.default(x, [n], w, 1e-6)
    assert [(t.shape, t.dtype) for t in out] == [(t.shape, t.dtype) for t in aten]
    assert _tolerance.compare(out, aten)[1] is None
    got = impl.fused_rms_norm_backward(dy, x, [n], aten[1], w, [True, True])
    want = torch.ops.aten._fused_rms_norm_backward.default(dy, x, [n], aten[1], w, [True, True])
    assert _tolerance.compare(got, reference.fused_rms_norm_backward(dy, x, [n], aten[1], w, [True, True]))[1] is None
    assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]


def test_triton_forward_without_weight_and_long_rows():
    _impl("triton")
    _launch.poison_outputs = True
    for n in (20000, 65536):
        x = torch.randn(3, n, dtype=torch.bfloat16, device="cuda")
        assert _tolerance.compare(triton_impl.fused_rms_norm(x, [n], None, None),
                                  reference.fused_rms_norm(x, [n], None, None))[1] is None


@pytest.mark.parametrize("dsl", sorted(IMPLS))
def test_nn_rmsnorm_model_routes_and_matches_aten(dsl, monkeypatch):
    impl = _impl(dsl)
    from accel.kernels.tuning import table as tuning

    monkeypatch.setitem(tuning.MIN_NUMEL, dsl, 0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.RMSNorm(1024), torch.nn.Linear(1024, 1024),
                                torch.nn.RMSNorm(1024)).cuda()
    x = torch.randn(64, 1024, device="cuda", requires_grad=True)
    model(x).square().mean().backward()
    want = (x.grad.clone(), model[1].weight.grad.clone())
    model.zero_grad()
    x.grad = None
    names = impl.register(["cuda"])
    model(x).square().mean().backward()
    info = {o.name: o for o in ak.overrides()}
    assert [info[n].routed for n in names] == [2, 2] and [info[n].failed for n in names] == [0, 0]
    assert set(info[names[0]].paths.values()) <= {"accel", "native"}
    assert _tolerance.compare((x.grad, model[1].weight.grad), want)[1] is None


def test_install_routes_real_shapes_and_verify_agrees():
    if not any(a.available for a in ak.availability()):
        pytest.skip("no built-in kernel available: " + "; ".join(a.reason for a in ak.availability()))
    names = ak.install()
    assert names and all(o.active for o in ak.overrides())
    ak.set_verify(True)
    # 16384 x 8192: a shape the shipped sm_90 table routes to a kernel in both directions
    x = torch.randn(16384, 8192, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(8192, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    y = F.rms_norm(x, (8192,), w, 1e-6)
    y.backward(torch.randn_like(y))  # a contiguous grad_out (sum().backward() gives an expanded one)
    routed = [o for o in ak.overrides() if o.routed]
    assert {o.op for o in routed} == {FWD, BWD}
    assert all(o.verified == o.routed and o.failed == 0 for o in routed)
    fwd_name = next(o.name for o in routed if o.op == FWD)
    assert ak.explain(FWD, x.detach(), [8192], w.detach(), 1e-6).kernel == fwd_name


def test_fail_safe_on_gpu():
    def broken(*args, **kwargs):
        raise RuntimeError("launch failed")

    ak.register(FWD, impl=broken, backends=["cuda"], dsl="triton", name="broken")
    x = torch.randn(8, 512, device="cuda")
    with pytest.warns(KernelFallbackWarning, match=r"\[8, 512\].*launch failed"):
        y = F.rms_norm(x, (512,))
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [512])[0])


def test_torch_compile_on_cuda_is_correct_with_overrides_installed(record_property):
    """Inductor may generate its own code for the op or call the ATen op (then routed): results match either way."""
    impl = _impl("triton")
    names = impl.register(["cuda"])
    torch._dynamo.reset()
    x = torch.randn(2048, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    y = torch.compile(lambda x, w: F.rms_norm(x, (4096,), w, 1e-6))(x, w)
    y.backward(torch.randn_like(y))
    assert _tolerance.compare(y.detach(), reference.fused_rms_norm(x.detach(), [4096], w.detach(), 1e-6)[0])[1] is None
    record_property("routed_under_inductor", {o.name: o.routed for o in ak.overrides() if o.name in names})


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_planned_routed_calls_launch_directly_and_match_aten(op, monkeypatch):
    """The Triton impls' plans (accel.kernels.core.plans): from the third call of one signature the plan's
    LaunchPlan launches the captured kernel itself; every call, outputs poisoned, matches ATen."""
    _impl("triton")
    from accel.kernels import core as kcore
    from accel.kernels.core import plans as _plans
    from accel.kernels.tuning import table as _tuning
    from accel.kernels.ops.layer_norm import triton_impl as ln_t
    from accel.kernels.ops.softmax import triton_impl as sm_t

    monkeypatch.setitem(_tuning.MIN_NUMEL, "triton", 0)
    _launch.poison_outputs = True
    names = {"rms_norm": triton_impl, "layer_norm": ln_t, "softmax": sm_t}[op].register(["cuda"])
    n = 4096
    w = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    run = {"rms_norm": lambda x: F.rms_norm(x, (n,), w, 1e-6), "layer_norm": lambda x: F.layer_norm(x, (n,), w, b),
           "softmax": lambda x: torch.softmax(x, -1)}[op]
    for _ in range(4):
        x = torch.randn(300, n, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        dy = torch.randn(300, n, dtype=torch.bfloat16, device="cuda")
        y = run(x)
        y.backward(dy)
        with ak.disabled():
            x2 = x.detach().requires_grad_()
            y2 = run(x2)
            y2.backward(dy)
        assert _tolerance.compare((y, x.grad), (y2, x2.grad))[1] is None
    planned = names if op != "layer_norm" else names[:1]  # the LayerNorm backward has no plan
    for name in planned:
        ov = kcore.override.OVERRIDES[name]
        assert ov.routed == 4 and ov.failed == 0, name
        plans = [p for p in ov.plans.values() if p is not _plans.DECLINE]
        assert len(plans) == 1 and plans[0].launch.kernel is not None, f"{name}: the plan launched its captured kernel"


@pytest.mark.parametrize("shape", [(8192, 16384), (1000, 9000), (3, 16384)])
def test_layer_norm_split_backward_on_gpu_matches_reference(shape):
    """Every split backward config the tuner may ship, on the GPU, where the parts of a row wait for each
    other in one launch (the interpreter publishes and finishes in two): dx, dw, db against the fp32
    reference and ATen, over many groups (8192 rows), ragged parts (9000) and fewer rows than programs."""
    from accel.kernels.ops.layer_norm import reference as lref, triton_impl as lt, triton_kernel as ltk

    _impl("triton")
    _launch.poison_outputs = True
    m, n = shape
    torch.manual_seed(m)
    x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda") * 2 + 1
    dy = torch.randn_like(x)
    w, b = torch.randn(n, dtype=x.dtype, device="cuda"), torch.randn(n, dtype=x.dtype, device="cuda")
    _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [n], w, b, 1e-5)
    configs = ltk.split_bwd_candidates(n)
    assert configs
    for want in ([True, True, True], [True, False, False], [False, True, True]):
        ref = lref.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, want)
        for cfg in configs:
            dx = _launch.empty((m, n), x.dtype, x.device) if want[0] else None
            dw, db = lt.launch_bwd(dy, x, w, mean.view(-1), rstd.view(-1), dx, want, cfg, True)
            got = (dx, None if dw is None else dw.to(x.dtype), None if db is None else db.to(x.dtype))
            for g, r in zip(got, ref):
                assert (g is None) == (r is None), cfg
                if g is not None:
                    assert _tolerance.compare(g, r)[1] is None, (cfg, want)
