"""``swiglu_mlp``: the whole gated MLP as one autograd node, its product and (given ``recompute``) its input
recomputed in backward.

Outputs and every weight gradient equal the modules' composition (three ``F.linear`` around ``accel::swiglu``) bit
for bit (the input's gradient within one rounding: its two terms are summed inside a GEMM), on 2-D and 3-D inputs, with and without biases, fp32 and bf16, with and without recomputing the input from
an RMSNorm; what autograd keeps is ``gate``, ``up`` and the weights (and the norm's input and weight in place of
``x``); gradients only for what requires them; a kept tensor modified in place is caught at backward.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from accel.kernels.ops.rms_norm_hf import op as rn_op
from accel.kernels.ops.swiglu import op as sw_op
from accel.kernels.ops.swiglu.mlp import swiglu_mlp
from _kernel_helpers import saved_storages

pytestmark = pytest.mark.cpu

HIDDEN, INTER = 12, 20


def _leaves(shape, dtype, bias, seed=0):
    """``h`` (the norm's input), the norm's weight, then the three weights and biases of the MLP."""
    g = torch.Generator().manual_seed(seed)

    def p(*s):
        return torch.randn(*s, generator=g).to(dtype).requires_grad_()

    h, nw = p(*shape, HIDDEN), p(HIDDEN)
    weights = [p(INTER, HIDDEN), p(INTER, HIDDEN), p(HIDDEN, INTER)]
    biases = [p(INTER), p(INTER), p(HIDDEN)] if bias else [None, None, None]
    return [h, nw, *weights, *biases]


def _plain(h, nw, gw, uw, dw, gb, ub, db):
    x = rn_op.rms_norm(h, nw, 1e-6)
    return F.linear(sw_op.swiglu(F.linear(x, gw, gb), F.linear(x, uw, ub)), dw, db)


def _fused(h, nw, gw, uw, dw, gb, ub, db):
    x = rn_op.rms_norm(h, nw, 1e-6)
    return swiglu_mlp(x, gw, uw, dw, gb, ub, db)


def _fused_recomputed(h, nw, gw, uw, dw, gb, ub, db):
    x = rn_op.rms_norm(h, nw, 1e-6)
    return swiglu_mlp(x, gw, uw, dw, gb, ub, db, recompute=(lambda a, w: rn_op.rms_norm(a, w, 1e-6), (h, nw)))


def _grads(fn, leaves):
    y = fn(*leaves)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype))
    return y.detach(), [None if t is None else t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(6,), (2, 5)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("fused", [_fused, _fused_recomputed], ids=["x kept", "x recomputed"])
def test_equals_the_modules_composition_bit_for_bit(dtype, shape, bias, fused):
    """The output and the MLP's weight and bias gradients bit for bit; ``x``'s gradient (so the norm's input's and
    weight's) within one rounding of the two projections' sum, which ``swiglu_mlp`` adds inside the GEMM."""
    y0, g0 = _grads(_plain, _leaves(shape, dtype, bias))
    y1, g1 = _grads(fused, _leaves(shape, dtype, bias))
    assert y1.dtype == dtype and y1.shape == (*shape, HIDDEN)
    assert torch.equal(y0, y1)
    eps = torch.finfo(dtype).eps
    for i, (a, b) in enumerate(zip(g0, g1)):
        assert (a is None) == (b is None)
        if a is None:
            continue
        if i < 2:  # h and the norm's weight: through x's gradient
            assert a.dtype == b.dtype
            # a sum's rounding error scales with its terms, not with the (possibly cancelled) sum: bound it by
            # a few units of the largest gradient's last place
            scale = a.float().abs().max().item()
            torch.testing.assert_close(b.float(), a.float(), rtol=0, atol=8 * eps * scale)
        else:
            assert torch.equal(a, b)


def test_the_input_gradient_is_the_sum_added_inside_the_gemm():
    """``x``'s gradient is exactly ``grad_gate @ gate_w`` with ``grad_up @ up_w`` added by ``addmm_`` (the
    bits this backward promises), checked by rebuilding both gradients from the leaves."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(7, HIDDEN, generator=g).to(torch.bfloat16).requires_grad_()
    gw, uw, dw = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((INTER, HIDDEN), (INTER, HIDDEN),
                                                                              (HIDDEN, INTER)))
    dy = torch.randn(7, HIDDEN, generator=g).to(torch.bfloat16)
    swiglu_mlp(x, gw, uw, dw).backward(dy)
    gate, up = F.linear(x.detach(), gw), F.linear(x.detach(), uw)
    grad_gate, grad_up = sw_op.swiglu_backward(dy.matmul(dw), gate, up)
    assert torch.equal(x.grad, grad_gate.mm(gw).addmm_(grad_up, uw))


def _kept(fn, leaves) -> set:
    """The storages autograd keeps for backward that are not the leaves' (the intermediates): (ptr, bytes)."""
    _, kept = saved_storages(fn, *leaves, exclude=leaves)
    return set(kept.items())


def test_autograd_keeps_gate_and_up_not_the_product_nor_the_recomputed_input():
    leaves = _leaves((64,), torch.float32, False)
    row, inter = 64 * HIDDEN * 4, 64 * INTER * 4
    sizes = lambda fn: sorted(n for _, n in _kept(fn, leaves))  # noqa: E731
    # the modules: the norm's rstd, x (kept by both input projections), gate, up, the product
    assert sizes(_plain) == sorted([64 * 4, row, inter, inter, inter])
    assert sizes(_fused) == sorted([64 * 4, row, inter, inter])
    assert sizes(_fused_recomputed) == sorted([64 * 4, inter, inter])


def test_only_the_gradients_asked_for_are_computed():
    h, nw, gw, uw, dw, *_ = _leaves((4,), torch.float32, False)
    x = rn_op.rms_norm(h.detach(), nw.detach(), 1e-6).requires_grad_()
    frozen = [w.detach() for w in (gw, uw)]
    y = swiglu_mlp(x, *frozen, dw)
    y.sum().backward()
    assert x.grad is not None and dw.grad is not None
    assert gw.grad is None and uw.grad is None
    x2 = x.detach()  # nothing below requires grad but the down projection's weight
    swiglu_mlp(x2, *frozen, dw).sum().backward()
    assert x2.grad is None


def test_a_recompute_input_modified_in_place_is_caught_at_backward():
    h, nw, gw, uw, dw, *_ = _leaves((4,), torch.float32, False)
    base = h.detach().clone()
    x = rn_op.rms_norm(base, nw, 1e-6)
    y = swiglu_mlp(x, gw, uw, dw, recompute=(lambda a, w: rn_op.rms_norm(a, w, 1e-6), (base, nw)))
    base.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_double_backward_is_refused_not_silently_wrong():
    h, nw, gw, uw, dw, *_ = _leaves((4,), torch.float32, False)
    x = rn_op.rms_norm(h, nw, 1e-6)
    y = swiglu_mlp(x, gw, uw, dw)
    with pytest.raises(RuntimeError, match="swiglu_mlp: no double backward .*mlp_recompute=False"):
        torch.autograd.grad(y.sum(), x, create_graph=True)  # a penalty on gx would silently lack gx's graph
    (gx,) = torch.autograd.grad(swiglu_mlp(x, gw, uw, dw).sum(), x)  # first order: fine
    assert gx.shape == x.shape and not gx.requires_grad
