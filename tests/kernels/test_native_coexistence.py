"""accel's overrides beside upstream overrides of the same op in torch's native DSL registry.

torch 2.14.1 ships a CuTeDSL RMSNorm override of ``aten::_fused_rms_norm`` at the CUDA key, 2.15 adds
FlyDSL on ROCm and ``torch_nn`` ops; here an upstream-style override is registered through torch's own
registry at the CPU key, and accel's overrides must share the op with it: both in torch's graph (so
``torch.backends.python_native`` switches both), neither hiding the other, ``explain`` naming both.
Runs on every torch with ``torch._native``.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import accel.kernels as ak
from accel import _compat
from accel.errors import KernelRegistrationWarning
from accel.kernels import core as kcore
from accel.kernels.ops.rms_norm import reference

from _kernel_helpers import Counting, _clean_registry  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(_compat.native_dsl_registry() is None, reason=_compat.native_dsl_registry_reason())

FWD, BWD = "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"
UPSTREAM_DSL = "cutedsl"  # upstream's DSL; accel's registrations below use "triton"


def _rows(n):
    return lambda x, *a, **k: x.shape[0] == n


@contextlib.contextmanager
def upstream_override(rows=5):
    """An override registered as torch's own ops register theirs: ``register_op_override`` then the graph's
    router built by the registry. Takes calls of ``rows`` rows; counts them."""
    reg = _compat.native_dsl_registry()
    impl = Counting(lambda *a, **k: reference.fused_rms_norm(*a, **k))
    reg.module.register_op_override(UPSTREAM_DSL, "aten", "_fused_rms_norm", "CPU", _rows(rows), impl)
    reg.rebuild("aten", "_fused_rms_norm", "CPU")
    try:
        yield impl
    finally:
        graph = reg.graph("aten", "_fused_rms_norm", "CPU") or []
        reg.set_graph("aten", "_fused_rms_norm", "CPU", [n for n in graph if n.impl_fn is not impl])
        reg.rebuild("aten", "_fused_rms_norm", "CPU")


def _register(rows=3):
    f = Counting(reference.fused_rms_norm)
    # the backward first: a CPU forward override without it would break training (KernelRegistrationWarning)
    ak.register(BWD, impl=reference.fused_rms_norm_backward, backends=["cpu"], dsl="triton", name="accel-b",
                fallback=reference.fused_rms_norm_backward)
    ak.register(FWD, impl=f, backends=["cpu"], dsl="triton", cond=_rows(rows), name="accel-f")
    return f


def _call(rows):
    return torch.ops.aten._fused_rms_norm(torch.randn(rows, 16), [16], None, 1e-6)


def _counts(*counters):
    return tuple(c.calls for c in counters)


@pytest.mark.parametrize("mode", ["auto", "accel"])
def test_accel_joins_upstream_graph_and_python_native_switches_both(mode):
    import torch.backends.python_native as pn

    ak.use_registry(mode)
    with upstream_override() as up:
        if mode == "accel":  # a second router would hide upstream's or be hidden by it: accel says it joins
            with pytest.warns(KernelRegistrationWarning, match=r"holds upstream overrides \(cutedsl\); accel's "
                                                                r"overrides join that graph"):
                f = _register()
        else:
            f = _register()
        assert next(o for o in ak.overrides() if o.name == "accel-f").paths == {"CPU": "native"}
        _call(3), _call(5), _call(7)
        assert _counts(f, up) == (1, 1), "accel takes its rows, upstream its own, ATen the rest"

        x3, x5 = torch.randn(3, 16), torch.randn(5, 16)
        e3, e5 = ak.explain(FWD, x3, [16], None, 1e-6), ak.explain(FWD, x5, [16], None, 1e-6)
        assert e3.kernel == "accel-f" and e5.kernel == f"torch._native {UPSTREAM_DSL}"
        assert dict(e3.steps)[f"torch._native {UPSTREAM_DSL}"].startswith("not tried: accel-f comes first")
        assert dict(e5.steps)[f"torch._native {UPSTREAM_DSL}"].startswith("runs: upstream override")

        with pn.cutedsl.disabled():  # upstream's DSL off: accel's still runs
            _call(3), _call(5)
            assert _counts(f, up) == (2, 1)
            assert "off: disabled through torch.backends.python_native" in \
                dict(ak.explain(FWD, x5, [16], None, 1e-6).steps)[f"torch._native {UPSTREAM_DSL}"]
        with pn.triton.disabled():  # accel's DSL off: upstream's still runs
            _call(3), _call(5)
            assert _counts(f, up) == (2, 2)
        _call(3), _call(5)  # both blocks exited: both back, in the same order
        assert _counts(f, up) == (3, 3)
        with pn.operations_disabled("_fused_rms_norm"):
            _call(3), _call(5)
            assert _counts(f, up) == (3, 3)

        ak.unregister("accel-f")
        ak.unregister("accel-b")
        _call(3), _call(5)
        assert _counts(f, up) == (3, 4), "unregistering accel leaves upstream's override installed"
    _call(5)
    assert up.calls == 4


def test_accel_registered_first_keeps_its_place_when_upstream_arrives():
    """An upstream override registered after accel's (torch registers ``torch_nn`` ops at their module's
    import) lands in the same graph, after accel's node: accel's override keeps running."""
    f = _register()
    with upstream_override() as up:
        _call(3), _call(5)
        assert _counts(f, up) == (1, 1)
        kinds = [getattr(n, "_accel", None) or n.dsl_name
                 for n in _compat.native_dsl_registry().graph("aten", "_fused_rms_norm", "CPU")]
        assert kinds == ["accel-f", UPSTREAM_DSL]


def test_router_over_an_unrecognised_registry_survives_upstream_switching(monkeypatch):
    """Where accel cannot join torch's graph (a registry of a shape it does not know), its router sits on
    upstream's: a ``python_native`` block destroying upstream's router does not break accel's fallback,
    and when the block exits and upstream's router lands above accel's, ``explain`` says so."""
    import torch.backends.python_native as pn

    with upstream_override() as up:
        monkeypatch.setattr(_compat, "native_dsl_registry", lambda: None)
        with pytest.warns(KernelRegistrationWarning, match="accel's own router"):
            f = _register()
        assert next(o for o in ak.overrides() if o.name == "accel-f").paths == {"CPU": "accel"}
        _call(3), _call(5)
        assert _counts(f, up) == (1, 1), "accel's router on top, upstream's router as its fallback"
        with pn.cutedsl.disabled():  # upstream's library destroyed: accel's captured fallback is invalidated
            y, _ = _call(5)  # ... and recaptured: ATen answers, no "SafeKernelFunction has been invalidated"
            assert y.shape == (5, 16)
            assert _counts(f, up) == (1, 1)
            _call(3)
            assert f.calls == 2
        explanation = ak.explain(FWD, torch.randn(3, 16), [16], None, 1e-6)
        shadow = dict(explanation.steps)["accel-f"]
        assert shadow.startswith("shadowed: ") and "torch/_native/registry.py" in shadow
        _call(3), _call(5)  # upstream's router answers first now; accel's runs where it falls back
        assert _counts(f, up) == (3, 2)


def test_accel_mode_without_upstream_keeps_the_router():
    ak.use_registry("accel")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r"accel\.kernels: ", category=KernelRegistrationWarning)
        _register()
    assert next(o for o in ak.overrides() if o.name == "accel-f").paths == {"CPU": "accel"}
    assert kcore.native.upstream_nodes(kcore.op.resolve_op(FWD), "CPU") == []


def test_explain_names_torch_aot_kernel_coverage(monkeypatch):
    """torch 2.15's registry declines every override for a call an embedded AOT kernel covers."""
    import sys

    manifest = sys.modules.get("torch._native.aot_manifest")
    if getattr(manifest, "covers", None) is None:
        pytest.skip(f"torch {torch.__version__} has no torch._native.aot_manifest.covers (AOT kernels: torch 2.15+)")
    _register()
    x = torch.randn(3, 16)
    assert ak.explain(FWD, x, [16], None, 1e-6).kernel == "accel-f"
    monkeypatch.setattr(manifest, "covers", lambda op, key, args, kwargs: op == "_fused_rms_norm" and key == "CPU")
    e = ak.explain(FWD, x, [16], None, 1e-6)
    assert e.kernel == "aten (torch's AOT kernel)" and e.steps[0][0] == "torch AOT kernel"
