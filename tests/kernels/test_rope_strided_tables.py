"""RoPE's Triton kernel reads ``cos`` and ``sin`` each with its own strides.

Either may be a strided view (one slice of a cache that holds both, a row subset of a longer one) while the
other is packed: the kernel must not read one with the other's strides (a wrong answer where ``sin`` is the
strided one, reads past ``sin``'s storage where ``cos`` is). Run in Triton's interpreter on CPU, in a
subprocess (``TRITON_INTERPRET=1`` must be set before Triton is imported), against the eager reference,
with NaN-poisoned outputs, called directly and routed through the registered override.
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from _kernel_helpers import interpreted_report

pytestmark = pytest.mark.cpu

TRITON = importlib.util.find_spec("triton") is not None

SCRIPT = textwrap.dedent("""
    import json, torch
    import accel.kernels as ak
    from accel.kernels.dsl import launch as _launch
    from accel.kernels.tuning import table as tuning
    from accel.kernels.ops.rope import reference as rope_ref, triton_impl as rope_impl, op as rope_op
    from _kernel_helpers import rope_compare
    _launch.poison_outputs = True          # unwritten outputs stay NaN and fail the comparison
    tuning.MIN_NUMEL["triton"] = 0         # tiny interpreter shapes must route
    torch.manual_seed(0)
    report = {"direct": [], "routed": []}

    def tables(layout, bc, s, d, dtype):
        packed = torch.randn(bc, s, d, dtype=dtype)
        strided = torch.randn(bc, s, 3, d, dtype=dtype)[:, :, 1]   # row stride 3 * D, batch stride 3 * S * D
        if layout == "sin strided":
            return packed, strided
        if layout == "cos strided":
            return strided, packed
        both = torch.randn(bc, 2 * s, 2, d, dtype=dtype)[:, ::2]   # one cache holding both, every other row
        return both[:, :, 0], both[:, :, 1]

    layouts = ("sin strided", "cos strided", "both strided")
    for dtype in (torch.float32, torch.bfloat16):
        for b_, hq, hk, s, d, bc, ud in ((2, 4, 2, 5, 16, 1, 1), (2, 3, 3, 7, 32, 2, 2)):
            for layout in layouts:
                if ud == 1:
                    q = torch.randn(b_, s, hq, d, dtype=dtype).transpose(1, 2)
                    k = torch.randn(b_, s, hk, d, dtype=dtype).transpose(1, 2)
                else:
                    q, k = torch.randn(b_, s, hq, d, dtype=dtype), torch.randn(b_, s, hk, d, dtype=dtype)
                cos, sin = tables(layout, bc, s, d, dtype)
                strides = [list(cos.stride()), list(sin.stride())]
                for backward, kernel, reference in ((False, rope_impl.rope, rope_ref.rope),
                                                    (True, rope_impl.rope_backward, rope_ref.rope_backward)):
                    out, ref = kernel(q, k, cos, sin, ud), reference(q, k, cos, sin, ud)
                    err, problem = rope_compare(out, ref, q, k, cos, sin, ud, backward)
                    report["direct"].append(dict(layout=layout, dtype=str(dtype), backward=backward,
                                                 strides=strides, err=err, problem=problem))

    # the routed op: the override's cond accepts these layouts and its answer matches the reference
    names = rope_impl.register(["cpu"])
    try:
        for layout in layouts:
            q = torch.randn(2, 5, 4, 16).transpose(1, 2).requires_grad_()
            k = torch.randn(2, 5, 2, 16).transpose(1, 2).requires_grad_()
            cos, sin = tables(layout, 1, 5, 16, torch.float32)
            before = {o.name: o.routed for o in ak.overrides()}
            out = rope_op.rope(q, k, cos, sin)
            grads = torch.autograd.grad(sum(o.square().sum() for o in out), (q, k))
            after = {o.name: o for o in ak.overrides()}
            ref = rope_ref.rope(q.detach(), k.detach(), cos, sin)
            ref_grads = rope_ref.rope_backward(*(2 * r for r in ref), cos, sin)
            fwd = rope_compare([o.detach() for o in out], ref, q, k, cos, sin, 1, False)
            bwd = rope_compare(grads, ref_grads, q, k, cos, sin, 1, True)
            report["routed"].append(dict(layout=layout, explain=ak.explain(torch.ops.accel.rope.default, q, k, cos,
                                                                           sin).kernel,
                                         routed=[after[n].routed - before[n] for n in names],
                                         failed=[after[n].failed for n in names], fwd=fwd[1], bwd=bwd[1]))
    finally:
        for n in names:
            ak.unregister(n)
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def report():
    if not TRITON:
        pytest.skip("triton not installed (tox envs install it)")
    return interpreted_report(SCRIPT)


def test_kernel_reads_a_strided_sin_or_cos_with_its_own_strides(report):
    direct = report["direct"]
    assert {e["layout"] for e in direct} == {"sin strided", "cos strided", "both strided"}
    assert len(direct) == 24
    # the two tables really are laid out differently in the cases that broke
    assert all(e["strides"][0] != e["strides"][1] for e in direct if e["layout"] != "both strided")
    assert [e for e in direct if e["problem"] is not None] == []


def test_routed_rope_with_a_strided_table_runs_the_kernel_and_matches_the_reference(report):
    routed = report["routed"]
    assert [e["layout"] for e in routed] == ["sin strided", "cos strided", "both strided"]
    for e in routed:
        assert e["explain"] == "rope_fwd.triton", e
        assert e["routed"] == [1, 1] and e["failed"] == [0, 0], e
        assert e["fwd"] is None and e["bwd"] is None, e
