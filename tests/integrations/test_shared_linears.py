"""``shared_input_linears``: an attention's q/k/v projections as one autograd node, the input's gradient summed
inside the backward's GEMMs.

The outputs and the weight and bias gradients equal ``F.linear``'s under autograd bit for bit; the input's
gradient is exactly ``dq @ Wq`` with the others added by ``addmm_`` (within a few units of the last place of
autograd's two-step sum); with ``recompute`` the input is not kept and the gradients keep their bits; an output
nobody used costs no GEMM; a kept tensor changed in place is autograd's error; bad arguments are a typed error.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accel.integrations._shared_linears import shared_input_linears
from accel.kernels.ops.rms_norm_hf import op as rn_op
from _kernel_helpers import saved_storages

pytestmark = pytest.mark.cpu

HIDDEN, OUTS = 16, (16, 8, 8)  # GQA: k and v narrower than q


def _leaves(dtype, bias, seed=0):
    g = torch.Generator().manual_seed(seed)

    def p(*s):
        return torch.randn(*s, generator=g).to(dtype).requires_grad_()

    h, nw = p(2, 5, HIDDEN), p(HIDDEN)
    weights = [p(o, HIDDEN) for o in OUTS]
    biases = [p(o) for o in OUTS] if bias else [None] * len(OUTS)
    return h, nw, weights, biases


def _norm(h, nw):
    return rn_op.rms_norm(h, nw, 1e-6, False)


def _run(fused, recompute, dtype, bias):
    h, nw, weights, biases = _leaves(dtype, bias)
    x = _norm(h, nw)
    if fused:
        outs = shared_input_linears(x, weights, biases, recompute=(lambda a, w: _norm(a, w), (h, nw)) if recompute
                                    else None)
    else:
        outs = [F.linear(x, w, b) for w, b in zip(weights, biases)]
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, generator=g).to(dtype) for o in outs]
    torch.autograd.backward(outs, grads)
    return [o.detach() for o in outs], h.grad, nw.grad, [w.grad for w in weights], [None if b is None else b.grad for b in biases]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("recompute", [False, True], ids=["x kept", "x recomputed"])
def test_outputs_and_weight_gradients_are_autograds_bit_for_bit(dtype, bias, recompute):
    outs0, h0, nw0, w0, b0 = _run(False, False, dtype, bias)
    outs1, h1, nw1, w1, b1 = _run(True, recompute, dtype, bias)
    assert all(torch.equal(a, b) for a, b in zip(outs0, outs1))
    assert all(torch.equal(a, b) for a, b in zip(w0, w1))
    if bias:
        assert all(torch.equal(a, b) for a, b in zip(b0, b1))
    eps = torch.finfo(dtype).eps
    for a, b in ((h0, h1), (nw0, nw1)):  # through the input's gradient: one rounding of the sum, not two
        assert b.dtype == a.dtype
        torch.testing.assert_close(b.float(), a.float(), rtol=0, atol=8 * eps * a.float().abs().max().item())


def test_the_input_gradient_is_the_sum_added_inside_the_gemms():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, HIDDEN, generator=g).to(torch.bfloat16).requires_grad_()
    weights = [torch.randn(o, HIDDEN, generator=g).to(torch.bfloat16) for o in OUTS]
    outs = shared_input_linears(x, weights, [None] * 3)
    grads = [torch.randn(o.shape, generator=g).to(torch.bfloat16) for o in outs]
    torch.autograd.backward(outs, grads)
    rows = [d.reshape(-1, d.shape[-1]) for d in grads]
    want = rows[0].mm(weights[0]).addmm_(rows[1], weights[1]).addmm_(rows[2], weights[2])
    assert torch.equal(x.grad, want.reshape(x.shape))
    unfused = sum(d.matmul(w) for d, w in zip(grads, weights))  # autograd's order: two roundings
    assert not torch.equal(x.grad, unfused)  # the test tells the two sums apart


def test_recompute_keeps_the_norms_input_not_the_projections_input():
    h, nw, weights, biases = _leaves(torch.float32, False)
    leaves = (h, nw, *weights)

    def kept(recompute):
        def fn(h, nw, *ws):
            x = _norm(h, nw)
            return shared_input_linears(x, ws, [None] * 3, recompute=(_norm, (h, nw)) if recompute else None)
        _, storages = saved_storages(fn, *leaves, exclude=leaves)
        return sorted(storages.values())

    rstd, x_bytes = 2 * 5 * 4, 2 * 5 * HIDDEN * 4
    assert kept(False) == sorted([rstd, x_bytes])  # the norm's rstd, x for the three weight gradients
    assert kept(True) == [rstd]


def test_an_unused_output_and_a_frozen_weight_get_no_gradient():
    """v unused (no gradient reaches the node for it) and k's weight frozen: q's and k's terms alone make the
    input's gradient, as autograd's for the two projections that were used."""
    grads = {}
    for fused in (False, True):
        h, nw, weights, _ = _leaves(torch.float32, False)
        ws = [weights[0], weights[1].detach(), weights[2]]
        x = _norm(h, nw)
        q, k, v = shared_input_linears(x, ws, [None] * 3) if fused else [F.linear(x, w) for w in ws]
        (q.square().sum() + k.sum()).backward()
        assert weights[0].grad is not None and weights[1].grad is None and weights[2].grad is None
        grads[fused] = (h.grad, weights[0].grad)
    torch.testing.assert_close(grads[True][0], grads[False][0], rtol=1e-5, atol=1e-6)
    assert torch.equal(grads[True][1], grads[False][1])


def test_a_kept_tensor_changed_in_place_is_autograds_error():
    h, nw, weights, _ = _leaves(torch.float32, False)
    x = _norm(h, nw)
    outs = shared_input_linears(x, weights, [None] * 3)
    with torch.no_grad():
        weights[1].mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        sum(o.sum() for o in outs).backward()


def test_mismatched_weights_and_biases_are_a_typed_error():
    x = torch.randn(3, HIDDEN)
    with pytest.raises(ValueError, match="one bias"):
        shared_input_linears(x, [torch.randn(4, HIDDEN)], [None, None])
    with pytest.raises(ValueError, match="at least one weight"):
        shared_input_linears(x, [], [])


def test_double_backward_is_refused_not_silently_wrong():
    """A gradient penalty (create_graph=True) would get an input gradient with no graph of its own: refused."""
    h, nw, weights, _ = _leaves(torch.float32, False)
    x = _norm(h, nw)
    outs = shared_input_linears(x, weights, [None] * 3)
    with pytest.raises(RuntimeError, match="shared_input_linears: no double backward .*norm_recompute=False"):
        torch.autograd.grad(sum(o.sum() for o in outs), x, create_graph=True)
