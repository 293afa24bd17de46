"""The SwiGLU backward that also writes the product (``swiglu_bwd_product``), in Triton's interpreter on CPU.

``swiglu_mlp``'s backward needs ``silu(gate) * up`` for the down projection's weight gradient; where the
registered ``accel::swiglu_backward`` kernel has the variant (:func:`accel.kernels.ops.swiglu.op.
backward_with_product`), one kernel gives both gradients and writes the product over the gradient it read, so
``accel::swiglu`` runs once per layer (the forward), not twice. Checked here: the variant's three outputs against
the reference, bit for bit against the forward kernel's product, on contiguous and strided halves, with
poisoned outputs; written over ``a`` and ``b`` (consume) with the same bits, which the MLP does to its own ``gate``
and ``up`` unless the graph is kept; the MLP's output and every gradient equal to the composition through the same kernels, with
one forward SwiGLU call; a variant that raises falls back to the two-step path with one warning and the same
gradients; verify mode and a cond that declines take the two-step path.
"""

from __future__ import annotations

import textwrap

import pytest
from _kernel_helpers import interpreted_report

pytestmark = pytest.mark.cpu

try:
    import triton  # noqa: F401

    TRITON = True
except ImportError:
    TRITON = False

SCRIPT = textwrap.dedent("""
    import json, warnings, torch
    import torch.nn.functional as F
    import accel.kernels as ak
    from accel.kernels.core.state import STATE
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.tuning import table as tuning
    from accel.kernels.ops.swiglu import op as sw_op, reference as sw_ref, triton_impl as sw_impl
    from accel.kernels.ops.swiglu.mlp import swiglu_mlp
    _launch.poison_outputs = True          # an unwritten output stays NaN
    tuning.MIN_NUMEL["triton"] = 0         # tiny interpreter shapes must route
    report = {"numerics": [], "consume": [], "mlp": {}}
    g = torch.Generator().manual_seed(0)

    def same(x, y):
        return bool(torch.equal(x, y)) if x.dtype == y.dtype and x.shape == y.shape else False

    def mlp_match(got, want):
        # same() for the output and the weights' gradients; x's gradient (index 1) within bf16's rounding of the
        # sum (swiglu_mlp adds the up projection's product inside the GEMM: one rounding, not two)
        # (its error scales with the terms, not the possibly cancelled sum: a few units of the largest's last place)
        def near(x, y):
            atol = 8 * torch.finfo(y.dtype).eps * y.float().abs().max().item()
            return x.dtype == y.dtype and x.shape == y.shape and bool(torch.allclose(x.float(), y.float(), rtol=0,
                                                                                      atol=atol))
        return [same(x, y) if i != 1 else near(x, y) for i, (x, y) in enumerate(zip(got, want))]

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        cases = [tuple(torch.randn(5, 300, generator=g).to(dtype) for _ in range(2))]
        cases.append(tuple(torch.randn(3, 4, 2 * 96, generator=g).to(dtype).chunk(2, dim=-1)))  # strided halves
        for a, b in cases:
            dy = torch.randn(a.shape, generator=g).to(dtype)
            ref_da, ref_db = sw_ref.swiglu_backward(dy, a, b)
            into = dy.clone()
            da, db = sw_impl.swiglu_backward_product(into, a, b)
            tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
            report["numerics"].append(dict(
                dtype=str(dtype), strided=not a.is_contiguous(),
                da=bool(torch.allclose(da.float(), ref_da.float(), **tol)),
                db=bool(torch.allclose(db.float(), ref_db.float(), **tol)),
                grads_as_bwd_kernel=all(same(x, y) for x, y in zip((da, db), sw_impl.swiglu_backward(dy, a, b))),
                product_as_fwd_kernel=same(into, sw_impl.swiglu(a, b)),
                product_near_reference=bool(torch.allclose(into.float(), sw_ref.swiglu(a, b).float(), **tol))))
            if a.is_contiguous():  # consume: the gradients written over a and b, the same bits
                a2, b2, into2 = a.clone(), b.clone(), dy.clone()
                ca, cb = sw_impl.swiglu_backward_product(into2, a2, b2, consume=True)
                report["consume"].append(dict(
                    dtype=str(dtype), over_inputs=ca is a2 and cb is b2,
                    same_bits=same(ca, da) and same(cb, db) and same(into2, into)))

    names = sw_impl.register(["cpu"])

    def leaves(seed):
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(*s, generator=gen).to(torch.bfloat16).requires_grad_()
                for s in ((2, 7, 16), (48, 16), (48, 16), (16, 48))]

    def grads(fn, ls):
        y = fn(*ls)
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype))
        return [y.detach()] + [t.grad for t in ls]

    def composed(x, gw, uw, dw):
        return F.linear(sw_op.swiglu(F.linear(x, gw), F.linear(x, uw)), dw)

    def counts():  # ak.overrides() gives snapshots: read anew each time
        ov = {o.name: o for o in ak.overrides()}
        fwd, bwd = ov["swiglu_fwd.triton"], ov["swiglu_bwd.triton"]
        return [fwd.routed, bwd.routed, fwd.failed + bwd.failed]

    def run(label, setup=lambda: None, teardown=lambda: None):
        before = counts()
        setup()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = grads(swiglu_mlp, leaves(3))
                after = counts()
                want = grads(composed, leaves(3))  # the composition under the same setting
            finally:
                teardown()
        report["mlp"][label] = dict(
            equal=mlp_match(got, want),
            fwd_calls=after[0] - before[0], bwd_calls=after[1] - before[1], failed=after[2] - before[2],
            warnings=[str(w.message)[:200] for w in caught])

    run("fused")

    def saved_gate_up(retain):
        # the node's own gate and up (the saved [2, 7, 48] tensors, seen through a pack hook) after backward:
        # written over by their gradients unless the graph is kept, and a second backward then gives the same
        kept = []
        ls = leaves(3)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (kept.append(t), t)[1], lambda t: t):
            y = swiglu_mlp(*ls)
        own = [t for t in kept if t.shape == (2, 7, 48)]
        before_bwd = [t.clone() for t in own]
        dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype)
        y.backward(dy, retain_graph=retain)
        first = [t.grad.clone() for t in ls]
        out = dict(count=len(own), unchanged=[same(t, c) for t, c in zip(own, before_bwd)],
                   grads_as_fused=[same(f, w) for f, w in zip(first, report_grads["fused"])])
        if retain:
            y.backward(dy)
            out["second_adds_the_same"] = [same(t.grad, f + f) for t, f in zip(ls, first)]
        return out

    report_grads = {"fused": grads(swiglu_mlp, leaves(3))[1:]}
    report["mlp"]["consumed"] = saved_gate_up(False)
    report["mlp"]["retained"] = saved_gate_up(True)

    from accel.kernels.ops.swiglu.linear import swiglu_linear

    def linear_leaves():  # Phi-3: gate and up are strided halves of one fused projection
        gen = torch.Generator().manual_seed(5)
        return [torch.randn(*s, generator=gen).to(torch.bfloat16).requires_grad_() for s in ((2, 7, 96), (16, 48))]

    def split_linear(fn):
        def call(gu, w):
            gate, up = gu.chunk(2, dim=-1)
            return fn(gate, up, w)
        return call

    before = counts()
    got = grads(split_linear(swiglu_linear), linear_leaves())
    after = counts()
    want = grads(split_linear(lambda g_, u_, w: F.linear(sw_op.swiglu(g_, u_), w)), linear_leaves())
    report["mlp"]["linear"] = dict(equal=[same(x, y) for x, y in zip(got, want)], fwd_calls=after[0] - before[0],
                                   bwd_calls=after[1] - before[1], failed=after[2] - before[2])
    gu, w = linear_leaves()
    y = split_linear(swiglu_linear)(gu, w)
    (ggu,) = torch.autograd.grad(y.square().sum(), gu, create_graph=True)  # grad mode on: the two-step path
    report["mlp"]["create_graph"] = dict(differentiable=ggu.requires_grad)

    def verify_on():
        STATE.verify = True

    def verify_off():
        STATE.verify = False

    run("verify", verify_on, verify_off)

    # the forward not on the variant's kernel (disabled): the product must come from accel::swiglu's own path
    run("forward_off", lambda: ak.disable(name="swiglu_fwd.triton"), lambda: ak.enable(name="swiglu_fwd.triton"))

    class Logging(torch.utils._python_dispatch.TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    mode = Logging()
    run("dispatch_mode", mode.__enter__, lambda: mode.__exit__(None, None, None))
    report["mlp"]["dispatch_mode"]["saw_backward_op"] = any("swiglu_backward" in o for o in mode.ops)
    a_, b_ = (torch.randn(4, 2, 48, generator=g).to(torch.bfloat16) for _ in range(2))
    strided = torch.randn(4, 48, 2, generator=g).to(torch.bfloat16).transpose(1, 2)
    report["strided_grad_out"] = sw_op.backward_with_product(strided, a_, b_)[0] is None
    report["expanded_grad_out"] = sw_op.backward_with_product(
        torch.randn(1, 1, 48).to(torch.bfloat16).expand(4, 2, 48), a_, b_)[0] is None
    # last: the fail-safe denies these shapes to the kernel from then on
    original = dict(sw_op.WITH_PRODUCT)

    def boom(*args, **kw):
        raise RuntimeError("injected launch failure")

    def raising():
        sw_op.WITH_PRODUCT.update({impl: (boom, fwd) for impl, (_, fwd) in original.items()})

    def restore():
        sw_op.WITH_PRODUCT.clear()
        sw_op.WITH_PRODUCT.update(original)

    run("raising", raising, restore)

    def three(*args, **kw):  # writes the product (and, consuming, the gradients over gate and up), then fails
        return (*original[next(iter(original))][0](*args, **kw), args[0])  # the output check (three outputs)

    # a fresh shape: "raising" denied the first one to the kernel
    def bigger(seed):
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(*s, generator=gen).to(torch.bfloat16).requires_grad_()
                for s in ((3, 5, 16), (40, 16), (40, 16), (16, 40))]
    before = counts()
    sw_op.WITH_PRODUCT.update({impl: (three, fwd) for impl, (_, fwd) in original.items()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = grads(swiglu_mlp, bigger(4))
        finally:
            restore()
    after = counts()
    want = grads(composed, bigger(4))
    report["mlp"]["check_fails"] = dict(equal=mlp_match(got, want), failed=after[2] - before[2],
                                        warnings=len(caught))
    for n in names:
        ak.unregister(n)
    report["after_unregister"] = sw_op.backward_with_product(*(torch.randn(2, 8) for _ in range(3)))[0]
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def report():
    if not TRITON:
        pytest.skip("triton not installed (tox envs install it)")
    return interpreted_report(SCRIPT)


def test_the_variant_gives_the_gradients_and_writes_the_forward_kernels_product(report):
    rows = report["numerics"]
    assert len(rows) == 6 and {r["strided"] for r in rows} == {False, True}
    for r in rows:
        assert r["da"] and r["db"] and r["grads_as_bwd_kernel"], r
        assert r["product_as_fwd_kernel"] and r["product_near_reference"], r


def test_the_mlp_backward_runs_the_swiglu_once_with_the_same_bits(report):
    fused = report["mlp"]["fused"]
    assert fused["equal"] == [True] * 5, fused  # output and the four gradients (x's within bf16 rounding)
    assert fused["fwd_calls"] == 1 and fused["bwd_calls"] == 1 and fused["failed"] == 0, fused
    assert fused["warnings"] == []


def test_a_raising_variant_falls_back_to_two_steps_with_one_warning(report):
    raising = report["mlp"]["raising"]
    assert raising["equal"] == [True] * 5, raising
    assert raising["failed"] == 1 and raising["fwd_calls"] == 2, raising  # the product recomputed by accel::swiglu
    assert len(raising["warnings"]) == 1 and "injected launch failure" in raising["warnings"][0]


def test_consume_writes_the_same_gradients_over_the_inputs(report):
    rows = report["consume"]
    assert len(rows) == 3, rows  # the contiguous case of each dtype
    assert all(r["over_inputs"] and r["same_bits"] for r in rows), rows


def test_the_mlp_backward_writes_its_gradients_over_its_own_gate_and_up(report):
    consumed = report["mlp"]["consumed"]
    assert consumed["count"] == 2 and consumed["unchanged"] == [False, False], consumed
    assert consumed["grads_as_fused"] == [True] * 4, consumed


def test_a_kept_graph_keeps_gate_and_up_for_the_second_backward(report):
    retained = report["mlp"]["retained"]
    assert retained["count"] == 2 and retained["unchanged"] == [True, True], retained
    assert retained["grads_as_fused"] == [True] * 4 and retained["second_adds_the_same"] == [True] * 4, retained


def test_verify_mode_takes_the_two_step_path(report):
    verify = report["mlp"]["verify"]
    assert verify["equal"] == [True] * 5, verify
    assert verify["fwd_calls"] == 2 and verify["bwd_calls"] == 1 and verify["failed"] == 0, verify


def test_no_registered_kernel_no_variant(report):
    assert report["after_unregister"] is None


def test_swiglu_linear_uses_the_variant_on_strided_halves(report):
    linear = report["mlp"]["linear"]
    assert linear["equal"] == [True] * 3, linear  # output, the fused projection's and the weight's gradients
    assert linear["fwd_calls"] == 1 and linear["bwd_calls"] == 1 and linear["failed"] == 0, linear


def test_a_backward_recorded_for_double_backward_stays_differentiable(report):
    assert report["mlp"]["create_graph"]["differentiable"] is True


def test_the_product_keeps_the_forward_ops_bits_when_another_kernel_answers_it(report):
    off = report["mlp"]["forward_off"]
    assert off["equal"] == [True] * 5, off
    assert off["fwd_calls"] == 0 and off["bwd_calls"] == 1, off  # the variant was not taken


def test_a_dispatch_mode_sees_the_backward_op(report):
    mode = report["mlp"]["dispatch_mode"]
    assert mode["equal"] == [True] * 5 and mode["saw_backward_op"], mode


def test_a_grad_out_that_is_not_contiguous_is_never_written(report):
    assert report["strided_grad_out"] and report["expanded_grad_out"]


def test_a_variant_failing_its_output_check_after_writing_gives_the_right_gradients(report):
    fails = report["mlp"]["check_fails"]
    assert fails["equal"] == [True] * 5, fails
    assert fails["failed"] == 1 and fails["warnings"] == 1, fails
