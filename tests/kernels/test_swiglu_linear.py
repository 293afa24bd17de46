"""``swiglu_linear``: ``F.linear(silu(gate) * up, weight, bias)`` whose backward recomputes the product.

Outputs and every gradient equal the plain composition's bit for bit (same ops, same order), on 2-D and 3-D
inputs, with and without bias, fp32 and bf16; autograd keeps exactly one ``[tokens, intermediate]`` tensor
less between forward and backward; gradients are only computed for the inputs that require them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accel.kernels.ops.swiglu import op as sw_op
from accel.kernels.ops.swiglu.linear import swiglu_linear
from _kernel_helpers import saved_storages

pytestmark = pytest.mark.cpu


def _leaves(shape, out, dtype, bias):
    g = torch.Generator().manual_seed(0)
    gate, up = (torch.randn(*shape, generator=g).to(dtype).requires_grad_() for _ in range(2))
    w = torch.randn(out, shape[-1], generator=g).to(dtype).requires_grad_()
    b = torch.randn(out, generator=g).to(dtype).requires_grad_() if bias else None
    return gate, up, w, b


def _grads(fn, leaves, seed=1):
    y = fn(*leaves)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    y.backward(g)
    return y.detach(), [None if t is None else t.grad for t in leaves]


def _plain(gate, up, w, b):
    return F.linear(sw_op.swiglu(gate, up), w, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(6, 10), (2, 5, 10)])
@pytest.mark.parametrize("bias", [False, True])
def test_equals_the_plain_composition_bit_for_bit(dtype, shape, bias):
    y0, g0 = _grads(_plain, _leaves(shape, 7, dtype, bias))
    y1, g1 = _grads(swiglu_linear, _leaves(shape, 7, dtype, bias))
    assert y1.dtype == dtype and y1.shape == (*shape[:-1], 7)
    assert torch.equal(y0, y1)
    for a, b in zip(g0, g1):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


def _saved_bytes(fn, leaves) -> int:
    return sum(saved_storages(fn, *leaves, exclude=leaves)[1].values())


def test_the_product_is_not_saved_for_backward():
    leaves = _leaves((64, 48), 16, torch.float32, False)
    product = 64 * 48 * 4
    assert _saved_bytes(_plain, leaves) == product  # the plain composition keeps silu(gate) * up
    assert _saved_bytes(swiglu_linear, leaves) == 0  # only the inputs themselves


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ops that run inside it (accel's custom ops and ATen's)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _backward_ops(gate, up, w) -> list[str]:
    y = swiglu_linear(gate, up, w)
    with _Ops() as ops:
        y.sum().backward()
    return ops.seen


def test_the_backward_runs_only_what_the_gradients_asked_for_need():
    gate, up, w, _ = _leaves((4, 6), 3, torch.float32, False)
    both = _backward_ops(gate, up, w)
    assert "accel.swiglu" in both and "accel.swiglu_backward" in both
    w_frozen = _backward_ops(*(t.detach().requires_grad_() for t in (gate, up)), w.detach())
    assert "accel.swiglu" not in w_frozen and "accel.swiglu_backward" in w_frozen  # no product recomputed
    acts_frozen = _backward_ops(gate.detach(), up.detach(), w.detach().requires_grad_())
    assert "accel.swiglu" in acts_frozen and "accel.swiglu_backward" not in acts_frozen


def test_torch_func_grad_runs_through_it():
    gate, up, w, _ = (t.detach() if t is not None else None for t in _leaves((4, 6), 3, torch.float32, False))
    got = torch.func.grad(lambda w_: swiglu_linear(gate, up, w_).sum())(w)
    w2 = w.clone().requires_grad_()
    _plain(gate, up, w2, None).sum().backward()
    assert torch.equal(got, w2.grad)


def test_only_the_gradients_asked_for_are_computed():
    gate, up, w, _ = _leaves((4, 6), 3, torch.float32, False)
    w.requires_grad_(False)
    swiglu_linear(gate, up, w).sum().backward()
    assert gate.grad is not None and up.grad is not None and w.grad is None
    gate2, up2, w2, _ = _leaves((4, 6), 3, torch.float32, False)
    gate2.requires_grad_(False)
    up2.requires_grad_(False)
    swiglu_linear(gate2, up2, w2).sum().backward()
    gate3, up3, w3, _ = _leaves((4, 6), 3, torch.float32, False)
    _plain(gate3.detach(), up3.detach(), w3, None).sum().backward()
    assert gate2.grad is None and up2.grad is None and torch.equal(w2.grad, w3.grad)


def test_bad_input_raises_before_anything_runs():
    gate, up, w, _ = _leaves((4, 6), 3, torch.float32, False)
    with pytest.raises(RuntimeError, match="one shape"):
        swiglu_linear(gate, up[:, :5], w)
