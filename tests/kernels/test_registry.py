"""accel.kernels registry: routing, filters, explain, fail-safe, verification, errors — on both registry paths.

Routing is tested at the CPU dispatch key (this machine has no GPU) with eager
impls that count their calls; the same tests run once per registration path
(``accel``: accel's torch.library router; ``native``: torch._native, where usable).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import accel.kernels as ak
from accel import _compat
from accel.errors import KernelFallbackWarning, KernelRegistrationError, KernelRegistrationWarning, UnknownKernelError
from accel.kernels import core as kcore
from accel.kernels.ops.rms_norm import reference

FWD, BWD = "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"
from _kernel_helpers import PATHS, Counting, _clean_registry, path, register_forward_only  # noqa: F401 (fixtures)




def _register_pair(dsl="eager", cond=None, fwd=reference.fused_rms_norm, suffix=""):
    f, b = Counting(fwd), Counting(reference.fused_rms_norm_backward)
    # the backward first: a CPU forward override without it would break training (KernelRegistrationWarning)
    ak.register(BWD, impl=b, backends=["cpu"], dsl=dsl, name=f"b{suffix}",
                fallback=reference.fused_rms_norm_backward)
    ak.register(FWD, impl=f, backends=["cpu"], dsl=dsl, cond=cond, name=f"f{suffix}")
    return f, b


def _call(x, w=None):
    return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, 1e-6)


def _info(name):
    return next(o for o in ak.overrides() if o.name == name)


def test_round_trip_register_route_unregister(path):
    x = torch.randn(3, 16)
    before = _call(x)[0]
    f, _ = _register_pair()
    assert _info("f").paths == {"CPU": path}
    y, rstd = _call(x)
    assert f.calls == 1 and _info("f").routed == 1
    torch.testing.assert_close(y, before)
    ak.unregister("f")
    ak.unregister("b")
    _call(x)
    assert f.calls == 1, "after unregister ATen runs again"
    assert ak.overrides() == []


def test_nn_rmsnorm_autograd_routes_forward_and_backward(path):
    f, b = _register_pair()
    layer = torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16))
    x = torch.randn(4, 16, requires_grad=True)
    layer(x).square().sum().backward()
    assert f.calls == 1 and b.calls == 1
    gx, gw = x.grad.clone(), layer.weight.grad.clone()
    ak.unregister("f")
    ak.unregister("b")
    x.grad = None
    layer.weight.grad = None
    layer(x).square().sum().backward()  # ATen's composite (and its own autograd) on CPU
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, layer.weight.grad, rtol=1e-5, atol=1e-5)


def test_autocast_still_applies_above_the_override(path):
    f, _ = _register_pair()
    x, w = torch.randn(4, 16), torch.randn(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routed = F.rms_norm(x.bfloat16(), (16,), w.bfloat16(), 1e-6)
    assert f.calls == 1
    ak.unregister("f")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = F.rms_norm(x.bfloat16(), (16,), w.bfloat16(), 1e-6)
    assert routed.dtype == plain.dtype  # autocast's casting policy ran in both cases


def test_cond_false_runs_aten_and_counts_declined(path):
    f, _ = _register_pair(cond=lambda x, shape, w=None, eps=None: x.shape[0] > 2)
    _call(torch.randn(2, 16))
    assert f.calls == 0 and _info("f").declined == 1 and _info("f").fallbacks == 1
    _call(torch.randn(5, 16))
    assert f.calls == 1 and _info("f").routed == 1


def test_first_matching_override_wins(path):
    f1, _ = _register_pair(dsl="triton", cond=lambda x, *a, **k: x.shape[0] == 1)
    f2 = Counting(reference.fused_rms_norm)
    ak.register(FWD, impl=f2, backends=["cpu"], dsl="helion", name="second")
    _call(torch.randn(1, 16))
    _call(torch.randn(3, 16))
    assert (f1.calls, f2.calls) == (1, 1)
    assert ak.explain(FWD, torch.randn(1, 16), [16], None, 1e-6).kernel == "f"
    assert ak.explain(FWD, torch.randn(3, 16), [16], None, 1e-6).kernel == "second"


@pytest.mark.parametrize("how", [dict(op=FWD), dict(dsl="eager"), dict(backend="cpu"), dict(name="f"), dict()])
def test_disable_enable_and_context_manager(path, how):
    f, _ = _register_pair()
    x = torch.randn(2, 16)
    ak.disable(**how)
    _call(x)
    assert f.calls == 0
    info = _info("f")
    assert not info.active and info.inactive_reason
    assert ak.explain(FWD, x, [16], None, 1e-6).kernel == "aten"
    ak.enable(**how)
    _call(x)
    assert f.calls == 1
    with ak.disabled(**how):
        _call(x)
        assert f.calls == 1
    _call(x)
    assert f.calls == 2, "the context manager restored the previous state"


def test_disabled_context_keeps_an_outer_disable(path):
    f, _ = _register_pair()
    ak.disable(dsl="eager")
    with ak.disabled(dsl="eager"):
        pass
    _call(torch.randn(2, 16))
    assert f.calls == 0


def test_overrides_reports_registration(path):
    _register_pair()
    info = _info("f")
    assert (info.op, info.dsl, info.backends, info.dispatch_keys) == (FWD, "eager", ("cpu",), {"cpu": "CPU"})
    assert info.active and info.inactive_reason == ""
    d = info.as_dict()
    assert d["fallbacks"] == 0 and d["backends"] == ["cpu"]


def test_explain_lists_each_verdict_with_why_not(path):
    def cond(x, *a, **k):
        return False

    cond.why_not = lambda x, *a, **k: f"rows={x.shape[0]} too few"
    _register_pair(cond=cond)
    ak.register(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="helion", name="g")
    ak.disable(name="g")
    ex = ak.explain(FWD, torch.randn(2, 16), [16], None, 1e-6)
    assert ex.kernel == "aten" and ex.dispatch_key == "CPU"
    verdicts = dict(ex.steps)
    assert "rows=2 too few" in verdicts["f"] and "declines" in verdicts["f"]
    assert "disabled by name" in verdicts["g"]
    assert "runs aten" in str(ex)
    assert _info("f").declined == 0, "explain does not count"


def test_explain_other_key_and_unregistered_op():
    register_forward_only(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager", name="f")
    ex = ak.explain(FWD, torch.empty(2, 16, device="meta"), [16], None, None)
    assert ex.kernel == "aten" and "not registered at" in ex.steps[0][1]
    ex = ak.explain("aten::sin", torch.randn(2))
    assert len(ex.steps) == 1 and ex.steps[0][0] == "aten"
    assert ex.steps[0][1].startswith("no accel override registered for aten::sin (") and "`accel kernels`" in ex.steps[0][1]


def test_impl_that_raises_falls_back_once_per_shape(path):
    def broken(x, *a, **k):
        if x.shape[0] == 2:
            raise RuntimeError("compile failed")
        return reference.fused_rms_norm(x, *a, **k)

    f, _ = _register_pair(fwd=broken)
    x = torch.randn(2, 16)
    with pytest.warns(KernelFallbackWarning, match=r"aten::_fused_rms_norm.*\[2, 16\].*RuntimeError: compile failed"):
        y, _ = _call(x)
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [16], None, 1e-6)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(x)  # no second warning, impl not tried again for this shape
    assert f.calls == 1 and _info("f").failed == 1 and _info("f").denied_shapes == 1
    assert "failed on them before" in dict(ak.explain(FWD, x, [16], None, 1e-6).steps)["f"]
    _call(torch.randn(3, 16))
    assert f.calls == 2 and _info("f").routed == 1
    ak.reset_counters("f")
    assert _info("f").denied_shapes == 0 and _info("f").failed == 0


def test_cond_that_raises_counts_as_false_and_warns_once(path):
    def cond(*a, **k):
        raise ValueError("bad cond")

    f, _ = _register_pair(cond=cond)
    with pytest.warns(KernelFallbackWarning, match="cond of 'f'.*ValueError: bad cond"):
        _call(torch.randn(2, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(torch.randn(2, 16))
    assert f.calls == 0
    assert "cond raised ValueError" in dict(ak.explain(FWD, torch.randn(2, 16), [16], None, 1e-6).steps)["f"]


def test_verify_records_error_and_rejects_wrong_answers(path, monkeypatch):
    monkeypatch.setenv(kcore.state.VERIFY_ENV, "1")
    assert ak.set_verify() is False
    _register_pair()
    x = torch.randn(4, 16)
    _call(x)
    info = _info("f")
    assert info.verified == 1 and info.routed == 1 and 0.0 <= info.max_error < 1e-5
    ak.unregister("f")
    ak.unregister("b")

    def wrong(*a, **k):
        y, r = reference.fused_rms_norm(*a, **k)
        return y + 1, r

    _register_pair(fwd=wrong, suffix="w")
    with pytest.warns(KernelFallbackWarning, match="disagreed with ATen: output 0: max abs error 1"):
        y, _ = _call(x)
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [16], None, 1e-6)[0])
    info = _info("fw")
    assert info.failed == 1 and info.routed == 0 and info.max_error == pytest.approx(1.0, abs=1e-5)


def test_unregister_after_disable_and_slot_cleanup(path):
    _register_pair()
    ak.disable(dsl="eager")
    ak.unregister("f")
    ak.unregister("b")
    ak.enable(dsl="eager")
    assert kcore.slot.SLOTS == {}
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(FWD, "CPU")


# ------------------------------------------------------------------ native registry
native_only = pytest.mark.skipif("native" not in PATHS, reason=_compat.native_dsl_registry_reason())


@native_only
def test_python_native_controls_accel_kernels():
    import torch.backends.python_native as pn

    ak.use_registry("native")
    f, _ = _register_pair(dsl="triton")
    x = torch.randn(2, 16)
    with pn.triton.disabled():
        _call(x)
        assert f.calls == 0
        assert "torch.backends.python_native" in _info("f").inactive_reason
        assert "python_native" in dict(ak.explain(FWD, x, [16], None, 1e-6).steps)["f"]
    _call(x)
    assert f.calls == 1
    with pn.operations_disabled("_fused_rms_norm"):
        _call(x)
    assert f.calls == 1
    pn.disable_dispatch_keys("CPU")
    try:
        _call(x)
        assert f.calls == 1
    finally:
        pn.enable_dispatch_keys("CPU")
    _call(x)
    assert f.calls == 2
    assert "_fused_rms_norm" in pn.get_dsl_operations("triton")


@native_only
def test_backward_without_aten_kernel_uses_accel_router_even_on_native():
    ak.use_registry("native")
    _register_pair()
    assert _info("f").paths == {"CPU": "native"}
    assert _info("b").paths == {"CPU": "accel"}  # no CPU kernel for the native registry to fall back to


def test_unrecognised_native_registry_takes_the_router_and_says_so(monkeypatch):
    monkeypatch.setattr(_compat, "has_native_dsl_registry", lambda: True)
    monkeypatch.setattr(_compat, "native_dsl_registry", lambda: None)
    monkeypatch.setattr(_compat, "native_dsl_registry_reason", lambda: "torch._native of another shape (test)")
    ak.use_registry("auto")
    assert ak.registry_path() == "accel" and ak.registry_mode() == "auto"
    with pytest.warns(KernelRegistrationWarning, match=r"another shape \(test\); accel's kernels use accel's own "
                                                        r"router, so torch.backends.python_native does not switch them"):
        _register_pair()
    assert _info("f").paths == {"CPU": "accel"}
    with warnings.catch_warnings():
        # said once per process, not per registration
        warnings.filterwarnings("error", message=r"accel\.kernels: ", category=KernelRegistrationWarning)
        _register_pair(suffix="2")
    for o in reversed(ak.overrides()):  # the forward before the backward it needs
        ak.unregister(o.name)
    with pytest.raises(KernelRegistrationError, match=r"use_registry\('native'\): torch._native of another shape"):
        ak.use_registry("native")
    # the environment variable asks for the same: refused at registration, nothing registered
    kcore.state.STATE.path_mode = None
    monkeypatch.setenv(kcore.state.REGISTRY_ENV, "native")
    with pytest.raises(KernelRegistrationError, match=r"ACCEL_KERNELS_REGISTRY=native: torch._native of another shape"):
        _register_pair()
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}
    with pytest.raises(KernelRegistrationError, match="ACCEL_KERNELS_REGISTRY=native"):
        ak.registry_path()


def test_no_native_registry_routes_silently_where_torch_has_none(monkeypatch):
    monkeypatch.setattr(_compat, "has_native_dsl_registry", lambda: False)
    monkeypatch.setattr(_compat, "native_dsl_registry", lambda: None)
    with warnings.catch_warnings():
        # nothing to say (the registry's own warnings start "accel.kernels: "): torch has no registry to join
        warnings.filterwarnings("error", message=r"accel\.kernels: ", category=KernelRegistrationWarning)
        register_forward_only(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager", name="f",
                    cond=lambda *a, **k: False)
    assert _info("f").paths == {"CPU": "accel"} and ak.registry_path() == "accel"


def test_registry_path_is_the_path_taken():
    expected = "native" if _compat.native_dsl_registry() is not None else "accel"
    assert ak.registry_mode() == "auto" and ak.registry_path() == expected
    ak.use_registry("accel")
    assert ak.registry_path() == "accel"


def test_compat_rejects_a_changed_native_registry(monkeypatch):
    if not _compat.has_native_dsl_registry():
        pytest.skip(_compat.native_dsl_registry_reason())
    import torch._native.registry as reg

    before = _compat.native_dsl_registry()
    _compat.native_dsl_registry.cache_clear()
    monkeypatch.delattr(reg, "_register_overrides_from_graph")
    try:
        assert _compat.native_dsl_registry() is None
        assert "not a shape accel recognises (not namespaced: no _register_overrides_from_graph" in \
            _compat.native_dsl_registry_reason()
    finally:
        monkeypatch.undo()
        _compat.native_dsl_registry.cache_clear()
    after = _compat.native_dsl_registry()
    assert after.module is reg and after.generation == before.generation


def test_compat_rejects_a_renamed_parameter(monkeypatch):
    """A registry function whose parameters moved is refused by signature, not by version string."""
    if not _compat.has_native_dsl_registry():
        pytest.skip(_compat.native_dsl_registry_reason())
    import torch._native.registry as reg

    real = reg.register_op_override

    def register_op_override(dsl_name, op_symbol, lib_symbol, dispatch_key, cond, impl):  # swapped
        return real(dsl_name, lib_symbol, op_symbol, dispatch_key, cond, impl)

    _compat.native_dsl_registry.cache_clear()
    monkeypatch.setattr(reg, "register_op_override", register_op_override)
    try:
        assert _compat.native_dsl_registry() is None
        assert "register_op_override('dsl_name', 'op_symbol'" in _compat.native_dsl_registry_reason()
    finally:
        monkeypatch.undo()
        _compat.native_dsl_registry.cache_clear()
    assert _compat.native_dsl_registry() is not None


# ------------------------------------------------------------------ torch.compile
def _aot_graph_ops(fn, *args) -> set:
    """The ATen ops of the forward and backward graphs AOT autograd makes of ``fn`` on this torch."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    ops: set = set()

    def record(gm, example_inputs):
        ops.update(n.target for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    out = torch.compile(fn, backend=lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=record,
                                                                         bw_compiler=record))(*args)
    out.sum().backward()
    torch._dynamo.reset()
    return ops


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_routes_only_where_compiled_code_calls_the_aten_op(path, backend):
    """aot_eager runs the graph AOT autograd makes: routed, where that graph calls aten::_fused_rms_norm (with
    the override registered, torch 2.13+ keeps the op in the graph); Inductor generates its own RMSNorm code:
    not routed."""
    fn = lambda x, w: F.rms_norm(x, (16,), w, 1e-6)  # noqa: E731
    x, w = torch.randn(4, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    f, b = _register_pair()
    routed = backend == "aot_eager"
    if routed and torch.ops.aten._fused_rms_norm.default not in _aot_graph_ops(fn, x, w):
        pytest.skip(f"torch {torch.__version__}'s AOT autograd decomposes F.rms_norm (pow, mean, rsqrt) even with "
                    f"an override registered: its graph calls no aten::_fused_rms_norm, so compiled code has "
                    f"nothing to route")
    torch._dynamo.reset()
    f.calls = b.calls = 0
    x.grad = w.grad = None
    expect = reference.fused_rms_norm(x.detach(), [16], w.detach(), 1e-6)[0]
    y = torch.compile(fn, backend=backend)(x, w)
    y.sum().backward()
    torch.testing.assert_close(y.detach(), expect, rtol=1e-5, atol=1e-5)
    assert (f.calls > 0) is routed and (b.calls > 0) is routed, backend


# ------------------------------------------------------------------ errors
def test_register_errors_leave_no_state():
    impl = reference.fused_rms_norm
    cases = [
        (dict(op="aten::no_such_op", impl=impl, backends=["cpu"], dsl="x"), "unknown op 'aten::no_such_op'"),
        (dict(op=42, impl=impl, backends=["cpu"], dsl="x"), "is not an operator"),
        (dict(op=FWD, impl=3, backends=["cpu"], dsl="x"), "impl 3 is not callable"),
        (dict(op=FWD, impl=impl, cond=1, backends=["cpu"], dsl="x"), "cond 1 is not callable"),
        (dict(op=FWD, impl=impl, fallback=1, backends=["cpu"], dsl="x"), "fallback 1 is not callable"),
        (dict(op=FWD, impl=impl, backends=["cpu"], dsl=""), "dsl '' must be a non-empty string"),
        (dict(op=FWD, impl=impl, backends="cpu", dsl="x"), "Pass a non-empty list of backend names"),
        (dict(op=FWD, impl=impl, backends=["cdua"], dsl="x"), "unknown backend 'cdua'"),
        (dict(op=BWD, impl=impl, backends=["cpu"], dsl="x"), "ATen has no kernel for it at dispatch key 'CPU'"),
    ]
    for kwargs, message in cases:
        op = kwargs.pop("op")
        with pytest.raises(KernelRegistrationError, match=message.replace("(", r"\(").replace("[", r"\[")):
            ak.register(op, **kwargs)
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}
    register_forward_only(FWD, impl=impl, backends=["cpu"], dsl="x", name="dup")
    with pytest.raises(KernelRegistrationError, match="name 'dup' is already registered"):
        ak.register(torch.ops.aten._fused_rms_norm.default, impl=impl, backends=["cpu"], dsl="x", name="dup")


