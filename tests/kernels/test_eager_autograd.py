"""``eager_autograd``: an accel op's registered formula in a plain autograd.Function, the op called below autograd.

The same outputs and gradients as the custom op's own autograd path, bit for bit (RMSNorm with the model's
rounding, RoPE); the graph node is the plain Function; with grad disabled no node at all; tensor subclasses
and ``torch.func`` transforms get the custom op itself (the compiled path: tests/integrations).
"""

from __future__ import annotations

import pytest
import torch
from accel.kernels.ops.rms_norm_hf import op as rn_op
from accel.kernels.ops.rope import op as rp_op

pytestmark = pytest.mark.cpu


def _norm_leaves(dtype):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(3, 5, 16, generator=g).to(dtype).requires_grad_(),
            torch.randn(16, generator=g).to(dtype).requires_grad_())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("unit", [False, True])
def test_rms_norm_matches_the_custom_ops_autograd_bit_for_bit(dtype, unit):
    runs = []
    for call in (lambda x, w: torch.ops.accel.rms_norm_hf(x, w, 1e-6, unit)[0],
                 lambda x, w: rn_op.rms_norm(x, w, 1e-6, unit)):
        x, w = _norm_leaves(dtype)
        y = call(x, w)
        y.backward(torch.ones_like(y))
        runs.append((y.detach(), x.grad, w.grad, type(y.grad_fn).__name__))
    (y0, gx0, gw0, node0), (y1, gx1, gw1, node1) = runs
    assert torch.equal(y0, y1) and torch.equal(gx0, gx1) and torch.equal(gw0, gw1)
    assert node0.startswith("GeneratedBackwardFor") and node1 == "Eager_accel_rms_norm_hfBackward"


def test_rope_matches_the_custom_ops_autograd_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(2, 4, 6, 8, generator=g), torch.randn(2, 2, 6, 8, generator=g)]
    cos, sin = torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 8, generator=g)
    runs = []
    for call in (torch.ops.accel.rope, rp_op.apply_rope):
        q, k = (t.clone().requires_grad_() for t in base)
        qo, ko = call(q, k, cos, sin, 1)
        (qo.sum() + 2 * ko.sum()).backward()
        runs.append((qo.detach(), ko.detach(), q.grad, k.grad))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_no_grad_makes_no_node_and_cos_requiring_grad_still_raises():
    x, w = _norm_leaves(torch.float32)
    with torch.no_grad():
        assert rn_op.rms_norm(x, w, 1e-6).grad_fn is None
    q, k = torch.randn(1, 1, 2, 4, requires_grad=True), torch.randn(1, 1, 2, 4)
    cos, sin = torch.randn(1, 2, 4, requires_grad=True), torch.randn(1, 2, 4)
    from accel.errors import UnsupportedOperationError

    with pytest.raises(UnsupportedOperationError, match="requires grad"):
        rp_op.apply_rope(q, k, cos, sin)


class _Marked(torch.Tensor):
    """A tensor subclass: the op itself must answer (its autograd layer and the subclass's dispatch)."""


def _nodes(fn) -> set:
    seen, todo = set(), [fn]
    while todo:
        node = todo.pop()
        if node is not None and type(node).__name__ not in seen:
            seen.add(type(node).__name__)
            todo.extend(n for n, _ in node.next_functions)
    return seen


def test_tensor_subclasses_and_transforms_get_the_custom_op_itself():
    x, w = _norm_leaves(torch.float32)
    sub = x.detach().as_subclass(_Marked).requires_grad_()
    nodes = _nodes(rn_op.rms_norm(sub, w, 1e-6).grad_fn)
    assert "GeneratedBackwardFor_accel_rms_norm_hf_defaultBackward" in nodes
    assert not any(n.startswith("Eager_") for n in nodes)


def test_under_a_torch_func_transform_the_custom_op_answers_as_it_does_alone():
    x, w = _norm_leaves(torch.float32)
    outcomes = []
    for call in (lambda t: torch.ops.accel.rms_norm_hf(t, w.detach(), 1e-6)[0],
                 lambda t: rn_op.rms_norm(t, w.detach(), 1e-6)):
        try:
            outcomes.append(torch.func.vmap(call)(x.detach()))
        except RuntimeError as exc:  # the op's own answer under the transform, whatever this torch gives
            outcomes.append(str(exc))
    if isinstance(outcomes[0], str):
        assert outcomes[0] == outcomes[1]
    else:
        assert torch.equal(outcomes[0], outcomes[1])


# ------------------------------------------------------------- accel's router called without the dispatcher
class _Counting:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


@pytest.fixture
def counted():
    """``register(op, fn)``: ``fn`` counted, registered at the CPU key for ``op``; every registration undone after."""
    import accel.kernels as ak

    names = []

    def register(op, fn):
        impl = _Counting(fn)
        names.append(ak.register(op, impl=impl, backends=["cpu"], dsl="triton", name=f"counted.{op[7:]}"))
        return impl

    yield register
    for name in names:
        if name in {o.name for o in ak.overrides()}:
            ak.unregister(name)


