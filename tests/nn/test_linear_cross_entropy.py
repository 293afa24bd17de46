"""accel.nn's linear_cross_entropy and accel's chunked ops, on CPU: numerics against the unfused reference
(``linear`` + ``cross_entropy`` in fp64/fp32) for every option and dtype with NaN-poisoned outputs, gradients,
edge cases, shapes (hypothesis), typed errors, autograd limits, options, the module, torch.compile, and
which objects :mod:`accel.nn` hands out on this torch.

The chunked path here is the ops' default kernel (the eager chunked loop of
:mod:`accel.kernels.ops.linear_cross_entropy.reference`); the Triton row step in that loop is tested in
``tests/kernels/test_linear_cross_entropy_triton.py``.
"""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import accel.kernels as ak
import accel.nn
from accel._compat import nn as compat_nn
from accel.errors import KernelFallbackWarning, KernelRegistrationWarning, LossInputError, TargetRangeError, UnsupportedOperationError
from accel.kernels.dsl import launch
from accel.kernels.ops.linear_cross_entropy import op, reference
from accel.nn import linear_cross_entropy as own

from _kernel_helpers import _clean_registry  # noqa: F401 (fixture: no override survives a test)

pytestmark = pytest.mark.cpu

Options = own.LinearCrossEntropyOptions
LOWP = (torch.bfloat16, torch.float16)


@pytest.fixture(autouse=True)
def _poisoned(monkeypatch):
    """Every buffer the chunked loop allocates starts NaN: an element it forgets to write fails the test.
    The global generator is seeded: every run draws the same class weights and gradients."""
    monkeypatch.setattr(launch, "poison_outputs", True)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


def _inputs(n=13, d=8, c=11, *, dtype=torch.float32, bias=False, prob=False, ignored=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(c, d, generator=g) / math.sqrt(d) * 2).to(dtype).requires_grad_()
    b = (torch.randn(c, generator=g) * 0.5).to(dtype).requires_grad_() if bias else None
    if prob:
        t = torch.randn(n, c, generator=g).softmax(1).to(dtype)
    else:
        t = torch.randint(0, c, (n,), generator=g)
        if ignored and n > 2:
            t[::3] = -100
    return x, w, b, t


def _unfused(x, w, b, t, cw=None, reduction="mean", ls=0.0, dtype=torch.float64, ignore_index=-100):
    """``linear`` + ``cross_entropy`` with everything cast to ``dtype``, and its gradients."""
    xs, ws = x.detach().to(dtype).requires_grad_(), w.detach().to(dtype).requires_grad_()
    bs = None if b is None else b.detach().to(dtype).requires_grad_()
    tt = t.to(dtype) if t.dtype.is_floating_point else t
    loss = F.cross_entropy(F.linear(xs, ws, bs), tt, weight=None if cw is None else cw.to(dtype), reduction=reduction,
                           label_smoothing=ls, ignore_index=ignore_index)
    return loss, (xs, ws, bs)


def _grads(loss, tensors, go):
    tensors = [t for t in tensors if t is not None]
    return torch.autograd.grad((loss * go.to(loss.dtype)).sum(), tensors, allow_unused=True)


def _op_loss(x, w, t, b, cw, reduction, ls=0.0, chunk=4, policy="compact", acc=None, retain=False):
    acc = acc or (torch.float32 if x.dtype in LOWP else x.dtype)
    return op.linear_cross_entropy(x, w, t, b, cw, reduction, -100, ls, chunk, policy, acc, retain, x.requires_grad,
                                   w.requires_grad, b is not None and b.requires_grad)[0]


def _max_err(a, b):
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


# ----------------------------------------------------------------------------- exactness in fp64
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("prob", [False, True])
def test_op_matches_unfused_reference_in_fp64_for_every_option(reduction, prob):
    """fp64 end to end: the chunked op equals linear + cross_entropy to rounding, loss and gradients (input,
    weight, bias), for class weights, label smoothing, bias and ignored rows, chunks of 4 over 13 rows."""
    for ls, has_cw, has_b in itertools.product([0.0, 0.3], [False, True], [False, True]):
        x, w, b, t = _inputs(dtype=torch.float64, bias=has_b, prob=prob)
        cw = torch.rand(11, dtype=torch.float64) + 0.1 if has_cw else None
        ref, tensors = _unfused(x, w, b, t, cw, reduction, ls)
        out = _op_loss(x, w, t, b, cw, reduction, ls)
        assert out.dtype == torch.float64 and out.shape == ref.shape
        go = torch.randn(ref.shape, dtype=torch.float64)
        for got, want in zip(_grads(out, (x, w, b), go), _grads(ref, tensors, go)):
            assert _max_err(got, want) < 1e-10, (ls, has_cw, has_b)
        assert _max_err(out, ref) < 1e-10, (ls, has_cw, has_b)


