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