def test_register_without_get_kernel_explains(monkeypatch):
    monkeypatch.setattr(_compat, "library_get_kernel", lambda: None)
    with pytest.raises(KernelRegistrationError, match="has no torch.library.get_kernel"):
        ak.register(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="x")


def test_lookup_and_mode_errors(monkeypatch):
    with pytest.raises(UnknownKernelError, match="no override named 'nope'"):
        ak.unregister("nope")
    with pytest.raises(UnknownKernelError, match="disable: no override named 'nope'"):
        ak.disable(name="nope")
    with pytest.raises(UnknownKernelError, match="reset_counters: no override named 'nope'"):
        ak.reset_counters("nope")
    with pytest.raises(UnknownKernelError, match="unknown op 'aten::nope'"):
        ak.explain("aten::nope")
    with pytest.raises(KernelRegistrationError, match="unknown backend 'tpu'"):
        ak.disable(backend="tpu")
    with pytest.raises(KernelRegistrationError, match="unknown mode 'fast'"):
        ak.use_registry("fast")
    register_forward_only(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="x", name="held")
    with pytest.raises(KernelRegistrationError, match=r"1 override\(s\) still registered \(held\)"):
        ak.use_registry("accel")
    ak.unregister("held")
    kcore.state.STATE.path_mode = None
    monkeypatch.setenv(kcore.state.REGISTRY_ENV, "sideways")
    with pytest.raises(KernelRegistrationError, match="ACCEL_KERNELS_REGISTRY='sideways': not a registration path"):
        ak.registry_path()
    monkeypatch.setenv(kcore.state.REGISTRY_ENV, "accel")
    kcore.state.STATE.path_mode = None
    assert ak.registry_path() == "accel"


