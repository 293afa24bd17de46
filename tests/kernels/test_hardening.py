"""accel.kernels fail-safes against misbehaving conds, impls and arguments — on both registry paths.

Each test reproduces one defect an adversarial tester found (the user's model
crashed, or a registration was silently wrong) at the CPU dispatch key.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch

import accel.kernels as ak
from accel.errors import KernelFallbackWarning, KernelRegistrationError, UnknownKernelError
from accel.kernels import core as kcore
from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.ops.rms_norm import reference
from accel.testing import fake_backend

from _kernel_helpers import PATHS, Counting, _clean_registry, path, register_forward_only  # noqa: F401 (fixtures)

SIN = "aten::sin"


def _sin(a):
    """An eager sin that does not call aten::sin (which would route back here)."""
    return torch.cos(a - math.pi / 2)


def _info(name):
    return next(o for o in ak.overrides() if o.name == name)


def _quiet_call(fn, *args):
    """Call ``fn`` and fail on any warning (the fail-safe warns once, not per call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


# ------------------------------------------------------------- 1: cond result with no truth value
class _NoBool:
    def __bool__(self):
        raise TypeError("no truth value here")


@pytest.mark.parametrize("result, shown", [
    (lambda a: a > 0, "Tensor"),
    (lambda a: np.ones(3) > 0, "ndarray"),
    (lambda a: _NoBool(), "_NoBool"),
])
def test_cond_without_truth_value_counts_as_false(path, result, shown):
    f = Counting(_sin)
    ak.register(SIN, impl=f, cond=result, backends=["cpu"], dsl="t", name="s")
    x = torch.ones(3)
    with pytest.warns(KernelFallbackWarning, match=rf"cond of 's' for aten::sin returned {shown}, which is not "
                                                   rf"a bool.*\[3\] float32.*Treated as False"):
        y = torch.sin(x)
    torch.testing.assert_close(y, _sin(x))
    _quiet_call(torch.sin, x)  # warned once
    assert f.calls == 0 and _info("s").declined == 2
    ex = ak.explain(SIN, x)
    assert ex.kernel == "aten"
    assert f"cond returned {shown}, which is not a bool" in dict(ex.steps)["s"]
    assert "counts as False" in dict(ex.steps)["s"]


def test_cond_returning_a_one_element_tensor_is_converted(path):
    f = Counting(_sin)
    ak.register(SIN, impl=f, cond=lambda a: (a > 0).all(), backends=["cpu"], dsl="t", name="s")
    _quiet_call(torch.sin, torch.ones(3))
    assert f.calls == 1
    assert ak.explain(SIN, torch.ones(3)).kernel == "s"


# ------------------------------------------------------------- 2 + 5: impl results unlike ATen's
@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("bad, problem", [
    (lambda a: None, r"returned None where aten::sin returns a Tensor"),
    (lambda a: 3.0, r"returned float where aten::sin returns a Tensor"),
    (lambda a: (_sin(a),), r"returned tuple where aten::sin returns a Tensor"),
])
def test_impl_result_of_the_wrong_structure_falls_back(path, verify, bad, problem):
    ak.set_verify(verify)
    f = Counting(bad)
    ak.register(SIN, impl=f, backends=["cpu"], dsl="t", name="s")
    x = torch.randn(3)
    with pytest.warns(KernelFallbackWarning, match=rf"'s' \(t\) for aten::sin with inputs \[\[3\] float32\] "
                                                   rf"{problem}.*ATen's result was used"):
        y = torch.sin(x)
    torch.testing.assert_close(y, _sin(x))
    _quiet_call(torch.sin, x)
    info = _info("s")
    assert f.calls == 1 and info.failed == 1 and info.routed == 0 and info.denied_shapes == 1
    with pytest.warns(KernelFallbackWarning, match=r"\[4\] float32"):
        torch.sin(torch.randn(4))  # another shape is tried (and warned about) again
    assert f.calls == 2


@pytest.mark.parametrize("bad, problem", [
    (lambda *a, **k: reference.fused_rms_norm(*a, **k)[0], r"returned Tensor where aten::_fused_rms_norm "
                                                           r"returns 2 outputs"),
    (lambda *a, **k: reference.fused_rms_norm(*a, **k)[:1], r"returned 1 outputs where aten::_fused_rms_norm "
                                                            r"returns 2"),
    (lambda *a, **k: (reference.fused_rms_norm(*a, **k)[0], 3), r"output 1 is int where aten::_fused_rms_norm "
                                                                r"returns a Tensor"),
])
def test_multi_output_impl_of_the_wrong_structure_falls_back(path, bad, problem):
    register_forward_only("aten::_fused_rms_norm", impl=bad, backends=["cpu"], dsl="t", name="r")
    x = torch.randn(2, 8)
    with pytest.warns(KernelFallbackWarning, match=problem):
        y, rstd = torch.ops.aten._fused_rms_norm(x, [8], None, 1e-6)
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [8], None, 1e-6)[0])
    assert _info("r").failed == 1


