"""The transformers integration where it meets the rest of the ecosystem, on CPU with accel's references at the
CPU key: the releases it supports (both cache spellings, accel doctor, the docs table), Trainer, an ``lm_head``
whose own call adds something (adapters, hooks, replaced forwards), and degenerate batches through the fused loss.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]'); the integration needs it")

from accel.errors import IntegrationWarning  # noqa: E402
from accel.integrations import transformers as hf  # noqa: E402
from accel.integrations.transformers import causal_lm  # noqa: E402

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parents[2]
V = 64


def _llama(seed: int = 0):
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=V, max_position_embeddings=64)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def _ids(b: int = 2, s: int = 12):
    return torch.randint(1, V, (b, s), generator=torch.Generator().manual_seed(1))


def _loss_and_grads(model, **inputs):
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


# ------------------------------------------------------------------------------------------ releases
def test_a_patched_model_takes_the_cache_under_each_name_its_release_accepts(cpu_kernels):
    """Generation-style calls: the cache passed back as ``past_key_values`` (and, from transformers 5.25 on, as
    ``cache``) gives the unpatched model's logits."""
    ref, model = _llama(), hf.patch(_llama())
    assert set(hf.report(model).replaced) >= {"LlamaAttention", "LlamaDecoderLayer", "LlamaForCausalLM"}
    params = inspect.signature(type(ref).forward.__wrapped__ if hasattr(type(ref).forward, "__wrapped__")
                               else type(ref).forward).parameters
    names = ["past_key_values"] + (["cache"] if "cache" in str(inspect.signature(
        hf.code.innermost(type(ref).forward))) else [])
    assert params  # the class has a signature to read
    ids = _ids()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notice for the old name
        for name in names:
            a, b = ref(input_ids=ids, use_cache=True), model(input_ids=ids, use_cache=True)
            cache_a = getattr(a, "past_key_values", None) or getattr(a, "cache", None)
            cache_b = getattr(b, "past_key_values", None) or getattr(b, "cache", None)
            nxt = _ids(2, 1)
            la = ref(input_ids=nxt, use_cache=True, **{name: cache_a}).logits
            lb = model(input_ids=nxt, use_cache=True, **{name: cache_b}).logits
            torch.testing.assert_close(lb, la, rtol=1e-5, atol=1e-5, msg=name)


def test_doctor_says_whether_transformers_is_a_tested_release(monkeypatch):
    import importlib.metadata

    from accel import diagnostics

    here = diagnostics._transformers_check()
    assert here.ok and "a tested release" in here.detail and here.fix == ""
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.3.0")
    between = diagnostics._transformers_check()
    assert "between the tested releases" in between.detail and "verifies each role" in between.detail
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "6.1.0")
    later = diagnostics._transformers_check()
    assert later.ok and "outside the tested range" in later.detail and "verifies each role" in later.detail
    assert "pip install 'transformers>=4.57.6,<5.26'" in later.fix


def test_the_docs_table_is_what_this_release_gets():
    """docs/transformers.md's families x roles table equals support_table() here; run on every tested release
    (tox envs transformers457, cpu, transformers525), so the page cannot drift from the code."""
    from accel.integrations.transformers.support import support_table

    page = (ROOT / "docs" / "transformers.md").read_text()
    table = re.search(r"<!-- support-table[^>]*-->\n(.*?)\n<!-- /support-table -->", page, re.S).group(1)
    assert table == support_table()


def test_trainer_with_accels_callback_trains_as_the_plain_trainer(cpu_kernels, monkeypatch):
    """examples/trainer_llama.py end to end: with AccelCallback the model is patched (accel's ops routed, its
    references standing in for kernels) and the losses equal the plain Trainer's within fp32 summation order."""
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate")
    import accel.kernels as ak

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sys.modules.pop("trainer_llama", None)
    example = importlib.import_module("trainer_llama")
    monkeypatch.setattr(ak, "install", lambda *a, **k: None)  # the test's CPU references are the kernels here
    out = example.main(["--steps", "4", "--json"])
    assert len(out["accel"]) == len(out["plain"]) == 4
    for a, b in zip(out["accel"], out["plain"]):
        assert abs(a - b) <= 1e-4 * abs(b), out
    routed = {o.name: o.routed for o in ak.overrides()}
    assert routed[cpu_kernels["accel::linear_cross_entropy"]] > 0 and routed[cpu_kernels["accel::swiglu"]] > 0