def test_op_spellings_resolve_to_the_same_op():
    names = [kcore.op.resolve_op(o).qualname for o in
             ("aten::_fused_rms_norm", "_fused_rms_norm", torch.ops.aten._fused_rms_norm,
              torch.ops.aten._fused_rms_norm.default)]
    assert set(names) == {FWD}
    assert kcore.op.resolve_op("aten::add.Tensor").symbol == "add.Tensor"


def test_impl_calling_its_own_op_gets_aten_not_itself(path):
    """An impl may call its own op (e.g. to hand a case back to ATen): ATen runs, no recursion."""
    calls = []

    def impl(x, shape, w=None, eps=None):
        calls.append(1)
        return torch.ops.aten._fused_rms_norm(x, shape, w, eps)  # back to the dispatcher: ATen this time

    register_forward_only(FWD, impl=impl, backends=["cpu"], dsl="eager", name="self-calling")
    x = torch.randn(2, 16)
    y = _call(x)[0]
    assert calls == [1] and _info("self-calling").routed == 1
    # leaving the block re-enables the forward-only override: accel says again that training would fail
    with pytest.warns(KernelRegistrationWarning, match="only a composite"), ak.disabled():
        torch.testing.assert_close(y, _call(x)[0])
    _call(x)  # the guard was released: the next call routes again
    assert calls == [1, 1]