def test_output_check_accepts_undefined_outputs_and_lists():
    check = kcore.override.output_check(kcore.op.resolve_op("aten::split.Tensor"))
    assert check([torch.ones(1)]) is None and check((torch.ones(1), torch.ones(1))) is None
    assert check([torch.ones(1), 3]) == "output 1 is int where aten::split.Tensor returns a list of Tensors"
    assert check(torch.ones(1)) == "returned Tensor where aten::split.Tensor returns a list of Tensors"
    assert kcore.override.output_check(kcore.op.resolve_op("aten::sin"))(None) == \
        "returned None where aten::sin returns a Tensor"
    check = kcore.override.output_check(kcore.op.resolve_op("aten::native_layer_norm_backward"))
    assert check((None, torch.ones(1), None)) is None  # undefined outputs (output_mask) are None
    assert check((None, 2, None)) == "output 1 is int where aten::native_layer_norm_backward returns a Tensor"
    assert kcore.override.output_check(kcore.op.resolve_op("aten::_foreach_add_.Scalar")) is None  # no outputs


@pytest.mark.parametrize("bad, problem", [
    (lambda a: torch.empty_like(a, device="meta"), r"output 0: on meta where ATen gives cpu"),
    (lambda a: _sin(a).double(), r"output 0: shape \[3\] torch.float64 where ATen gives \[3\] torch.float32"),
])
def test_verify_treats_a_result_on_another_device_as_a_mismatch(path, bad, problem):
    ak.set_verify(True)
    f = Counting(bad)
    ak.register(SIN, impl=f, backends=["cpu"], dsl="t", name="s")
    x = torch.randn(3)
    with pytest.warns(KernelFallbackWarning, match=rf"aten::sin with inputs \[\[3\] float32\] disagreed with "
                                                   rf"ATen: {problem}"):
        y = torch.sin(x)
    assert y.device.type == "cpu"
    torch.testing.assert_close(y, _sin(x))
    _quiet_call(torch.sin, x)
    assert f.calls == 1 and _info("s").denied_shapes == 1 and _info("s").failed == 1


def test_compare_reports_instead_of_raising():
    t = torch.ones(2)
    assert _tolerance.compare(3.0, t)[1] == "output 0: float where ATen gives a Tensor"
    assert _tolerance.compare(t, 3.0)[1] == "output 0: a Tensor where ATen gives float"
    assert _tolerance.compare(t.to("meta"), t)[1] == "output 0: on meta where ATen gives cpu"
    assert _tolerance.compare(2, 3)[1] == "output 0: 2 != ATen's 3"
    assert _tolerance.compare(np.ones(2), np.zeros(2))[1].startswith("output 0: cannot compare ndarray")
    assert _tolerance.compare((t, 1), (t.clone(), 1)) == (0.0, None)


def test_verify_survives_a_comparison_that_raises(path, monkeypatch):
    ak.set_verify(True)
    ak.register(SIN, impl=_sin, backends=["cpu"], dsl="t", name="s")

    def broken(out, ref):
        raise RuntimeError("compare broke")

    monkeypatch.setattr(_tolerance, "compare", broken)
    with pytest.warns(KernelFallbackWarning, match=r"could not be compared with ATen's "
                                                   r"\(RuntimeError: compare broke\)"):
        torch.sin(torch.randn(3))
    assert _info("s").failed == 1


