"""accel's mixture-of-experts ops (``accel::moe_gather``, ``accel::moe_combine``, ``accel::grouped_mm``) and
:func:`accel.nn.moe.experts` against a per-token loop, for every routing pattern a router can produce: idle
experts, one expert taking every pair, top-1 and top-8."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accel.kernels.ops.moe import op as moe_op
from accel.kernels.ops.moe import reference as moe_ref
from accel.nn import moe

pytestmark = pytest.mark.cpu

#: name -> (tokens, experts, top_k, how the ids are drawn)
PATTERNS = {"idle_experts": (9, 16, 2, "low"), "one_expert": (6, 4, 1, "one"), "top1": (11, 4, 1, "random"),
            "top8": (5, 8, 8, "perm")}


def _routing(pattern: str, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    t, e, k, how = PATTERNS[pattern]
    if how == "low":  # only experts 0-2 get pairs: 13 of 16 idle
        ids = torch.stack([torch.randperm(3, generator=gen)[:k] for _ in range(t)])
    elif how == "one":
        ids = torch.full((t, k), 2)
    elif how == "perm":  # every expert once per token
        ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    else:
        ids = torch.randint(0, e, (t, k), generator=gen)
    return ids, e


def _loop(h, ids, weights, w_in, w_out, act):
    """The experts as Hugging Face's eager loop computes them: token by token, expert by expert."""
    out = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for k in range(ids.shape[1]):
            e = ids[t, k]
            out[t] += weights[t, k] * (act(h[t:t + 1] @ w_in[e]) @ w_out[e])[0]
    return out


def _swiglu(x):
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_experts_equal_the_per_token_loop_with_gradients(pattern):
    gen = torch.Generator().manual_seed(0)
    ids, e = _routing(pattern, gen)
    t, k = ids.shape
    d, i = 8, 6
    h = torch.randn(t, d, dtype=torch.float64, generator=gen, requires_grad=True)
    weights = torch.rand(t, k, dtype=torch.float64, generator=gen, requires_grad=True)
    w_in = torch.randn(e, d, 2 * i, dtype=torch.float64, generator=gen, requires_grad=True)
    w_out = torch.randn(e, i, d, dtype=torch.float64, generator=gen, requires_grad=True)
    got = moe.experts(h, ids, weights, w_in, w_out, _swiglu)
    want = _loop(h, ids, weights, w_in, w_out, _swiglu)
    torch.testing.assert_close(got, want)
    dy = torch.randn_like(want)
    grads = torch.autograd.grad(got, (h, weights, w_in, w_out), dy)
    want_grads = torch.autograd.grad(want, (h, weights, w_in, w_out), dy)
    for a, b, name in zip(grads, want_grads, ("hidden", "weights", "w_in", "w_out")):
        torch.testing.assert_close(a, b, msg=name)
    idle = sorted(set(range(e)) - set(ids.flatten().tolist()))
    if idle:  # an expert that got no pair: zero gradient, not garbage
        assert grads[2][idle].abs().max() == 0 and grads[3][idle].abs().max() == 0


def test_biases_and_low_precision_weights():
    """GPT-OSS's biased experts; bf16 activations with fp32 router weights (the combine accumulates in fp32)."""
    gen = torch.Generator().manual_seed(1)
    ids, e = _routing("top1", gen)
    t, k = ids.shape
    h = torch.randn(t, 8, generator=gen)
    weights = torch.rand(t, k, generator=gen)
    w_in, w_out = torch.randn(e, 8, 12, generator=gen), torch.randn(e, 6, 8, generator=gen)
    b_in, b_out = torch.randn(e, 12, generator=gen), torch.randn(e, 8, generator=gen)
    got = moe.experts(h, ids, weights, w_in, w_out, _swiglu, b_in=b_in, b_out=b_out)
    want = torch.zeros_like(h)
    for tt in range(t):
        ee = ids[tt, 0]
        want[tt] = weights[tt, 0] * (_swiglu(h[tt:tt + 1] @ w_in[ee] + b_in[ee]) @ w_out[ee] + b_out[ee])[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    low = moe.experts(h.bfloat16(), ids, weights, w_in.bfloat16(), w_out.bfloat16(), _swiglu,
                      b_in=b_in.bfloat16(), b_out=b_out.bfloat16())
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), want, rtol=5e-2, atol=5e-2)