# ------------------------------------------------------------------- low precision against fp32
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("policy", ["compact", "accurate"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_op_low_precision_within_the_unfused_paths_error(dtype, policy, reduction):
    """Against the fp32 unfused reference: the loss to 1e-5 relative where the logits are kept in fp32
    (fp32 input, ``accurate``), and within twice the error of the unfused low-precision path (logits and
    matmuls in the input dtype, softmax in fp32, as HF computes them) otherwise; the gradients within twice
    that path's error too (plus one rounding of the input dtype: the gradients made in the forward are scaled
    by ``grad_output`` in the backward; fp32 sums in another order: 1e-5 relative). Class weight, bias and ignored rows on; 40 rows in chunks of 16 over 300 classes."""
    x, w, b, t = _inputs(40, 32, 300, dtype=dtype, bias=True)
    cw = torch.rand(300) + 0.5
    ref, tensors = _unfused(x, w, b, t, cw, reduction, dtype=torch.float32)
    # the unfused low-precision path: logits in the input dtype, cross-entropy in fp32
    xs, ws, bs = (v.detach().clone().requires_grad_() for v in (x, w, b))
    lowp = F.cross_entropy(F.linear(xs, ws, bs).float(), t, weight=cw, reduction=reduction)
    out = _op_loss(x, w, t, b, cw, reduction, chunk=16, policy=policy)
    assert out.dtype == torch.float32
    go = torch.rand(ref.shape) + 0.5
    want = _grads(ref, tensors, go)
    base = [_max_err(g, r) for g, r in zip(_grads(lowp, (xs, ws, bs), go), want)]
    scale = float(ref.detach().abs().max())
    loss_err = _max_err(out, ref)
    if dtype == torch.float32 or policy == "accurate":
        assert loss_err <= 1e-5 * scale + 1e-6
    else:
        assert loss_err <= 2 * _max_err(lowp, ref) + 1e-5 * scale
    # one rounding more than the unfused path: the gradients made in the forward, scaled by grad_output after
    for got, r, e in zip(_grads(out, (x, w, b), go), want, base):
        assert got.dtype == dtype
        assert _max_err(got, r) <= 2 * e + max(torch.finfo(dtype).eps, 1e-5) * float(r.abs().max())


# ------------------------------------------------------------------------- functional semantics
@pytest.mark.parametrize("options", [None, Options(batch_chunk_size=3)], ids=["reference", "chunked"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_functional_equals_torch_formula(options, reduction):
    """accel's function equals ``cross_entropy(linear(...))`` in value and gradients, on both paths, with a
    class weight, a bias, the default ignore_index (-100 rows) and an explicit one; output dtype is the input's."""
    x, w, b, t0 = _inputs(bias=True)
    cw = torch.rand(11) + 0.1
    for ignore_index in (None, 4):
        t = t0 if ignore_index is None else torch.where(t0 == -100, ignore_index, t0)
        ref, tensors = _unfused(x, w, b, t, cw, reduction, dtype=torch.float32,
                                ignore_index=-100 if ignore_index is None else ignore_index)
        out = own.linear_cross_entropy(x, w, t, linear_bias=b, weight=cw, reduction=reduction,
                                       ignore_index=ignore_index, options=options)
        assert out.dtype == x.dtype and out.shape == ref.shape
        assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
        go = torch.rand(ref.shape) + 0.5
        for got, want in zip(_grads(out, (x, w, b), go), _grads(ref, tensors, go)):
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)


def test_functional_probability_targets_unbatched_and_k_dimensional():
    """Probability targets take the chunked path (input's dtype, no grad); unbatched input squeezes back;
    a K-dimensional loss (``linear_weight`` ``(C, d1, D)``) is the reference path's, with a warning."""
    x, w, b, t = _inputs(prob=True, bias=True)
    opts = Options()
    out = own.linear_cross_entropy(x, w, t, linear_bias=b, options=opts)
    assert torch.allclose(out, _unfused(x, w, b, t, dtype=torch.float32)[0], rtol=1e-5)
    for reduction in ("mean", "none"):
        one = own.linear_cross_entropy(x[0], w, t[0], reduction=reduction, options=opts)
        want = F.cross_entropy(F.linear(x[0], w), t[0], reduction=reduction)
        assert one.shape == want.shape == () and torch.allclose(one, want, rtol=1e-5)
        one = own.linear_cross_entropy(x[0], w, torch.tensor(3), reduction=reduction, options=opts)
        assert one.shape == () and torch.allclose(one, F.cross_entropy(F.linear(x[0], w), torch.tensor(3)))
    wk = torch.randn(5, 3, 8)
    tk = torch.randint(0, 5, (13, 3))
    with pytest.warns(UserWarning, match="options ignored"):
        got = own.linear_cross_entropy(x, wk, tk, linear_bias=torch.randn(5, 3), options=opts)
    assert got.isfinite()
    logits = F.linear(x, wk.reshape(15, 8)).reshape(13, 5, 3)
    assert torch.allclose(own.linear_cross_entropy(x, wk, tk), F.cross_entropy(logits, tk))


@pytest.mark.parametrize("case", ["smoothing", "prob_other_dtype", "prob_requires_grad"])
def test_options_fall_back_to_the_reference_path_with_a_warning(case):
    """torch's rule: label smoothing, a probability target of another dtype or one requiring grad run the
    reference path (same values; the target gets its gradient there), with one warning."""
    x, w, _, t = _inputs(prob=case != "smoothing")
    kwargs = {}
    if case == "smoothing":
        kwargs["label_smoothing"] = 0.1
    elif case == "prob_other_dtype":
        t = t.double()
    else:
        t = t.clone().requires_grad_()
    with pytest.warns(UserWarning, match="options ignored"):
        out = own.linear_cross_entropy(x, w, t, options=Options(), **kwargs)
    ref = own.linear_cross_entropy(x, w, t, **kwargs)
    assert torch.equal(out, ref)
    if case == "prob_requires_grad":
        out.backward()
        assert t.grad is not None


# ---------------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("prob", [False, True])
def test_one_row_and_one_class(prob):
    """One row: the chunk loop's smallest case. One class: the loss is 0 and every gradient 0 (log-softmax of
    one logit), like cross_entropy's."""
    x, w, b, t = _inputs(1, 8, 11, dtype=torch.float64, bias=True, prob=prob)
    for reduction in ("mean", "sum", "none"):
        ref, _ = _unfused(x, w, b, t, reduction=reduction)
        out = _op_loss(x, w, t, b, None, reduction)
        assert _max_err(out, ref) < 1e-12
    x, w, b, t = _inputs(6, 8, 1, dtype=torch.float64, bias=True, prob=prob, ignored=False)
    out = _op_loss(x, w, t, b, None, "sum")
    grads = torch.autograd.grad(out, (x, w, b))
    assert out.item() == 0.0 and all(g.abs().max().item() == 0.0 for g in grads)


def test_all_rows_ignored():
    """Every target -100: ``"mean"`` is NaN (0/0, as cross_entropy's), ``"sum"`` 0, ``"none"`` zeros, and the
    gradients are zeros (cross_entropy's; torch 2.15's own chunked path gives NaN gradients here)."""
    x, w, b, t = _inputs(bias=True)
    t = torch.full_like(t, -100)
    for reduction in ("mean", "sum", "none"):
        ref, _ = _unfused(x, w, b, t, reduction=reduction)
        out = _op_loss(x, w, t, b, None, reduction)
        assert torch.equal(out.isnan(), ref.isnan()) and torch.allclose(out.nan_to_num(), ref.float().nan_to_num())
        go = torch.ones(out.shape)
        for g in _grads(out, (x, w, b), go):
            assert float(g.abs().max()) == 0.0


def test_out_of_range_target_at_the_op_is_nan_not_a_crash():
    """The op reads no values it was not told to: a class index outside [0, C) that is not ignore_index (which
    the functional rejects before anything runs, in eager mode) gives that row a NaN loss and gradient."""
    x, w, b, t = _inputs(ignored=False)
    t[2] = 11
    t[5] = -7
    out = _op_loss(x, w, t, b, None, "none")
    assert out.isnan().tolist() == [i in (2, 5) for i in range(13)]
    with pytest.raises(TargetRangeError, match="class 11"):
        own.linear_cross_entropy(x, w, t, options=Options())
    with pytest.raises(IndexError):
        own.linear_cross_entropy(x, w, t)


def test_empty_batch():
    """No rows: ``"mean"`` NaN, ``"sum"`` 0, zero gradients (the chunk loop runs no chunk)."""
    x, w, b, t = _inputs(0, 8, 11, bias=True)
    assert _op_loss(x, w, t, b, None, "mean").isnan()
    out = _op_loss(x, w, t, b, None, "sum")
    assert out.item() == 0.0
    gx, gw, gb = torch.autograd.grad(out, (x, w, b))
    assert gx.shape == (0, 8) and float(gw.abs().sum()) == 0.0 and float(gb.abs().sum()) == 0.0


# ------------------------------------------------------------------------------------ hypothesis
hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis; install the 'test' extra")
st = pytest.importorskip("hypothesis.strategies")


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(n=st.integers(1, 17), d=st.integers(1, 9), c=st.integers(1, 40), chunk=st.integers(1, 20),
                  reduction=st.sampled_from(["mean", "sum", "none"]), prob=st.booleans(),
                  ls=st.sampled_from([0.0, 0.25]), seed=st.integers(0, 2**16))
def test_shapes_property(n, d, c, chunk, reduction, prob, ls, seed):
    """Any shape, chunk size (also larger than N) and option: the op equals the fp64 unfused reference."""
    x, w, b, t = _inputs(n, d, c, dtype=torch.float64, bias=True, prob=prob, seed=seed)
    ref, tensors = _unfused(x, w, b, t, reduction=reduction, ls=ls)
    out = _op_loss(x, w, t, b, None, reduction, ls, chunk=chunk)
    assert torch.equal(out.isnan(), ref.isnan())
    assert _max_err(out.nan_to_num(), ref.nan_to_num()) < 1e-9
    go = torch.rand(ref.shape, dtype=torch.float64)
    for got, want in zip(_grads(out, (x, w, b), go), _grads(ref, tensors, go)):
        assert _max_err(got, want) < 1e-9


# ---------------------------------------------------------------------------------- typed errors
def _bad_calls():
    x, w, _, t = _inputs()
    return [
        (lambda: own.linear_cross_entropy(x, w, t, reduction="avg"), LossInputError, "reduction='avg'"),
        (lambda: own.linear_cross_entropy(x, w, t, label_smoothing=1.5), LossInputError, "label_smoothing=1.5"),
        (lambda: own.linear_cross_entropy(x[None], w, t), LossInputError, "flatten sequence dims"),
        (lambda: own.linear_cross_entropy(x.long(), w, t), LossInputError, "floating dtype"),
        (lambda: own.linear_cross_entropy(x, w[:, :5], t), LossInputError, "in_features = 8"),
        (lambda: own.linear_cross_entropy(x, w[:0], t), LossInputError, "vocabulary of 0"),
        (lambda: own.linear_cross_entropy(x, w.double(), t), LossInputError, "same dtype"),
        (lambda: own.linear_cross_entropy(x[0], torch.randn(11, 2, 8), t[:2]), LossInputError, "needs batched"),
        (lambda: own.linear_cross_entropy(x, w, t, linear_bias=torch.randn(3)), LossInputError, "linear_bias is [3]"),
        (lambda: own.linear_cross_entropy(x, w, t, linear_bias=torch.randn(11).double()), LossInputError,
         "reference path"),
        (lambda: own.linear_cross_entropy(x, w, t, weight=torch.randn(3)), LossInputError, "class weight) is [3]"),
        (lambda: own.linear_cross_entropy(x, w, t, weight=torch.rand(11).double()), LossInputError, "cast the weight"),
        (lambda: own.linear_cross_entropy(x, w, t, linear_bias=torch.randn(11, device="meta")), LossInputError,
         "on meta"),
        (lambda: own.linear_cross_entropy(x, w, t.float()[:5]), LossInputError, "must be class indices"),
        (lambda: own.linear_cross_entropy(x, w, torch.zeros(13, 11, dtype=torch.long)), LossInputError,
         "holds class probabilities"),
        (lambda: own.linear_cross_entropy(x, w, torch.rand(13, 11), ignore_index=0), LossInputError,
         "ignore_index=0 with a probability target"),
        (lambda: own.linear_cross_entropy(x, w, t.int()), LossInputError, "torch.int64"),
        (lambda: own.linear_cross_entropy(x, w, t, options="fast"), LossInputError, "options is str"),
        (lambda: own.linear_cross_entropy(x, "w", t), LossInputError, "linear_weight is str"),
        (lambda: own.linear_cross_entropy(x, w, t.clamp(min=0) + 20), TargetRangeError, "class 20"),
        (lambda: Options(acc_policy="fast"), LossInputError, "acc_policy='fast'"),
        (lambda: Options(chunking_method="rows"), LossInputError, "chunking_method='rows'"),
        (lambda: Options(chunking_method="aspect_ratio:0"), LossInputError, "aspect_ratio:K"),
        (lambda: Options(batch_chunk_size=0), LossInputError, "batch_chunk_size=0"),
        (lambda: Options(acc_dtype=torch.int8), LossInputError, "acc_dtype=torch.int8"),
        (lambda: Options(batch_chunk_size=3, chunking_method="aspect_ratio").resolve(100, 8, 80, torch.float32),
         LossInputError, "give 3 and"),
        (lambda: own.LinearCrossEntropyLoss(4, 5, weight=torch.ones(3)), LossInputError, "must be [5]"),
        (lambda: own.LinearCrossEntropyLoss(4, 5, label_smoothing=-1.0), LossInputError, "label_smoothing=-1.0"),
        # the op's own checks (a direct call of torch.ops.accel.linear_cross_entropy)
        (lambda: op.linear_cross_entropy(x[0], w, t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "floating [N, D]"),
        (lambda: op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "auto", torch.float32,
                                         False, True, True, False), LossInputError, "resolved policy"),
        (lambda: op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 0, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "batch_chunk_size=0"),
        (lambda: op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "compact", torch.float16,
                                         False, True, True, False), LossInputError, "acc_dtype=torch.float16"),
        (lambda: op.linear_cross_entropy(x, w, t, None, None, "max", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "reduction='max'"),
        (lambda: op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 2.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "label_smoothing=2.0"),
        (lambda: op.linear_cross_entropy(x, w, t[:4], None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "int64 [13]"),
        (lambda: op.linear_cross_entropy(x, w, t.double()[:, None].expand(13, 11), None, None, "mean", -100, 0.0, 4,
                                         "compact", torch.float32, False, True, True, False), LossInputError,
         "probability target"),
        (lambda: op.linear_cross_entropy(x, w[:0], t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "C >= 1"),
        (lambda: op.linear_cross_entropy(x, w.double(), t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "must match"),
        (lambda: op.linear_cross_entropy(x, w[:, :2], t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32,
                                         False, True, True, False), LossInputError, "D = 8"),
        (lambda: op.linear_cross_entropy(x, w, t, torch.randn(2), None, "mean", -100, 0.0, 4, "compact",
                                         torch.float32, False, True, True, False), LossInputError, "linear_bias is [2]"),
        (lambda: op.linear_cross_entropy(x, w, t.to("meta"), None, None, "mean", -100, 0.0, 4, "compact",
                                         torch.float32, False, True, True, False), LossInputError, "target is on meta"),
        (lambda: op.linear_cross_entropy_backward(torch.ones(3), x, w, t, None, None, -100, 0.0, 4, "compact",
                                                  torch.float32, True, True, False), LossInputError, "grad_loss is [3]"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_bad_input_raises_a_typed_error_naming_it(index):
    """Every check's message is raised (and says what it saw); TargetRangeError is also an IndexError, every
    LossInputError also a ValueError and a RuntimeError (the types torch raises for the same input)."""
    call, error, fragment = _bad_calls()[index]
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value)
    assert isinstance(info.value, (ValueError, RuntimeError))


def test_the_bias_and_class_weight_messages_in_full():
    """linear_bias and the class weight share one check (``_check_per_class``): each message as it was written
    per tensor, word for word, K-dimensional bias shape included."""
    x, w, _, t = _inputs()
    where = "accel.nn.functional.linear_cross_entropy"
    for kwargs, message in [
        ({"linear_bias": torch.randn(3)}, "linear_bias is [3] torch.float32. It must be a floating [11], or None."),
        ({"linear_bias": torch.randint(0, 2, (11,))},
         "linear_bias is [11] torch.int64. It must be a floating [11], or None."),
        ({"linear_bias": torch.randn(11).double()}, "linear_bias is torch.float64, input torch.float32. The "
                                                    "reference path (options=None) needs them equal: cast the bias."),
        ({"weight": torch.randn(3)},
         "weight (class weight) is [3] torch.float32. It must be a floating [11], or None."),
        ({"weight": torch.rand(11).double()}, "weight (class weight) is torch.float64, input torch.float32. The "
                                              "reference path (options=None) needs them equal: cast the weight."),
    ]:
        with pytest.raises(LossInputError) as info:
            own.linear_cross_entropy(x, w, t, **kwargs)
        assert str(info.value) == f"{where}: {message}", kwargs
    with pytest.raises(LossInputError) as info:
        own.linear_cross_entropy(x.detach(), torch.randn(11, 2, 8), torch.randint(0, 11, (13, 2)),
                                 linear_bias=torch.randn(11))
    assert str(info.value) == f"{where}: linear_bias is [11] torch.float32. It must be a floating [11, 2], or None."


# -------------------------------------------------------------------------------- autograd limits
def test_second_backward_needs_allow_retain_graph():
    """The scalar reductions consume their precomputed gradients: a second backward raises, unless
    ``allow_retain_graph=True`` (then both backwards give the same gradient); ``"none"`` recomputes, so
    ``retain_graph`` just works."""
    x, w, _, t = _inputs()
    loss = own.linear_cross_entropy(x, w, t, options=Options())
    loss.backward(retain_graph=True)
    with pytest.raises(UnsupportedOperationError, match="allow_retain_graph=True"):
        loss.backward()
    x.grad = None
    loss = own.linear_cross_entropy(x, w, t, options=Options(allow_retain_graph=True))
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    assert torch.allclose(x.grad, 2 * first)
    x.grad = None
    loss = own.linear_cross_entropy(x, w, t, reduction="none", options=Options())
    loss.sum().backward(retain_graph=True)
    first = x.grad.clone()
    loss.sum().backward()
    assert torch.allclose(x.grad, 2 * first)


def test_op_refuses_what_it_cannot_differentiate():
    """At the op: a probability target that requires grad, and a compute_*_grad flag off for a tensor that
    requires grad (flags baked in at trace time) raise rather than silently drop a gradient; inference
    (no grad) computes no gradient at all."""
    x, w, _, t = _inputs(prob=True)
    with pytest.raises(UnsupportedOperationError, match="target requires grad"):
        op.linear_cross_entropy(x, w, t.clone().requires_grad_(), None, None, "mean", -100, 0.0, 4, "compact",
                                torch.float32, False, True, True, False)
    with pytest.raises(LossInputError, match="compute_input_grad=False"):
        op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32, False, False,
                                True, False)
    with torch.no_grad():
        loss, gi, gw, gb = op.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, 4, "compact",
                                                   torch.float32, False, False, False, False)
    assert gi.numel() == gw.numel() == gb.numel() == 0 and loss.isfinite()


def test_fake_kernels_give_the_outputs_shapes_and_dtypes():
    """Under FakeTensorMode the ops' fake kernels give every output's shape and dtype (what torch.compile
    traces with): ``()`` or ``[N]`` fp32 losses, gradients per compute flag, empties otherwise."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(9, 4, dtype=torch.bfloat16), torch.empty(30, 4, dtype=torch.bfloat16)
        t, b = torch.empty(9, dtype=torch.long), torch.empty(30, dtype=torch.bfloat16)
        outs = torch.ops.accel.linear_cross_entropy(x, w, t, b, None, "sum", -100, 0.0, 4, "compact", torch.float32,
                                                    False, True, False, True)
        assert [tuple(o.shape) for o in outs] == [(), (9, 4), (0, 0), (30,)]
        assert [o.dtype for o in outs] == [torch.float32] + [torch.bfloat16] * 3
        outs = torch.ops.accel.linear_cross_entropy(x, w, t, b, None, "none", -100, 0.0, 4, "compact", torch.float32,
                                                    False, True, True, True)
        assert [tuple(o.shape) for o in outs] == [(9,), (0, 0), (0, 0), (0,)]
        grads = torch.ops.accel.linear_cross_entropy_backward(torch.empty(9), x, w, t, b, None, -100, 0.0, 4,
                                                              "compact", torch.float32, True, True, True)
        assert [tuple(g.shape) for g in grads] == [(9, 4), (30, 4), (30,)]


# ----------------------------------------------------------------------------------------- options
def test_options_resolve_like_torch():
    """``resolve`` gives the chunk size, policy and accumulation dtype torch's own options resolve to (where
    torch has 2.15's: ``_adjust`` taking ``prob_target``), over a grid of shapes, dtypes and settings; the documented cases by value."""
    cpu = torch.device("cpu")
    r = Options().resolve(8192, 4096, 128256, torch.bfloat16, cpu)
    assert r == own.ResolvedOptions(256, "accurate", torch.float32, False)
    assert Options().resolve(8192, 4096, 128256, torch.bfloat16, None) == (256, "compact", torch.bfloat16, False)
    assert Options().resolve(100, 64, 50, torch.float32, cpu).batch_chunk_size == 16  # capped: N*C/(4D) -> 16
    assert Options(chunking_method=None).resolve(100, 64, 50, torch.float32, cpu).batch_chunk_size == 100
    assert Options(batch_chunk_size=7).resolve(100, 64, 50, torch.float32, cpu).batch_chunk_size == 7
    assert Options(chunking_method="aspect_ratio:4").resolve(4096, 512, 32000, torch.float32).batch_chunk_size == 32
    found = compat_nn.torch_linear_cross_entropy()
    if found is None:
        pytest.skip("this torch has no LinearCrossEntropyOptions to compare with")
    theirs = found[2]
    import inspect

    if "prob_target" not in inspect.signature(theirs._adjust).parameters:
        pytest.skip("this torch's options predate torch 2.15's (no probability-target cap); nothing to compare")
    prob_arg = True
    grid = itertools.product([1, 100, 8192], [64, 4096], [50, 32000], [torch.float32, torch.bfloat16],
                             [{}, {"batch_chunk_size": 7}, {"chunking_method": None}, {"chunking_method": "aspect_ratio:2"},
                              {"acc_policy": "accurate"}, {"acc_policy": "compact", "acc_dtype": torch.float32}],
                             [False, True] if prob_arg else [False])
    for n, d, c, dtype, kwargs, prob in grid:
        extra = {"prob_target": prob} if prob_arg else {}
        want = theirs(**kwargs)._adjust(num_batches=n, in_features=d, num_classes=c, dtype=dtype, device=cpu, **extra)
        got = Options(**kwargs).resolve(n, d, c, dtype, cpu, prob)
        assert got == (want.batch_chunk_size, want.acc_policy, want.acc_dtype, want.allow_retain_graph), \
            (n, d, c, dtype, kwargs, prob)


# ------------------------------------------------------------------------------------------ module
def test_module_matches_functional_and_torchs_state_dict():
    """``LinearCrossEntropyLoss`` holds ``linear`` and the class ``weight`` buffer as torch's module does (same
    state_dict keys and shapes where torch has the module), and its forward is the function's."""
    torch.manual_seed(0)
    cw = torch.rand(7)
    mod = own.LinearCrossEntropyLoss(5, 7, out_features=(2,), bias=True, weight=cw, ignore_index=1,
                                     options=Options())
    x, t = torch.randn(4, 5), torch.randint(0, 7, (4, 2))
    w = mod.linear.weight.reshape(7, 2, 5)
    want = own.linear_cross_entropy(x, w, t, linear_bias=mod.linear.bias.reshape(7, 2), weight=cw, ignore_index=1)
    with pytest.warns(UserWarning, match="options ignored"):  # K-dimensional: the reference path
        assert torch.allclose(mod(x, t), want)
    assert "num_classes=7" in repr(mod) and "out_features=(2,)" in repr(mod)
    found = compat_nn.torch_linear_cross_entropy()
    if found is not None:
        theirs = found[1](5, 7, out_features=(2,), bias=True, weight=cw)
        assert {k: v.shape for k, v in theirs.state_dict().items()} == {k: v.shape for k, v in mod.state_dict().items()}
        theirs.load_state_dict(mod.state_dict())
        assert torch.allclose(theirs(x, t), own.linear_cross_entropy(x, w, t, linear_bias=mod.linear.bias.reshape(7, 2),
                                                                      weight=cw))


# ---------------------------------------------------------------------------- torch.compile, accel.nn
def test_compiled_fullgraph_runs_the_custom_op():
    """``torch.compile(fullgraph=True)`` of accel's function (chunked path): one graph holding
    ``accel::linear_cross_entropy`` (its fake kernel traced, its autograd kept), same loss and gradients as eager."""
    torch._dynamo.reset()
    x, w, b, t = _inputs(bias=True)
    opts = Options(batch_chunk_size=4)
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(gm, example_inputs)

    fn = torch.compile(lambda x, w, b, t: own.linear_cross_entropy(x, w, t, linear_bias=b, options=opts),
                       fullgraph=True, backend=backend)
    loss = fn(x, w, b, t)
    got = torch.autograd.grad(loss, (x, w, b))
    ref = own.linear_cross_entropy(x, w, t, linear_bias=b)
    assert any("accel.linear_cross_entropy" in s for s in seen), seen
    assert torch.allclose(loss, ref, rtol=1e-5)
    for g, r in zip(got, torch.autograd.grad(ref, (x, w, b))):
        assert torch.allclose(g, r, rtol=1e-4, atol=1e-6)
    torch._dynamo.reset()


def test_accel_nn_hands_out_torchs_objects_where_torch_has_them():
    """Feature detection, not versions: where torch has ``F.linear_cross_entropy``, ``nn.LinearCrossEntropyLoss``
    and ``nn.LinearCrossEntropyOptions`` (torch 2.13+ builds), accel.nn's names are those very objects; elsewhere
    accel's own."""
    found = compat_nn.torch_linear_cross_entropy()
    if found is not None:
        assert accel.nn.functional.linear_cross_entropy is F.linear_cross_entropy
        assert accel.nn.LinearCrossEntropyLoss is torch.nn.LinearCrossEntropyLoss
        assert accel.nn.LinearCrossEntropyOptions is torch.nn.LinearCrossEntropyOptions
    else:
        assert accel.nn.functional.linear_cross_entropy is own.linear_cross_entropy
        assert accel.nn.LinearCrossEntropyLoss is own.LinearCrossEntropyLoss
        assert accel.nn.LinearCrossEntropyOptions is own.LinearCrossEntropyOptions


# ------------------------------------------------------------------------------ registry fail-safe
def test_an_impl_that_raises_gives_the_references_result_and_one_warning():
    """accel's op routed through the registry at the CPU key: an impl that raises falls back to the op's
    default kernel (the chunked reference) with one KernelFallbackWarning, and that shape is not retried."""
    calls = []

    def broken(*args):
        calls.append(1)
        raise RuntimeError("kernel exploded")

    with warnings.catch_warnings():
        # the core takes the custom op's CompositeExplicitAutograd kernel for "a composite only" and warns that
        # its backward op has no kernel: a false alarm for custom ops (their autograd and backward op have kernels)
        warnings.simplefilter("ignore", KernelRegistrationWarning)
        name = ak.register(op.FORWARD, impl=broken, backends=["cpu"], dsl="triton", name="lce-broken")
    x, w, _, t = _inputs()
    want = own.linear_cross_entropy(x, w, t)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = own.linear_cross_entropy(x, w, t, options=Options())
        second = own.linear_cross_entropy(x, w, t, options=Options())
    fallbacks = [w for w in seen if issubclass(w.category, KernelFallbackWarning)]
    assert len(fallbacks) == 1 and "kernel exploded" in str(fallbacks[0].message)
    assert len(calls) == 1
    assert torch.allclose(first, want) and torch.allclose(second, want)
    info = {o.name: o for o in ak.overrides()}[name]
    assert info.failed == 1 and info.denied_shapes == 1
    ak.unregister(name)


def test_row_step_and_coefficients_agree_with_cross_entropy_per_row():
    """The per-row form the kernels share (coefficients + row step) against cross_entropy's ``"none"`` rows,
    and its gradient rows against autograd's, for smoothing with a class weight."""
    g = torch.Generator().manual_seed(3)
    z = torch.randn(6, 9, dtype=torch.float64, generator=g, requires_grad=True)
    t = torch.tensor([0, 8, -100, 3, 3, 1])
    cw = torch.rand(9, dtype=torch.float64, generator=g)
    coef = reference.coefficients(t, cw, "none", -100, 0.2, 9, torch.float64)
    loss, grad = torch.empty(6, dtype=torch.float64), torch.empty(6, 9, dtype=torch.float64)
    reference.row_step(z.detach(), grad, coef, loss)
    want = F.cross_entropy(z, t, weight=cw, reduction="none", label_smoothing=0.2)
    assert _max_err(loss, want) < 1e-12
    assert _max_err(grad, torch.autograd.grad(want.sum(), z)[0]) < 1e-12


@pytest.mark.parametrize("chunked", [False, True])
def test_the_fp32_variant_returns_the_loss_unrounded_and_the_same_gradients(chunked):
    """linear_cross_entropy_fp32 (what a model's training loop reports, HF's loss being fp32): the same loss as
    the fp32-logits reference, not rounded to bf16; chunked, the gradients those of linear_cross_entropy; the
    reference path is HF's own computation (cross_entropy on the fp32 logits), gradients included."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(40, 16, generator=g) * 2).to(torch.bfloat16).requires_grad_()
    w = torch.randn(50, 16, generator=g).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 50, (40,), generator=g)
    t[:3] = -100
    options = own.LinearCrossEntropyOptions(batch_chunk_size=16) if chunked else None
    loss = own.linear_cross_entropy_fp32(x, w, t, options=options)
    want = F.cross_entropy(F.linear(x, w).float(), t)  # HF's ForCausalLMLoss: fp32 logits
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, want, rtol=1e-5 if not chunked else 2e-3, atol=0)
    rounded = own.linear_cross_entropy(x, w, t, options=options)
    assert rounded.dtype == torch.bfloat16 and rounded.float() == loss.to(torch.bfloat16).float()
    gx, gw = torch.autograd.grad(loss, (x, w))
    # chunked: the op's gradients, whatever the loss is returned as; reference: HF's (autograd through fp32 logits)
    rx, rw = torch.autograd.grad(rounded if chunked else want, (x, w))
    torch.testing.assert_close(gx, rx, rtol=0, atol=0)
    torch.testing.assert_close(gw, rw, rtol=0, atol=0)


def test_the_fp32_variant_can_skip_the_host_range_check():
    x, w = torch.randn(4, 8), torch.randn(10, 8)
    bad = torch.tensor([1, 2, 10, -100])
    with pytest.raises(TargetRangeError):
        own.linear_cross_entropy_fp32(x, w, bad, options=own.LinearCrossEntropyOptions())
    loss = own.linear_cross_entropy_fp32(x, w, bad, options=own.LinearCrossEntropyOptions(), check_target_range=False)
    assert torch.isnan(loss)  # the chunked path's answer for an out-of-range class, without a device-to-host read


def _odd_vocab_loop(dtype, policy):
    """The chunk loop's results (losses, grad_input, grad_W, grad_b) at 10 rows, d 8 and vocabulary 13, chunks
    of 4: a vocabulary no 16-byte multiple holds."""
    from accel.kernels.ops.linear_cross_entropy import reference as ref

    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 8, generator=g).to(dtype)
    w = torch.randn(13, 8, generator=g).to(dtype)
    t = torch.randint(0, 13, (10,), generator=g)
    coef = ref.coefficients(t, None, "mean", -100, 0.0, 13)
    return ref.chunked(x, w, coef, None, 4, policy, torch.float32, True, True, False)


@pytest.mark.parametrize("policy", ["compact", "accurate"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunk_buffers_rows_are_padded_to_16_bytes_and_the_results_do_not_change(dtype, policy, monkeypatch):
    """At an odd vocabulary the logits buffer's rows are padded (cuBLAS's fast kernels need 16-byte leading
    dimensions); the loop's results equal those of an unpadded buffer bit for bit."""
    from accel.kernels.ops.linear_cross_entropy import reference as ref

    buf = ref.aligned_rows(3, 13, dtype, torch.device("cpu"))
    assert buf.shape == (3, 13) and buf.stride(0) * buf.element_size() % 16 == 0
    assert ref.aligned_rows(3, 16, dtype, torch.device("cpu")).is_contiguous()
    padded = _odd_vocab_loop(dtype, policy)
    monkeypatch.setattr(ref, "aligned_rows", lambda r, c, dt, dev: torch.empty((r, c), dtype=dt, device=dev))
    plain = _odd_vocab_loop(dtype, policy)
    for a, b in zip(padded, plain):
        assert torch.equal(a, b)


@pytest.mark.parametrize("policy", ["compact", "accurate"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_chunk_matmuls_split_at_the_aligned_classes_on_a_gpu(dtype, policy, monkeypatch):
    """On a GPU device the logits and gradient matmuls take the 16-byte-aligned leading classes in one piece
    and the rest in a thin second one: the loss and the gradients within the rounding a different matmul
    shape may give (emulated on CPU by forcing the split point)."""
    from accel.kernels.ops.linear_cross_entropy import reference as ref

    cpu, gpu = torch.device("cpu"), torch.device("meta")
    assert ref.aligned_classes(50257, torch.bfloat16, gpu) == 50256
    assert ref.aligned_classes(50257, torch.bfloat16, cpu) == 50257
    assert ref.aligned_classes(32000, torch.bfloat16, gpu) == 32000 and ref.aligned_classes(3, dtype, gpu) == 3
    whole = _odd_vocab_loop(dtype, policy)
    monkeypatch.setattr(ref, "aligned_classes", lambda c, dt, dev: 8)
    split = _odd_vocab_loop(dtype, policy)
    tol = {"rtol": 0, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-3}
    for a, b in zip(split, whole):
        torch.testing.assert_close(a, b, **tol)


def test_the_triton_impl_runs_row_chunks_unless_told_tiles(monkeypatch):
    """``schedule="auto"`` (the default) is the row-chunked loop even where a tile fits; ``"tiles"`` takes the
    tiled schedule (measured slower on every H200 row: benchmarks/results/h200/README.md, "Linear cross-entropy")."""
    from accel.kernels.ops.linear_cross_entropy import reference as ref
    from accel.kernels.ops.linear_cross_entropy import tiled, triton_impl

    taken = []
    monkeypatch.setattr(tiled, "tile_shape", lambda *a: (4, 32))
    monkeypatch.setattr(tiled, "tiled", lambda *a: taken.append("tiles") or "tiles")
    monkeypatch.setattr(ref, "chunked", lambda *a, **k: taken.append("rows") or "rows")
    x, w = torch.randn(8, 4), torch.randn(40, 4)
    for schedule in ("auto", "rows", "tiles"):
        loop = triton_impl._loop("linear_cross_entropy_fwd", x, 40, schedule)
        loop(x, w, None, None, 4, "compact", torch.float32, True, True, False)
    assert taken == ["rows", "rows", "tiles"]