def test_register_docstring_says_impls_must_not_mutate_inputs():
    assert "must not modify its inputs" in " ".join(ak.register.__doc__.split())


# ------------------------------------------------------------- 3: backend filter and the active vendor
@pytest.mark.parametrize("vendor, other", [("cuda", "rocm"), ("rocm", "cuda")])
def test_backend_filter_applies_to_the_vendor_serving_the_key(path, vendor, other):
    with fake_backend(vendor):
        ak.register(SIN, impl=_sin, backends=["cuda", "rocm"], dsl="t", name="g",
                    fallback=torch.ops.aten.sin.default)
        ak.disable(backend=other)
        assert _info("g").active, f"disabling {other} must not switch off the kernel on a {vendor} build"
        ak.enable(backend=other)
        ak.disable(backend=vendor)
        info = _info("g")
        assert not info.active
        assert info.inactive_reason == f"CUDA: backend disabled (accel.kernels.disable(backend={vendor!r}))"
        assert kcore.slot.SLOTS[(SIN, "CUDA")].live == ()
        ak.enable(backend=vendor)
        assert _info("g").active


def test_backend_filter_for_a_vendor_not_serving_the_key_still_disables_its_only_registration(path):
    with fake_backend("cuda"):
        ak.register(SIN, impl=_sin, backends=["rocm"], dsl="t", name="g", fallback=torch.ops.aten.sin.default)
        ak.disable(backend="rocm")
        assert "disable(backend='rocm')" in _info("g").inactive_reason


# ------------------------------------------------------------- 4: name filters do not outlive names
def test_unregister_drops_the_name_filter(path):
    ak.register(SIN, impl=_sin, backends=["cpu"], dsl="t", name="k")
    ak.disable(name="k")
    ak.unregister("k")
    assert "k" not in kcore.state.STATE.disabled["name"]
    f = Counting(_sin)
    ak.register(SIN, impl=f, backends=["cpu"], dsl="t", name="k")
    assert _info("k").active
    torch.sin(torch.ones(2))
    assert f.calls == 1
    with pytest.raises(UnknownKernelError, match="enable: no override named 'gone'"):
        ak.enable(name="gone")


def test_disabled_context_does_not_restore_a_filter_for_an_unregistered_name(path):
    ak.register(SIN, impl=_sin, backends=["cpu"], dsl="t", name="k")
    ak.disable(name="k")
    with ak.disabled(dsl="t"):
        ak.unregister("k")
    assert kcore.state.STATE.disabled["name"] == set()
    ak.register(SIN, impl=_sin, backends=["cpu"], dsl="t", name="k")
    assert _info("k").active


# ------------------------------------------------------------- 6: ambiguous op names
@pytest.mark.parametrize("op", ["aten::add", "add", torch.ops.aten.add])
def test_ambiguous_op_name_needs_an_overload(op):
    with pytest.raises(KernelRegistrationError, match=r"op 'aten::add' names no single overload: it has Tensor, "
                                                      r"Scalar, out.*\(taking tensors, not out=: Tensor, Scalar\) and "
                                                      r"none is 'default'. Name one, e.g. 'aten::add.Tensor'"):
        ak.register(op, impl=torch.add, backends=["cpu"], dsl="t")
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}
    with pytest.raises(UnknownKernelError, match="names no single overload"):
        ak.explain("aten::add", torch.ones(2), torch.ones(2))


@pytest.mark.parametrize("op", ["aten::softmax.int", "aten::rms_norm", "aten::layer_norm"])
def test_composite_implicit_ops_without_autograd_are_refused(op):
    """Their backward comes from what they decompose to: an override at the backend key would run without
    autograd. The error names the op to override instead; nothing is registered."""
    with pytest.raises(KernelRegistrationError, match=r"is CompositeImplicitAutograd.*Override the op it "
                                                      r"decomposes to instead, e.g. aten::_softmax"):
        ak.register(op, impl=lambda *a, **k: None, backends=["cpu"], dsl="t")
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}