def _register_norm(counted):
    from accel.kernels.ops.rms_norm_hf import reference

    return counted("accel::rms_norm_hf", reference.rms_norm_hf)


def _dispatched_ops(fn) -> list[str]:
    """The ops the dispatcher recorded while ``fn`` ran (the profiler sees each op call it dispatches)."""
    with torch.autograd.profiler.profile() as prof:
        fn()
    return [e.name for e in prof.function_events]


def _count_direct(monkeypatch, qualname):
    """Count the calls of the slot's router made without the dispatcher (``Slot.direct``)."""
    from accel.kernels.core.slot import SLOTS

    slot = SLOTS[(qualname, "CPU")]
    router, calls = slot.direct, []
    assert router is not None
    monkeypatch.setattr(slot, "direct", lambda *a: calls.append(1) or router(*a))
    return calls


def test_accel_ops_router_is_called_without_the_dispatcher_with_the_same_result(counted, monkeypatch):
    import accel.kernels as ak
    from _kernel_helpers import OpLog
    from accel.kernels.core.slot import SLOTS

    x, w = _norm_leaves(torch.bfloat16)
    reference = rn_op.rms_norm(x, w, 1e-6)  # no override yet: the op's default kernel through the dispatcher
    impl = _register_norm(counted)
    direct = _count_direct(monkeypatch, "accel::rms_norm_hf")
    assert torch.equal(rn_op.rms_norm(x, w, 1e-6), reference)
    assert impl.calls == 1 and len(direct) == 1  # the impl answered once, through the router called directly

    with OpLog() as mode:  # a dispatch mode must see the op: the dispatcher runs, the same impl answers
        y = rn_op.rms_norm(x, w, 1e-6)
    assert "accel.rms_norm_hf.default" in mode.ops and impl.calls == 2 and torch.equal(y, reference)
    # the profiler records the op where the dispatcher runs it: with the profiler on, the dispatcher runs
    names = _dispatched_ops(lambda: rn_op.rms_norm(x, w, 1e-6))
    assert "accel::rms_norm_hf" in names and impl.calls == 3 and len(direct) == 1
    with ak.disabled(name="counted.rms_norm_hf"):  # off: no router, the dispatcher's default kernel answers
        assert ("accel::rms_norm_hf", "CPU") not in SLOTS or SLOTS[("accel::rms_norm_hf", "CPU")].direct is None
        assert torch.equal(rn_op.rms_norm(x, w, 1e-6), reference) and impl.calls == 3
    ak.unregister("counted.rms_norm_hf")
    assert ("accel::rms_norm_hf", "CPU") not in SLOTS


def test_the_backward_formulas_op_call_takes_the_same_direct_path(counted, monkeypatch):
    from accel.kernels.ops.rms_norm_hf import reference

    impl = _register_norm(counted)
    bwd = counted("accel::rms_norm_hf_backward", reference.rms_norm_hf_backward)
    direct = _count_direct(monkeypatch, "accel::rms_norm_hf_backward")
    x, w = _norm_leaves(torch.float32)
    y = rn_op.rms_norm(x, w, 1e-6)
    y.backward(torch.ones_like(y))
    assert bwd.calls == 1 and impl.calls == 1 and len(direct) == 1
    x2, w2 = _norm_leaves(torch.float32)
    y2 = torch.ops.accel.rms_norm_hf(x2, w2, 1e-6, False)[0]  # the custom op's own autograd: dispatched
    y2.backward(torch.ones_like(y2))
    assert torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)


class _Scale(torch.autograd.Function):
    """``x * k`` whose forward counts the tensors it sees unwrapped (a functorch wrapper is not a plain leaf)."""

    seen: list = []

    @staticmethod
    def forward(ctx, x, k):
        _Scale.seen.append(torch._C._functorch.is_functorch_wrapped_tensor(x))
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None


class _WithSetup(torch.autograd.Function):
    @staticmethod
    def forward(x, k=2.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k, None


def test_direct_apply_gives_apply_s_outputs_gradients_and_node():
    from accel.kernels.core.autograd import direct_apply

    runs = []
    for apply in (_Scale.apply, direct_apply(_Scale)):
        x = torch.arange(4.0, requires_grad=True)
        y = apply(x, 3.0)
        y.sum().backward()
        runs.append((y.detach(), x.grad, type(y.grad_fn).__name__))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2] == "_ScaleBackward"