# ------------------------------------------------------------------ lm_head's own call comes first
class _LoraLinear(nn.Linear):
    """loralib's shape: an nn.Linear subclass whose forward adds a low-rank adapter."""

    def __init__(self, base: nn.Linear, r: int = 4) -> None:
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None)
        self.weight = base.weight
        self.lora_a = nn.Parameter(torch.randn(r, base.in_features) * 0.3)
        self.lora_b = nn.Parameter(torch.randn(base.out_features, r) * 0.3)

    def forward(self, x):
        return super().forward(x) + x @ self.lora_a.t() @ self.lora_b.t()


def _adapter(model):
    model.lm_head = _LoraLinear(model.lm_head)


def _hook(model):
    model.lm_head.register_forward_hook(lambda m, args, out: out * 1.5 + 0.25)


def _replaced_forward(model):
    head = model.lm_head
    plain = head.forward
    head.forward = lambda x: plain(x) - 0.5


@pytest.mark.parametrize("change", [_adapter, _hook, _replaced_forward], ids=["adapter", "hook", "forward"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_the_loss_is_the_lm_heads_own_call_with_an_adapter_hook_or_replaced_forward(change, when, cpu_kernels):
    """Whatever calling lm_head adds (a loralib-style subclass adapter, a forward hook, accelerate's replaced
    forward), before patch or after it: the patched loss and every gradient (the adapter's too) equal the model's
    own, and the step-aside is said once."""
    ref, model = _llama(), _llama()
    for m in (ref, model):
        torch.manual_seed(3)
        change(m) if when == "before" or m is ref else None
    hf.patch(model)
    if when == "after":
        torch.manual_seed(3)
        change(model)
    causal_lm._SAID.clear()
    ids = _ids()
    want, want_grads = _loss_and_grads(ref, input_ids=ids, labels=ids)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got, grads = _loss_and_grads(model, input_ids=ids, labels=ids)
        _loss_and_grads(model, input_ids=ids, labels=ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert grads.keys() == want_grads.keys()
    for n in want_grads:
        torch.testing.assert_close(grads[n], want_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    said = [str(w.message) for w in seen if issubclass(w.category, IntegrationWarning)]
    if hf.report(model).replaced.get("LlamaForCausalLM"):  # replaced: it stepped aside at the call, once
        assert len(said) == 1 and "lm_head" in said[0], said
    else:
        assert "lm_head" in hf.report(model).left["LlamaForCausalLM"]["reason"]


def test_a_plain_lm_head_still_gets_the_fused_loss(cpu_kernels):
    import accel.kernels as ak

    model = hf.patch(_llama())
    ids = _ids()
    before = {o.name: o.routed for o in ak.overrides()}[cpu_kernels["accel::linear_cross_entropy"]]
    assert model(input_ids=ids, labels=ids).logits is None
    after = {o.name: o.routed for o in ak.overrides()}[cpu_kernels["accel::linear_cross_entropy"]]
    assert after > before


# ------------------------------------------------------------------------------ degenerate batches
def _degenerate():
    ids = _ids()
    none = torch.full_like(ids, -100)
    one = none.clone()
    one[0, 5] = ids[0, 5]
    return ids, {
        "all_ignored": {"labels": none},
        "all_ignored_num_items_0": {"labels": none, "num_items_in_batch": torch.tensor(0)},
        "all_ignored_num_items_int_0": {"labels": none, "num_items_in_batch": 0},
        "one_token": {"labels": one},
        "one_token_num_items": {"labels": one, "num_items_in_batch": torch.tensor(1)},
        "num_items_tensor": {"labels": ids, "num_items_in_batch": torch.tensor(7)},
        "num_items_int": {"labels": ids, "num_items_in_batch": 11},
    }


@pytest.mark.parametrize("case", sorted(_degenerate()[1]))
def test_degenerate_batches_give_the_models_own_loss_and_gradients(case, cpu_kernels):
    """Every label ignored (Hugging Face's loss is NaN there: kept so), a zero or tensor num_items_in_batch, one
    counted token: the patched loss equals the model's own (NaN where it is NaN) and every gradient equals the
    model's own (zero where nothing is counted, never NaN where the model's is not)."""
    ids, cases = _degenerate()
    ref, model = _llama(), hf.patch(_llama())
    want, want_grads = _loss_and_grads(ref, input_ids=ids, **cases[case])
    got, grads = _loss_and_grads(model, input_ids=ids, **cases[case])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert grads.keys() == want_grads.keys()
    for n in want_grads:
        torch.testing.assert_close(grads[n], want_grads[n], rtol=1e-4, atol=1e-6, equal_nan=True, msg=n)


# ------------------------------------------------------------------ weights that are not plain tensors
class _Rounded(torch.Tensor):
    """A weight that rounds itself to multiples of 1/64 whenever an op reads it (fake quantisation with a
    straight-through gradient): what the module's own arithmetic computes with it is not its raw values'."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}

        def unwrap(t):
            if isinstance(t, _Rounded):
                t = t.as_subclass(torch.Tensor)
                return t + (torch.round(t * 64) / 64 - t).detach()
            return t

        if func not in _ROUNDED_OPS:
            return super().__torch_function__(func, types, args, kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            args = tuple(unwrap(a) for a in args)
            kwargs = {k: unwrap(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)


#: The ops through which the model's norms and head read their weights.
_ROUNDED_OPS = {torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.mul, torch.mul, nn.functional.linear}


def test_norm_and_lm_head_weights_that_are_tensor_subclasses_train_as_the_models_own_code(cpu_kernels):
    """Every RMSNorm weight and lm_head's weight fake-quantised (a tensor subclass): the norms, the fused adds and
    the fused loss step aside (the loss says so once), and the loss and gradients are the unpatched model's."""
    ref, model = _llama(), hf.patch(_llama())
    for m in (ref, model):
        for mod in m.modules():
            if type(mod).__name__ == "LlamaRMSNorm" or mod is m.lm_head:
                mod.weight = nn.Parameter(mod.weight.detach().as_subclass(_Rounded))
    ids = _ids()
    want, want_grads = _loss_and_grads(ref, input_ids=ids, labels=ids)
    causal_lm._SAID.clear()
    with pytest.warns(IntegrationWarning, match="lm_head.weight is a _Rounded"):
        got, grads = _loss_and_grads(model, input_ids=ids, labels=ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for n in want_grads:
        torch.testing.assert_close(grads[n], want_grads[n], rtol=1e-4, atol=1e-6, msg=n)


def test_the_one_node_attention_is_decided_per_model_config():
    """A Mistral whose sliding window is shorter than the tiny instance's sequence never takes the one-node path
    (its mask is never None): that config's attentions run without it, and a Mistral patched before keeps it."""
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4.x passes every attention call a mask or a cache: no one-node path")
    kw = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=V, max_position_embeddings=64)
    wide = hf.patch(transformers.MistralForCausalLM(transformers.MistralConfig(**kw)))
    narrow = hf.patch(transformers.MistralForCausalLM(transformers.MistralConfig(**kw, sliding_window=4)))
    assert wide.model.layers[0].self_attn.__dict__.get("accel_one_node") is True
    assert narrow.model.layers[0].self_attn.__dict__.get("accel_one_node") is None
    assert wide.model.layers[1].self_attn.__dict__.get("accel_one_node") is True