@pytest.mark.parametrize("build, registered, active", [
    (None, ["rocm"], False), (None, ["cuda"], True), (None, ["cuda", "rocm"], True),
    ("7.0", ["cuda"], False), ("7.0", ["rocm"], True),
])
def test_a_vendor_the_build_does_not_serve_is_off_at_the_shared_cuda_key(build, registered, active):
    """'cuda' and 'rocm' share the CUDA dispatch key: a registration only for the other vendor stays off."""
    from unittest import mock

    with mock.patch.object(torch.version, "hip", build):
        ak.register(FWD, impl=reference.fused_rms_norm, backends=registered, dsl="eager", name="v")
        try:
            info = _info("v")
            assert info.active is active
            if not active:
                assert f"registered for {registered[0]}, but this torch build serves the CUDA key" \
                    in info.inactive_reason
        finally:
            ak.unregister("v")


def test_router_floor_gate_sends_small_calls_to_aten_without_a_cond():
    """accel's router: when every override's cond carries ``floor``, a call smaller than the least
    floor goes to ATen without any cond (one compare), counted as declined for each; at or above
    it the conds decide; the floors are re-read when the tuning tables change; one override without
    ``floor`` turns the gate off."""
    from accel.kernels.tuning import table as _tuning

    ak.use_registry("accel")  # the gate is the router's (torch's native registry calls each cond itself)
    seen = []
    floor = {"a": 64, "b": 32}

    def make(tag):
        def cond(x, normalized_shape, weight=None, eps=None):
            seen.append((tag, x.numel()))
            return tag == "b"
        cond.floor = lambda: floor[tag]
        return cond

    fa, fb = Counting(reference.fused_rms_norm), Counting(reference.fused_rms_norm)
    register_forward_only(FWD, impl=fa, backends=["cpu"], dsl="triton", cond=make("a"), name="ga")
    ak.register(FWD, impl=fb, backends=["cpu"], dsl="helion", cond=make("b"), name="gb")
    x_small, x_big = torch.randn(2, 8), torch.randn(4, 8)  # 16 < min(64, 32) <= 32
    torch.testing.assert_close(_call(x_small)[0], reference.fused_rms_norm(x_small, [8], None, 1e-6)[0])
    assert seen == [] and fa.calls == fb.calls == 0
    assert _info("ga").declined == 1 and _info("gb").declined == 1
    _call(x_big)
    assert seen == [("a", 32), ("b", 32)] and fb.calls == 1
    floor["b"] = 8  # a new table: the gate must re-read the floors
    seen.clear()
    _call(x_small)
    assert seen == []  # generation unchanged: still the cached floor 32
    _tuning.reload()
    _call(x_small)
    assert seen == [("a", 16), ("b", 16)] and fb.calls == 2
    ak.register(FWD, impl=Counting(reference.fused_rms_norm), backends=["cpu"], dsl="eager",
                cond=lambda *a, **k: False, name="gc")  # no floor: every cond runs again
    floor["b"] = 1 << 30
    _tuning.reload()
    seen.clear()
    _call(torch.randn(1, 8))
    assert [t for t, _ in seen] == ["a", "b"]


