"""accel.nn.functional.lm_head_loss: final-logit softcapping, the z-loss, label smoothing, class weights and
Hugging Face's ``num_items_in_batch`` through the chunked op, against the same loss written out with
``linear`` + ``tanh`` + ``cross_entropy`` + ``logsumexp`` (the reference every formula in
``kernels/ops/linear_cross_entropy/reference.py`` must equal); typed errors that leave nothing changed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accel.errors import LossInputError, TargetRangeError
from accel.nn.functional import lm_head_loss
from accel.nn.options import LinearCrossEntropyOptions

pytestmark = pytest.mark.cpu

V, D = 37, 8


def _written_out(hidden, weight, target, *, bias=None, softcap=None, z_loss=0.0, ignore_index=-100, reduction="mean",
                 label_smoothing=0.0, class_weight=None, num_items_in_batch=None):
    """The loss as a user would write it with the logits materialised (fp32 math for low-precision input)."""
    z = F.linear(hidden, weight, bias)
    if z.dtype in (torch.float16, torch.bfloat16):
        z = z.float()
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    z, t = z.reshape(-1, z.shape[-1]), target.reshape(-1)
    summed = num_items_in_batch is not None
    cw = None if class_weight is None else class_weight.to(z.dtype)
    ce = F.cross_entropy(z, t, weight=cw, ignore_index=ignore_index, label_smoothing=label_smoothing,
                         reduction="sum" if summed else ("none" if reduction == "none" else reduction))
    kept = (t != ignore_index).to(z.dtype)
    zz = z_loss * kept * torch.logsumexp(z, -1) ** 2
    if summed:
        return (ce + zz.sum()) / num_items_in_batch
    if reduction == "none":
        return (ce + zz).reshape(target.shape)
    if reduction == "sum":
        return ce + zz.sum()
    return ce + zz.sum() / kept.sum()


def _data(dtype=torch.float64, seed=0, shape=(3, 7)):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(*shape, D, generator=g) * 2).to(dtype).requires_grad_()
    w = torch.randn(V, D, generator=g).to(dtype).requires_grad_()
    b = torch.randn(V, generator=g).to(dtype).requires_grad_()
    t = torch.randint(0, V, shape, generator=g)
    t[0, -1] = t[1, 2] = -100
    return h, w, b, t


CASES = [  # softcap, z_loss, label_smoothing, class weight, bias, reduction, num_items_in_batch
    (None, 0.0, 0.0, False, False, "mean", None),
    (2.0, 0.0, 0.0, False, False, "mean", None),
    (None, 1e-2, 0.0, False, True, "mean", None),
    (3.0, 1e-3, 0.1, True, True, "mean", None),
    (1.5, 0.1, 0.0, False, False, "sum", None),
    (2.5, 0.05, 0.2, True, False, "none", None),
    (30.0, 1e-4, 0.0, False, False, "mean", 11),
    (2.0, 1e-2, 0.0, False, True, "mean", "tensor"),
]


@pytest.mark.parametrize("softcap,z_loss,smoothing,has_cw,has_b,reduction,items", CASES)
@pytest.mark.parametrize("chunk", [4, 64])
def test_equals_the_written_out_loss_and_its_gradients(softcap, z_loss, smoothing, has_cw, has_b, reduction, items,
                                                       chunk):
    """fp64, several chunks or one: the loss and the gradients of hidden, weight and bias equal autograd's through
    the written-out loss to fp64 rounding, for every option alone and together."""
    h, w, b, t = _data()
    cw = torch.rand(V, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5 if has_cw else None
    n = torch.tensor(9) if items == "tensor" else items
    kw = dict(bias=b if has_b else None, softcap=softcap, z_loss=z_loss, label_smoothing=smoothing, class_weight=cw,
              reduction=reduction, num_items_in_batch=n)
    want = _written_out(h, w, t, **kw)
    got = lm_head_loss(h, w, t, options=LinearCrossEntropyOptions(batch_chunk_size=chunk), **kw)
    assert got.shape == want.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    go = torch.rand_like(want) if reduction == "none" else torch.ones_like(want)
    params = (h, w, b) if has_b else (h, w)
    for a, e in zip(torch.autograd.grad(got, params, go), torch.autograd.grad(want, params, go)):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12)


def test_the_cap_changes_the_loss_and_zero_z_loss_is_plain_cross_entropy():
    """The options act: a cap near the logits' size moves the loss; no cap and no z-loss is ``cross_entropy``."""
    h, w, _, t = _data()
    plain = lm_head_loss(h, w, t)
    torch.testing.assert_close(plain, F.cross_entropy((h @ w.T).reshape(-1, V), t.reshape(-1)), rtol=1e-12, atol=0)
    with torch.no_grad():
        assert abs(float(lm_head_loss(h, w, t, softcap=1.0) - plain)) > 1e-2
        assert float(lm_head_loss(h, w, t, z_loss=1e-2)) > float(plain)