def test_ops_with_their_own_autograd_kernel_are_accepted_even_when_also_composite():
    # aten::_fused_rms_norm has a CompositeImplicitAutograd kernel and its own autograd formula
    register_forward_only("aten::_fused_rms_norm", impl=lambda *a, **k: None, backends=["cpu"], dsl="t", name="f")
    assert _info("f").op == "aten::_fused_rms_norm"


def test_bare_name_with_one_tensor_overload_is_the_default():
    assert kcore.op.resolve_op("aten::sin").symbol == "sin"  # sin.out and TorchScript sin.int do not count
    assert kcore.op.resolve_op("aten::sum.dim_IntList").symbol == "sum.dim_IntList"
    with pytest.raises(UnknownKernelError, match=r"'aten::sum' names no single overload: ") as err:
        kcore.op.resolve_op("aten::sum")
    # the tensor overloads this torch has, in its order: torch 2.9 still lists the named-tensor dim_DimnameList
    named = re.search(r"\(taking tensors, not out=: ([^)]*)\)", str(err.value)).group(1).split(", ")
    assert named[:2] == ["dim_IntList", "default"], named
    for overload in named:
        schema = getattr(torch.ops.aten.sum, overload)._schema
        assert schema.arguments[0].type.kind() == "TensorType" and not any(a.is_out for a in schema.arguments), schema
    taking_tensors = [o for o in torch.ops.aten.sum.overloads()
                      if getattr(torch.ops.aten.sum, o)._schema.arguments[0].type.kind() == "TensorType"
                      and not any(a.is_out for a in getattr(torch.ops.aten.sum, o)._schema.arguments)]
    assert sorted(named) == sorted(taking_tensors)


def test_explicit_overload_routes(path):
    f = Counting(lambda a, b, alpha=1: torch.sub(a, b, alpha=-alpha))
    ak.register("aten::add.Tensor", impl=f, backends=["cpu"], dsl="t", name="add")
    y = torch.ones(2) + torch.ones(2)
    assert f.calls == 1 and _info("add").routed == 1
    ak.unregister("add")
    torch.testing.assert_close(y, torch.full((2,), 2.0))


# ------------------------------------------------------------- 7: argument types
@pytest.mark.parametrize("kwargs, message", [
    (dict(backends=5), r"backends=5: Pass a non-empty list of backend names"),
    (dict(backends=[["cpu"]]), r"backends=\[\['cpu'\]\]: \['cpu'\] is not a backend name"),
    (dict(backends=[]), r"backends=\[\]: Pass a non-empty list"),
    (dict(backends=["cpu"], name=["a"]), r"name=\['a'\] is not a string"),
    (dict(backends=["cpu"], name=5), r"name=5 is not a string"),
    (dict(backends=["cpu"], name=" "), r"name=' ' is not a string"),
])
def test_register_rejects_arguments_of_the_wrong_type(kwargs, message):
    with pytest.raises(KernelRegistrationError, match=message):
        ak.register(SIN, impl=_sin, dsl="t", **kwargs)
    assert ak.overrides() == [] and kcore.slot.SLOTS == {}



def test_filters_refuse_a_dsl_or_backend_they_could_never_match(path):
    """``disable(dsl="Triton")`` used to filter nothing, silently (found by the new-user trial); the
    backend error names the function called, not ``register``."""
    ak.register(SIN, impl=_sin, backends=["cpu"], dsl="t", name="k")
    for bad in ("Triton", "nonexistent", "T"):
        with pytest.raises(UnknownKernelError, match=f"disable: no DSL named '{bad}'.*Known: cutedsl, helion, t, triton"):
            ak.disable(dsl=bad)
    assert kcore.state.STATE.disabled["dsl"] == set() and _info("k").active  # nothing changed
    ak.disable(dsl="helion")  # a known DSL before any registration uses it: fine
    ak.disable(dsl="t")
    ak.unregister("k")
    ak.enable(dsl="t")  # a DSL still in the disabled filters can be enabled after its last registration went
    ak.enable(dsl="helion")
    with pytest.raises(KernelRegistrationError, match=r"accel.kernels.disable: unknown backend 'gpu'.*disable\(backend='cuda'\)"):
        ak.disable(backend="gpu")