def test_the_ops_differentiate_as_their_references_and_pass_opcheck():
    gen = torch.Generator().manual_seed(2)
    ids, e = _routing("idle_experts", gen)
    t, k = ids.shape
    _, perm = torch.sort(ids.reshape(-1))
    x = torch.randn(t, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(t * k, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.rand(t, k, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: moe_op.gather(a, perm, k), (x,))
    assert torch.autograd.gradcheck(lambda a, b: moe_op.combine(a, perm, b, k), (y, w))
    assert torch.autograd.gradcheck(lambda a: moe_op.combine(a, perm, None, k), (y,))
    offs = torch.bincount(ids.reshape(-1), minlength=e).cumsum(0).to(torch.int32)
    wm = torch.randn(e, 5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: moe_op.grouped_mm(a, b, offs), (y, wm))
    f32 = lambda z: z.detach().float().requires_grad_()  # noqa: E731
    torch.library.opcheck(moe_op.gather, (f32(x), perm, k))
    torch.library.opcheck(moe_op.combine, (f32(y), perm, f32(w), k))
    torch.library.opcheck(moe_op.grouped_mm, (f32(y), f32(wm), offs))
    assert torch.equal(moe_ref.inverse(perm)[perm], torch.arange(t * k))


def test_bad_input_raises_a_typed_error_naming_the_op():
    y, perm = torch.randn(6, 4), torch.arange(6)
    with pytest.raises(RuntimeError, match="accel::moe_combine: weights must be \\[tokens, top_k\\]"):
        moe_op.combine(y, perm, torch.rand(2, 2), 2)
    with pytest.raises(RuntimeError, match="accel::moe_gather: perm must be 1-D int64"):
        moe_op.gather(y, perm.int(), 2)
    with pytest.raises(RuntimeError, match="accel::grouped_mm: x has 4 columns"):
        moe_op.grouped_mm(y, torch.randn(2, 5, 3), torch.tensor([3, 6], dtype=torch.int32))


def test_torchs_grouped_mm_is_taken_only_where_it_runs():
    """CPU and fp32 calls go to accel::grouped_mm; the check reads no device state for them."""
    x, w = torch.randn(4, 8), torch.randn(2, 8, 8)
    assert not moe.native_grouped_mm_takes(x, w)
    assert not moe.native_grouped_mm_takes(x.bfloat16(), w.bfloat16())  # a CPU


def test_fake_kernels_lay_out_outputs_as_the_kernels_do():
    """Non-contiguous router weights (a transposed view) and expert weights: the fake kernels' strides are the real
    ones (opcheck's fake-tensor test), so the backward compiles."""
    gen = torch.Generator().manual_seed(3)
    ids, e = _routing("top1", gen)
    t, k = ids.shape
    _, perm = torch.sort(ids.reshape(-1))
    y = torch.randn(t * k, 6, generator=gen, requires_grad=True)
    w = torch.rand(k, t, generator=gen).t().requires_grad_()
    torch.library.opcheck(moe_op.combine, (y, perm, w, k))
    offs = torch.bincount(ids.reshape(-1), minlength=e).cumsum(0).to(torch.int32)
    wm = torch.randn(e, 5, 6, generator=gen).transpose(1, 2).requires_grad_()
    torch.library.opcheck(moe_op.grouped_mm, (y, wm, offs))


@pytest.mark.parametrize("offs", [[2, 3, 4], [3, 8, 6], [6, 2, 6]])
def test_grouped_mm_refuses_offsets_that_do_not_count_its_rows(offs):
    x, w = torch.randn(6, 4), torch.randn(3, 4, 2)
    with pytest.raises(RuntimeError, match="cumulative count of the 6 rows"):
        moe_op.grouped_mm(x, w, torch.tensor(offs, dtype=torch.int32))