def test_bf16_loss_is_fp32_and_within_the_fp32_loss():
    """bf16 hidden states and weight: the loss comes back fp32. With fp32 logits (``acc_policy="accurate"``) it is
    within 1e-5 relative of the written-out loss on the fp32 upcast; with bf16 logits (``"compact"``, the CPU's
    default) within their rounding (a bf16 logit near 10 is off by up to 2**-5, so 1e-3 relative)."""
    h, w, _, t = _data(torch.bfloat16, seed=3, shape=(4, 16))
    want = _written_out(h.float(), w.float(), t, softcap=30.0, z_loss=1e-4)
    for policy, rel in (("accurate", 1e-5), ("compact", 1e-3)):
        got = lm_head_loss(h, w, t, softcap=30.0, z_loss=1e-4,
                           options=LinearCrossEntropyOptions(acc_policy=policy, acc_dtype=torch.float32
                                                             if policy == "accurate" else None))
        assert got.dtype == torch.float32
        assert abs(float(got) - float(want)) <= rel * abs(float(want)), policy
        gh, = torch.autograd.grad(got, h)
        eh, = torch.autograd.grad(want, h, retain_graph=True)
        assert gh.dtype == torch.bfloat16
        torch.testing.assert_close(gh.float(), eh.float(), rtol=2e-2, atol=5e-3)


def test_tied_weights_get_both_gradients():
    """A head weight shared with the embedding (weight tying) gets the embedding's gradient plus the loss's."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(V, D).double()
    ids = torch.randint(0, V, (2, 6))
    labels = torch.roll(ids, -1, 1)

    def step(loss_fn):
        emb.zero_grad(set_to_none=True)
        hidden = torch.tanh(emb(ids))
        loss_fn(hidden, emb.weight, labels).backward()
        return emb.weight.grad.clone()

    got = step(lambda hd, wt, lb: lm_head_loss(hd, wt, lb, softcap=2.0, z_loss=1e-3))
    want = step(lambda hd, wt, lb: _written_out(hd, wt, lb, softcap=2.0, z_loss=1e-3))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_row_kept_by_its_z_loss_alone():
    """A token whose target class has weight 0 contributes no cross-entropy but still its z-loss (and gradient)."""
    h, w, _, t = _data()
    cw = torch.ones(V, dtype=torch.float64)
    cw[t[0, 0]] = 0.0
    got = lm_head_loss(h, w, t, class_weight=cw, z_loss=0.5, reduction="none")
    want = _written_out(h, w, t, class_weight=cw, z_loss=0.5, reduction="none")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert float(got[0, 0]) > 0


BAD = [
    (dict(softcap=0.0), "softcap"), (dict(softcap=-2.0), "softcap"), (dict(softcap=float("inf")), "softcap"),
    (dict(softcap=True), "softcap"), (dict(z_loss=-1e-4), "z_loss"), (dict(z_loss=float("nan")), "z_loss"),
    (dict(num_items_in_batch=4, reduction="sum"), "num_items_in_batch"),
    (dict(num_items_in_batch=-1), "num_items_in_batch"), (dict(num_items_in_batch=torch.ones(2)), "one count"),
    (dict(reduction="avg"), "reduction"), (dict(label_smoothing=1.5), "label_smoothing"),
    (dict(class_weight=torch.ones(3, dtype=torch.float64)), "weight"),
    (dict(label_smoothing=True), "label_smoothing"), (dict(ignore_index=None), "ignore_index"),
    (dict(ignore_index=1.5), "ignore_index"),
]


@pytest.mark.parametrize("kwargs,fragment", BAD)
def test_bad_input_raises_a_typed_error_and_computes_nothing(kwargs, fragment):
    h, w, _, t = _data()
    with pytest.raises(LossInputError, match=fragment):
        lm_head_loss(h, w, t, **kwargs)
    assert h.grad is None and w.grad is None


def test_shape_and_range_errors():
    h, w, _, t = _data()
    with pytest.raises(LossInputError, match="leading shape"):
        lm_head_loss(h, w, t[:, :-1])
    with pytest.raises(LossInputError, match=r"\(V, D\)"):
        lm_head_loss(h, w[None], t)
    bad = t.clone()
    bad[0, 0] = V
    with pytest.raises(TargetRangeError, match="lm_head_loss"):
        lm_head_loss(h, w, bad)
    assert bool(torch.isnan(lm_head_loss(h, w, bad, check_target_range=False)))


def test_the_op_traces_with_its_extra_arguments_on_meta():
    """The op's fake kernel takes the softcap and the z-loss (torch.compile and the meta device see the shapes)."""
    x, w = torch.empty(10, D, device="meta"), torch.empty(V, D, device="meta")
    t = torch.empty(10, dtype=torch.long, device="meta")
    loss, gi, gw, gb = torch.ops.accel.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "compact",
                                                            torch.float32, False, True, True, False, 30.0, 1e-4)
    assert loss.shape == () and gi.shape == (10, D) and gw.shape == (V, D)
    with pytest.raises(LossInputError, match="softcap"):
        torch.ops.accel.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                             False, True, True, False, -1.0, 0.0)


def test_a_one_element_count_gives_a_scalar_loss():
    h, w, _, t = _data()
    got = lm_head_loss(h, w, t, num_items_in_batch=torch.tensor([9.0]))
    assert got.shape == ()
    torch.testing.assert_close(got, _written_out(h, w, t, num_items_in_batch=9), rtol=1e-12, atol=1e-12)
