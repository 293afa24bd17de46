"""accel.compile's LM-head loss pass: ``cross_entropy(linear(x, W), target)`` in a captured graph becomes accel's
fused loss (the logits never stored), with the model's own loss and gradients; whatever it cannot prove the same
is left as it is and named in :func:`accel.loss_pass_report`."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import accel
from accel import _loss_pass

pytestmark = pytest.mark.cpu
V, D = 96, 32


class Titan(nn.Module):
    """A torchtitan-style causal LM head: norm, bias-free head, shifted cross-entropy on fp32 logits."""

    def __init__(self, loss: str = "plain") -> None:
        super().__init__()
        self.emb, self.norm, self.output = nn.Embedding(V, D), nn.RMSNorm(D), nn.Linear(D, V, bias=False)
        self.loss = loss

    def forward(self, ids: torch.Tensor, soft: torch.Tensor | None = None):
        logits = self.output(self.norm(self.emb(ids)))
        flat, target = logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()
        if self.loss == "weighted":
            return F.cross_entropy(flat, target, weight=torch.ones(V))
        if self.loss == "soft":
            return F.cross_entropy(flat, soft)
        loss = F.cross_entropy(flat, target, ignore_index=-100, label_smoothing=0.1 if self.loss == "smooth" else 0.0)
        return (loss, logits) if self.loss == "returns_logits" else loss


def _aot_eager(report):
    from torch._dynamo.backends.registry import lookup_backend

    inner = lookup_backend("aot_eager")  # AOTAutograd without Inductor: the fused op's own backward runs

    def backend(gm, example_inputs):
        _loss_pass.rewrite(gm, report)
        return inner(gm, example_inputs)
    return backend


def _ids(rows=2, cols=9, seed=0):
    return torch.randint(0, V, (rows, cols), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("loss", ["plain", "smooth"])
def test_the_rewritten_loss_and_gradients_equal_the_models_own(loss):
    torch.manual_seed(0)
    ref = Titan(loss)
    model = copy.deepcopy(ref)
    report = _loss_pass.LossPassReport()
    compiled = torch.compile(model, backend=_aot_eager(report))
    ids = _ids()
    want, got = ref(ids), compiled(ids)
    want.backward()
    got.backward()
    assert len(report.rewritten) == 1 and not report.left, report
    assert "test_loss_pass.py:" in report.rewritten[0] and "in forward" in report.rewritten[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("loss, why", [("returns_logits", "other users"), ("weighted", "weight="),
                                       ("soft", "soft labels")])
def test_what_the_pass_cannot_prove_the_same_is_left_with_the_reason(loss, why):
    torch.manual_seed(0)
    ref = Titan(loss)
    report = _loss_pass.LossPassReport()
    compiled = torch.compile(copy.deepcopy(ref), backend=_aot_eager(report))
    ids = _ids()
    soft = torch.softmax(torch.randn(ids[:, 1:].numel(), V), -1) if loss == "soft" else None
    got, want = compiled(ids, soft), ref(ids, soft)
    assert not report.rewritten and len(report.left) == 1 and why in report.left[0][1], report
    torch.testing.assert_close(got, want)


def test_a_compiled_training_step_function_is_rewritten_with_dynamic_shapes():
    """The loss computed outside the model, in the compiled step function; dynamic=True, fullgraph=True: one
    graph for two batch shapes, the loss rewritten in it."""
    torch.manual_seed(0)
    ref = Titan()
    model = copy.deepcopy(ref)
    report = _loss_pass.LossPassReport()

    def step(ids):
        logits = model.output(model.norm(model.emb(ids)))
        return F.cross_entropy(logits.view(-1, V)[:-1].float(), ids.view(-1)[1:])

    compiled = torch.compile(step, backend=_aot_eager(report), dynamic=True, fullgraph=True)
    for rows, cols in ((2, 9), (3, 5)):
        ids = _ids(rows, cols)
        want = F.cross_entropy(ref.output(ref.norm(ref.emb(ids))).view(-1, V)[:-1].float(), ids.view(-1)[1:])
        torch.testing.assert_close(compiled(ids), want, rtol=1e-5, atol=1e-6)
    assert len(report.rewritten) >= 1 and not report.left


def test_accel_compile_runs_the_pass_under_inductor_and_reports_it():
    torch.manual_seed(0)
    ref = Titan()
    compiled = accel.compile(copy.deepcopy(ref))
    ids = _ids()
    torch.testing.assert_close(compiled(ids), ref(ids), rtol=1e-5, atol=1e-6)
    report = accel.loss_pass_report(compiled)
    assert len(report.rewritten) == 1 and "1 rewritten, 0 left" in str(report)
    assert [p.key for p in accel.compile_plan().passes] == ["loss_pass"]
    off = accel.compile(copy.deepcopy(ref), loss_pass=False)
    with pytest.raises(TypeError, match="loss_pass=True"):
        accel.loss_pass_report(off)


class _Counting(nn.Module):
    """A head and loss beside in-place buffer updates whose results nothing reads (BatchNorm's counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn, self.out = nn.BatchNorm1d(D), nn.Linear(D, V)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, h, y):
        self.steps.add_(1)
        return F.cross_entropy(self.out(self.bn(h)).float(), y)


def test_in_place_updates_elsewhere_in_the_graph_survive_the_rewrite():
    report = _loss_pass.LossPassReport()
    model = _Counting()
    compiled = torch.compile(model, backend=_aot_eager(report))
    h, y = torch.randn(6, D), torch.randint(0, V, (6,))
    for _ in range(3):
        compiled(h, y)
    assert len(report.rewritten) == 1 and int(model.steps) == 3 and int(model.bn.num_batches_tracked) == 3


@pytest.mark.parametrize("case, why", [("k_dim", "[N, C]"), ("split_vocab", "not the vocabulary"),
                                       ("bf16", "fp32"), ("module_weight", "weight=")])
def test_patterns_that_compute_something_else_are_left(case, why):
    torch.manual_seed(0)
    head = nn.Linear(D, V)
    h, y = torch.randn(4, 5, D), torch.randint(0, V, (4, 5))

    def loss(h, y):
        if case == "k_dim":  # classes read from dim 1: [4, 5, V] is N=4, C=5 here
            return F.cross_entropy(head(h).transpose(1, 2), y)
        if case == "split_vocab":
            return F.cross_entropy(head(h).view(-1, V // 2), torch.randint(0, V // 2, (40,)))
        if case == "bf16":
            return F.cross_entropy(head.bfloat16()(h.bfloat16()).flatten(0, 1), y.flatten())
        return nn.CrossEntropyLoss(weight=torch.ones(V))(head(h).flatten(0, 1).float(), y.flatten())

    report = _loss_pass.LossPassReport()
    torch.manual_seed(1)
    got = torch.compile(loss, backend=_aot_eager(report))(h, y)
    torch.manual_seed(1)
    torch.testing.assert_close(got, loss(h, y))
    assert not report.rewritten and why in report.left[0][1], report


def test_cross_entropy_loss_module_and_recompiles_report_once():
    """nn.CrossEntropyLoss passes every argument positionally; two batch shapes recompile the same code: one entry."""
    torch.manual_seed(0)
    head, crit = nn.Linear(D, V), nn.CrossEntropyLoss(ignore_index=3)
    report = _loss_pass.LossPassReport()
    compiled = torch.compile(lambda h, y: crit(head(h).float(), y), backend=_aot_eager(report))
    for n in (6, 9):
        h, y = torch.randn(n, D), torch.randint(0, V, (n,))
        torch.testing.assert_close(compiled(h, y), crit(head(h).float(), y), rtol=1e-5, atol=1e-6)
    assert len(report.rewritten) == 1 and not report.left, report


def test_an_out_of_range_target_raises_not_nan():
    head = nn.Linear(D, V)
    compiled = torch.compile(lambda h, y: F.cross_entropy(head(h).float(), y),
                             backend=_aot_eager(_loss_pass.LossPassReport()))
    with pytest.raises(RuntimeError, match="outside"):
        compiled(torch.randn(4, D), torch.tensor([1, 2, V, 0]))


def test_a_compiled_module_copies_and_pickles_and_keeps_its_own_report():
    import pickle

    model = Titan()
    first = accel.compile(model)
    first(_ids())
    second = accel.compile(model, loss_pass=False)
    assert len(accel.loss_pass_report(first).rewritten) == 1
    with pytest.raises(TypeError):
        accel.loss_pass_report(second)
    assert "_accel_loss_pass" not in vars(model)
    copy.deepcopy(model)
    pickle.loads(pickle.dumps(model))


@pytest.mark.parametrize("form", ["function", "method", "wrong_dim"])
def test_log_softmax_and_nll_loss_is_the_same_loss(form):
    torch.manual_seed(0)
    head = nn.Linear(D, V)
    h, y = torch.randn(7, D), torch.randint(0, V, (7,))

    def loss(h, y):
        z = head(h).float()
        lp = {"function": lambda: F.log_softmax(z, dim=-1), "method": lambda: z.log_softmax(-1),
              "wrong_dim": lambda: F.log_softmax(z, dim=0)}[form]()
        return F.nll_loss(lp, y, ignore_index=2)

    report = _loss_pass.LossPassReport()
    torch.testing.assert_close(torch.compile(loss, backend=_aot_eager(report))(h, y), loss(h, y), rtol=1e-5, atol=1e-6)
    if form == "wrong_dim":
        assert not report.rewritten and "last dimension" in report.left[0][1]
    else:
        assert len(report.rewritten) == 1 and not report.left
