"""``accel::geglu`` (Gemma's gated MLP: ``gelu(a, approximate="tanh") * b``): the reference against eager autograd, the
custom op's checks (opcheck, fake kernel), the conds on meta tensors, and, in Triton's interpreter on CPU (a
subprocess), SwiGLU's kernels with the GELU-tanh activation against the reference, routed through the registry.
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch
import torch.nn.functional as F

from _kernel_helpers import interpreted_report, meta_floors  # noqa: F401 (fixture)
from accel.kernels.ops.geglu import op as gg_op
from accel.kernels.ops.geglu import reference as gg_ref
from accel.kernels.ops.swiglu import conditions

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_reference_is_the_eager_arithmetic_and_its_autograd(dtype):
    g = torch.Generator().manual_seed(0)
    a, b, dy = (torch.randn(3, 5, 40, generator=g).to(dtype) for _ in range(3))
    assert torch.equal(gg_ref.geglu(a, b), F.gelu(a, approximate="tanh") * b)
    a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
    want = torch.autograd.grad(F.gelu(a_, approximate="tanh") * b_, (a_, b_), dy)
    got = gg_ref.geglu_backward(dy, a, b)
    assert all(torch.equal(x, y) for x, y in zip(got, want))


def test_the_op_differentiates_as_the_reference_and_passes_opcheck():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gg_op.geglu, (a, b))
    torch.library.opcheck(gg_op.geglu, (a.float().detach().requires_grad_(), b.float().detach().requires_grad_()))
    with pytest.raises(RuntimeError, match="accel::geglu: a is \\[2, 3\\], b is \\[3, 2\\]"):
        gg_op.geglu(torch.ones(2, 3), torch.ones(3, 2))
    y = gg_op.geglu(torch.empty(2, 8, device="meta"), torch.empty(2, 8, device="meta"))
    assert y.shape == (2, 8) and y.device.type == "meta"


def test_conds_read_this_familys_tuning_tables(meta_floors):
    fwd, bwd = conditions.make_conds("triton", ["meta"], "geglu")
    big = torch.empty(4096, 14336, dtype=torch.bfloat16, device="meta")
    assert fwd(big, big) and bwd(big, big, big)
    small = torch.empty(2, 8, dtype=torch.bfloat16, device="meta")
    assert not fwd(small, small) and "floor" in fwd.why_not(small, small)
    assert not fwd(big, big.t()) or "layout" in (fwd.why_not(big, big.t()) or "layout")


SCRIPT = textwrap.dedent("""
    import json, torch
    import accel.kernels as ak
    from accel.kernels.tuning import tolerance, table
    from accel.kernels.dsl import launch
    from accel.kernels.ops.geglu import reference as ref, triton_impl as impl, op as gg_op
    launch.poison_outputs = True   # unwritten outputs stay NaN and fail the comparison
    table.MIN_NUMEL["triton"] = 0  # tiny interpreter shapes must route
    torch.manual_seed(0)
    report = {"numerics": [], "routing": {}}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape in ((1, 1), (7, 1000), (2, 3, 40)):
            a, b, dy = (torch.randn(shape, dtype=dtype) * 3 for _ in range(3))  # tanh well off its linear part
            for name, out, want in (("geglu", impl.geglu(a, b), ref.geglu(a, b)),
                                    ("geglu_bwd", impl.geglu_backward(dy, a, b), ref.geglu_backward(dy, a, b))):
                err, problem = tolerance.compare(out, want)
                report["numerics"].append(dict(op=name, dtype=str(dtype), shape=list(shape), err=err, problem=problem))
        gate, up = torch.randn(4, 6, 2 * 96, dtype=dtype).chunk(2, dim=-1)   # strided halves
        err, problem = tolerance.compare(impl.geglu(gate, up), ref.geglu(gate, up))
        report["numerics"].append(dict(op="geglu_strided", dtype=str(dtype), shape=list(gate.shape), err=err,
                                       problem=problem))
    names = impl.register(["cpu"])
    a = torch.randn(5, 64, requires_grad=True)
    b = torch.randn(5, 64, requires_grad=True)
    y = gg_op.geglu(a, b)
    dy = torch.randn_like(y)  # (a dense gradient: y.sum()'s is a stride-0 expand, a layout the cond declines)
    ga, gb = torch.autograd.grad(y, (a, b), dy)
    a_, b_ = a.detach().requires_grad_(), b.detach().requires_grad_()
    wa, wb = torch.autograd.grad(torch.nn.functional.gelu(a_, approximate="tanh") * b_, (a_, b_), dy)
    info = {o.name: o for o in ak.overrides()}
    report["routing"] = {"names": names, "routed": {n: info[n].routed for n in names},
                         "errors": [float((y - torch.nn.functional.gelu(a, approximate="tanh") * b).abs().max()),
                                    float((ga - wa).abs().max()), float((gb - wb).abs().max())],
                         "explain": ak.explain(torch.ops.accel.geglu.default, a.detach(), b.detach()).kernel}
    for n in names:
        ak.unregister(n)
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def interpreted():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (tox envs install it)")
    return interpreted_report(SCRIPT)


def test_interpreted_kernels_match_the_reference(interpreted):
    """fp32, bf16 and fp16, rows of one element to several column blocks, strided gate/up halves; every output
    NaN-poisoned before (an unwritten element fails)."""
    numerics = interpreted["numerics"]
    assert len(numerics) == 3 * (3 * 2 + 1)
    assert [e for e in numerics if e["problem"] is not None] == []


def test_interpreted_round_trip_routes_both_ops(interpreted):
    routing = interpreted["routing"]
    assert routing["names"] == ["geglu_fwd.triton", "geglu_bwd.triton"]
    assert all(n > 0 for n in routing["routed"].values())
    assert max(routing["errors"]) < 1e-5
    assert routing["explain"] == "geglu_fwd.triton"