def test_direct_apply_leaves_transforms_escaped_wrappers_and_setup_context_to_apply():
    from accel.kernels.core.autograd import direct_apply

    apply = direct_apply(_Scale)
    # under torch.func.grad: apply's own path, which refuses a Function without setup_context (not the C++
    # apply, which would record a node the transform never sees)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: apply(x, 3.0).sum())(torch.arange(3.0))
    # a tensor that escaped a transform is still a (dead) functorch wrapper: apply unwraps it first
    leaked = []
    torch.func.grad(lambda x: leaked.append(x * 1) or (x * x).sum())(torch.arange(3.0))
    assert torch._C._functorch.is_functorch_wrapped_tensor(leaked[0])
    _Scale.seen.clear()
    out = apply(leaked[0], 2.0)
    assert _Scale.seen == [False] and torch.equal(out, torch.arange(3.0) * 2)
    # a Function with setup_context: apply binds its default arguments, so it is apply itself
    assert direct_apply(_WithSetup) == _WithSetup.apply


@pytest.fixture
def cpu_norm():
    """``accel::rms_norm_hf``'s reference registered at the CPU key as a kernel, wrapped to count its calls."""
    import accel.kernels as ak
    from accel.kernels.ops.rms_norm_hf import reference

    calls = []

    def impl(*args):
        calls.append(args)
        return reference.rms_norm_hf(*args)

    name = ak.register("accel::rms_norm_hf", impl=impl, backends=["cpu"], dsl="triton", name="test_decide.cpu")
    try:
        yield name, calls
    finally:
        ak.unregister(name)


def test_a_decided_call_runs_its_answer_once_with_the_op_s_node_and_gradients(cpu_norm):
    import accel.kernels as ak
    from accel.kernels.core.autograd import Answer, decide
    from accel.kernels.core.slot import live_slot

    name, calls = cpu_norm
    slot = live_slot("accel::rms_norm_hf", "cpu")
    runs = []
    for decided in (False, True):
        x, w = _norm_leaves(torch.float32)
        calls.clear()
        answer = decide(slot, (x, w, 1e-6, False)) if decided else None
        assert decided is False or type(answer) is Answer
        y = rn_op.rms_norm(x, w, 1e-6, False, answer=answer)
        y.backward(torch.ones_like(y))
        assert len(calls) == 1  # the kernel ran once: the decided call was not routed again
        runs.append((y.detach(), x.grad, w.grad, type(y.grad_fn).__name__))
    (y0, gx0, gw0, node0), (y1, gx1, gw1, node1) = runs
    assert torch.equal(y0, y1) and torch.equal(gx0, gx1) and torch.equal(gw0, gw1)
    assert node0 == node1 == "Eager_accel_rms_norm_hfBackward"
    assert {o.name: o.routed for o in ak.overrides()}[name] == 2


def test_decide_says_true_not_an_answer_where_the_call_must_pass_the_dispatcher(cpu_norm):
    from accel.kernels.core.autograd import decide
    from accel.kernels.core.slot import live_slot

    slot = live_slot("accel::rms_norm_hf", "cpu")
    x, w = _norm_leaves(torch.float32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert decide(slot, (x, w, 1e-6, False)) is True  # the profiler records the op at the dispatcher
        rn_op.rms_norm(x, w, 1e-6, False, answer=True)
    assert any(e.name == "accel::rms_norm_hf" for e in prof.events())


def test_graph_grad_is_autograd_grad_bit_for_bit_and_frees_the_graph_unless_kept():
    from accel.kernels.core.autograd import graph_grad

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 6, 4, generator=g).requires_grad_() for h in (4, 2, 2))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    grad = torch.randn(o.shape, generator=g)
    want = torch.autograd.grad(o, (q, k, v), grad, retain_graph=True)
    got = graph_grad(o, (q, k, v), grad, True)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    graph_grad(o, (q, k, v), grad, False)
    with pytest.raises(RuntimeError, match="second time"):
        graph_grad(o, (q, k, v), grad, False)


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_direct_apply_under_torch_compile_is_the_traced_function_apply():
    from accel.kernels.core.autograd import direct_apply

    apply = direct_apply(_Double)
    f = torch.compile(lambda x: apply(x) + 1, backend="eager", fullgraph=True)  # fullgraph: no break at the call
    x = torch.arange(3.0, requires_grad=True)
    f(x).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_an_answer_for_other_arguments_or_a_disabled_override_is_ignored_and_the_call_routed(cpu_norm):
    import accel.kernels as ak
    from accel.kernels.core.autograd import decide
    from accel.kernels.core.slot import live_slot

    name, calls = cpu_norm
    slot = live_slot("accel::rms_norm_hf", "cpu")
    x, w = _norm_leaves(torch.float32)
    answer = decide(slot, (x, w, 1e-6, False))
    other, _ = _norm_leaves(torch.float32)
    calls.clear()
    y = rn_op.rms_norm(other, w, 1e-6, False, answer=answer)  # routed: the kernel sees `other`
    assert len(calls) == 1 and calls[0][0] is other
    ak.disable(name=name)
    try:
        calls.clear()
        z = rn_op.rms_norm(x, w, 1e-6, False, answer=answer)  # disabled since: the op's default kernel answers
        assert calls == [] and torch.allclose(z, rn_op.rms_norm(x, w, 1e-6, False))
    finally:
        ak.enable(name=name)
    assert y.shape == other.shape