@pytest.mark.parametrize("bad", [lambda: torch.tensor([1, 2]), lambda: None, lambda: "64", lambda: 2.5,
                                 lambda: 1 / 0])
def test_router_floor_gate_off_for_a_floor_that_is_no_integer(bad):
    """A floor giving no integer (a 2-element tensor, None, a string, a float) or raising turns the gate off
    for that call: the cond decides, the user's call never sees an exception."""
    ak.use_registry("accel")
    calls = []

    def cond(x, normalized_shape, weight=None, eps=None):
        calls.append(x.numel())
        return True
    cond.floor = bad
    impl = Counting(reference.fused_rms_norm)
    register_forward_only(FWD, impl=impl, backends=["cpu"], dsl="eager", cond=cond, name="bf")
    x = torch.randn(2, 8)
    torch.testing.assert_close(_call(x)[0], reference.fused_rms_norm(x, [8], None, 1e-6)[0])
    assert calls == [16] and impl.calls == 1


def test_builtin_conds_carry_their_tuning_floor():
    from accel.kernels.tuning import table as _tuning
    from accel.kernels.ops.layer_norm import conditions as lc
    from accel.kernels.ops.rms_norm import conditions as rc
    from accel.kernels.ops.softmax import conditions as sc
    from accel.kernels.ops.conds import Limits

    lim = Limits(max_n_fwd=1024, max_n_bwd=1024)
    for family, mod in (("rms_norm", rc), ("softmax", sc), ("layer_norm", lc)):
        fwd, bwd = mod.make_conds("triton", ["cuda"], lim)
        assert fwd.floor() == _tuning.floor(f"{family}_fwd", "triton")
        assert bwd.floor() == _tuning.floor(f"{family}_bwd", "triton")


def test_router_floor_gate_follows_min_numel_changes_and_survives_a_bad_table(monkeypatch, tmp_path):
    """Changing tuning.MIN_NUMEL takes effect at once on the router path (no reload needed), and a
    malformed user table of any arch is ignored with a warning - never an exception in the user's call."""
    from accel.kernels.tuning import table as _tuning
    from accel.kernels.ops.conds import Limits
    from accel.kernels.ops.softmax import conditions as sc

    ak.use_registry("accel")
    monkeypatch.setenv("ACCEL_TUNING_DIR", str(tmp_path))
    saved = dict(_tuning.MIN_NUMEL)
    _tuning.reload()
    try:
        fwd, _ = sc.make_conds("triton", ["cpu"], Limits(1 << 16, 1 << 16))
        impl = Counting(lambda x, dim, half: torch.softmax(x, dim))
        ak.register("aten::_softmax", impl=impl, cond=fwd, backends=["cpu"], dsl="triton", name="sm")
        x = torch.randn(64, 64)
        torch.ops.aten._softmax(x, -1, False)
        assert impl.calls == 0  # 4096 elements < 2**20
        _tuning.MIN_NUMEL["triton"] = 0
        torch.ops.aten._softmax(x, -1, False)
        assert impl.calls == 1 and fwd(x, -1, False)
        (tmp_path / "sm_80.json").write_text('{"format": 1, "entries": ["oops"]}')
        _tuning.reload()
        with pytest.warns(KernelFallbackWarning, match="sm_80.json unreadable"):
            out = torch.ops.aten._softmax(x, -1, False)
        torch.testing.assert_close(out, torch.softmax(x, -1))
    finally:
        _tuning.MIN_NUMEL.clear()
        _tuning.MIN_NUMEL.update(saved)
        _tuning.reload()


def test_switching_one_op_leaves_the_other_ops_dispatcher_kernels_alone(path, monkeypatch):
    """disable/enable reinstall only the slots whose live overrides change (a reinstall swaps the
    dispatcher's kernel, which must not happen under other threads' calls of unrelated ops)."""
    _register_pair()
    ak.register("aten::_softmax", impl=lambda x, dim, h: torch.softmax(x, dim), backends=["cpu"], dsl="eager",
                name="sm")
    installed = []
    for module in {s.path for s in kcore.slot.SLOTS.values()}:
        real = module.install
        monkeypatch.setattr(module, "install", lambda slot, live, real=real: (installed.append(slot.op.symbol),
                                                                              real(slot, live))[1])
    ak.disable(op="aten::_softmax")
    ak.enable(op="aten::_softmax")
    assert installed == ["_softmax", "_softmax"]
    x = torch.randn(3, 16)
    _call(x)
    torch.ops.aten._softmax(x, -1, False)
    assert _info("f").routed == 1 and _info("sm").routed == 1


def test_overlapping_disabled_blocks_undo_only_their_own_filter(path):
    """Two disabled() blocks whose lifetimes overlap (two threads, or coroutines): each exit removes
    only what its block added, so both ops are on again at the end."""
    _register_pair()
    ak.register("aten::_softmax", impl=lambda x, dim, h: torch.softmax(x, dim), backends=["cpu"], dsl="eager",
                name="sm")
    a = ak.disabled(op="aten::_softmax")
    b = ak.disabled(op="aten::_fused_rms_norm")
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert _info("sm").active and not _info("f").active, "b's filter holds after a's block ends"
    b.__exit__(None, None, None)
    assert _info("sm").active and _info("f").active
    with ak.disabled(op="aten::_softmax"):
        ak.disable(op="aten::_fused_rms_norm")  # set inside the block by other code: not the block's to undo
    assert _info("sm").active and not _info("f").active


def test_disabled_blocks_hold_their_filter_until_the_last_one_exits(path):
    """Two blocks on the same filter, exited out of order (threads, generators): the op stays off until
    the last exits; a disable() made inside a block outlives it; an enable() inside does not end it."""
    _register_pair()
    a, b = ak.disabled(op=FWD), ak.disabled(op=FWD)
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert not _info("f").active, "b still holds the filter"
    b.__exit__(None, None, None)
    assert _info("f").active
    with ak.disabled(op=FWD):
        ak.enable(op=FWD)
        assert not _info("f").active, "enable() does not end the block's hold"
        ak.disable(op=FWD)
    assert not _info("f").active, "the explicit disable() made inside the block stays"
    ak.enable(op=FWD)
    with ak.disabled():
        assert not _info("f").active
    assert _info("f").active


def test_a_plan_that_fails_gives_aten_not_the_next_override(path):
    """The call whose planning failed gets ATen's result (what the warning says), not the next override's."""
    class Failing:
        def __call__(self, *args):
            raise AssertionError("the plan is used, never the impl")

        def plan(self, *args):
            raise RuntimeError("no config")

    class Cacheable:
        cacheable = True

        def __call__(self, *args):
            return True

    register_forward_only(FWD, impl=Failing(), cond=Cacheable(), backends=["cpu"], dsl="a", name="a")
    other = Counting(lambda x, shape, w=None, eps=None: (torch.full_like(x, 2.0), torch.zeros(x.shape[0], 1)))
    ak.register(FWD, impl=other, cond=Cacheable(), backends=["cpu"], dsl="b", name="b")
    x = torch.randn(3, 16)
    with pytest.warns(KernelFallbackWarning, match="while planning: no config"):
        y = _call(x)[0]
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [16], None, 1e-6)[0])
    assert other.calls == 0
    _call(x)  # from now on the shape skips 'a': the next override answers
    assert other.calls == 1


def test_bare_router_floor_calls_aten_and_is_removed_without_trace():
    """``accel bench``'s router floor: while installed it answers with ATen's result; destroyed, the op is ATen's
    own kernel again (and accel's overrides, disabled around it, come back)."""
    from accel.kernels.bench import timing

    x, w = torch.randn(3, 8), torch.randn(8)
    op = torch.ops.aten._fused_rms_norm.default
    want = op(x, [8], w, 1e-6)
    before = torch._C._dispatch_dump("aten::_fused_rms_norm")
    lib = timing.bare_router("aten::_fused_rms_norm", "CPU")
    try:
        assert torch._C._dispatch_dump("aten::_fused_rms_norm") != before  # a kernel at the CPU key
        got = op(x, [8], w, 1e-6)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    finally:
        lib._destroy()
    assert torch._C._dispatch_dump("aten::_fused_rms_norm") == before
    got = op(x, [8], w, 1e-6)
    assert torch.equal(got[0], want[0])


def test_forward_only_cpu_rms_norm_override_warns_that_training_would_fail():
    """On CPU ATen's _fused_rms_norm is a composite: a kernel there makes autograd call
    _fused_rms_norm_backward, which CPU lacks. Registering the forward alone warns with the fix; with the
    backward registered first (as register_pair does) there is no warning and training works."""
    import warnings

    from accel.errors import KernelRegistrationWarning

    ak.use_registry("accel")
    m = torch.nn.RMSNorm(8)
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.warns(KernelRegistrationWarning, match="Register aten::_fused_rms_norm_backward at that backend first"):
        ak.register(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager", name="fo")
    with pytest.raises(NotImplementedError, match="_fused_rms_norm_backward"):
        m(x).sum().backward()  # what the warning announced
    ak.unregister("fo")
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelRegistrationWarning)
        bwd = ak.register("aten::_fused_rms_norm_backward", impl=reference.fused_rms_norm_backward,
                          fallback=reference.fused_rms_norm_backward, backends=["cpu"], dsl="eager", name="fb")
        ak.register(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager", name="fo")
    m(x).sum().backward()
    assert x.grad is not None and m.weight.grad is not None
    assert _info("fo").routed >= 1 and _info("fb").routed >= 1
    ak.unregister("fo")
    ak.unregister(bwd)


def test_builtin_pair_registers_the_backward_first_without_a_warning():
    import warnings

    from accel.errors import KernelRegistrationWarning
    from accel.kernels.ops.rms_norm import triton_impl as rt

    if not rt.available()[0]:
        pytest.skip(rt.available()[1])
    ak.use_registry("accel")
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelRegistrationWarning)
        names = rt.register(["cpu"])
    assert names == ["rms_norm_fwd.triton", "rms_norm_bwd.triton"]
    for n in names:
        ak.unregister(n)


def test_training_warning_follows_the_backward_being_disabled_or_unregistered():
    """The check runs after every change of what is installed: disabling or unregistering the backward while the
    CPU forward stays live warns (once while it lasts); re-enabling or re-registering clears it; a block
    disabling everything does not warn (the forward is off too)."""
    import warnings

    from accel.errors import KernelRegistrationWarning

    ak.use_registry("accel")

    def warned(fn):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            fn()
        return [str(w.message) for w in got if issubclass(w.category, KernelRegistrationWarning)]

    def reg_bwd():
        return ak.register("aten::_fused_rms_norm_backward", impl=reference.fused_rms_norm_backward,
                           fallback=reference.fused_rms_norm_backward, backends=["cpu"], dsl="eager", name="tb")

    assert warned(reg_bwd) == []
    assert warned(lambda: ak.register(FWD, impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager",
                                      name="tf")) == []
    msgs = warned(lambda: ak.disable(name="tb"))
    assert len(msgs) == 1 and msgs[0].startswith("accel.kernels.disable: aten::_fused_rms_norm now has an accel "
                                                 "kernel at dispatch key 'CPU'")
    assert warned(lambda: ak.disable(dsl="eager")) == []  # the forward is off too now: nothing to warn about
    assert warned(lambda: ak.enable()) == []
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with ak.disabled(op="aten::_fused_rms_norm_backward"):
            inside = [w for w in got if issubclass(w.category, KernelRegistrationWarning)]
    assert len(inside) == 1 and "accel.kernels.disabled" in str(inside[0].message)

    def whole_block():
        with ak.disabled():
            pass
    assert warned(whole_block) == []
    m, x = torch.nn.RMSNorm(8), torch.randn(4, 8, requires_grad=True)
    m(x).sum().backward()  # both live again: training works
    assert len(warned(lambda: ak.unregister("tb"))) == 1
    assert warned(reg_bwd) == []
    ak.unregister("tf")
    ak.unregister("tb")


def test_a_custom_op_forward_alone_is_no_training_orphan():
    """A custom op's backward has a default kernel for every key (CompositeExplicitAutograd): registering
    the forward alone leaves training working, so no orphan warning."""
    from accel.kernels.ops.rms_norm_hf import op, reference as hf

    assert kcore.autograd.BACKWARD_OF.get(op.FORWARD) == op.BACKWARD
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelRegistrationWarning)
        ak.register(op.FORWARD, impl=hf.rms_norm_hf, backends=["cpu"], dsl="eager", name="hf-fwd")
    x, w = torch.randn(3, 8, requires_grad=True), torch.ones(8, requires_grad=True)
    op.rms_norm(x, w, 1e-6).sum().backward()
    assert x.grad is not None and _info("hf-fwd").routed == 1


def test_misspelt_names_get_the_closest_valid_ones():
    with pytest.raises(KernelRegistrationError, match=r"unknown op 'aten::_fused_rms_nrm' .*Did you mean '_fused_rms_norm'"):
        ak.register("aten::_fused_rms_nrm", impl=reference.fused_rms_norm, backends=["cpu"], dsl="x")
    with pytest.raises(KernelRegistrationError, match=r"unknown backend 'cdua'\. Did you mean 'cuda'\? Valid: "):
        ak.register(FWD, impl=reference.fused_rms_norm, backends=["cdua"], dsl="x")
    with pytest.raises(KernelRegistrationError, match=r"unknown mode 'natve'\. Did you mean 'native'\?"):
        ak.use_registry("natve")
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}
