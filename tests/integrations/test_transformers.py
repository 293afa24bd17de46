"""accel.integrations.transformers on CPU: tiny random-init models of every covered family.

A patched model's outputs and gradients equal the unpatched model's (fp32; on CPU the accel ops run their
references, Hugging Face's arithmetic op for op, and the loss runs accel.nn's chunked path); unpatch gives
every module its class back with the same parameter objects; unknown models are left as they are;
``enable()`` makes ``from_config`` build patched modules through transformers' own hook and ``disable()``
undoes it. Skipped where transformers is not installed.
"""

from __future__ import annotations

import copy
import doctest
import importlib.util
import io
import json
import sys

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'transformers>=5.17'); the integration needs it")

from accel.errors import FeatureUnavailableError
from accel.integrations import transformers as hf
from accel.integrations.transformers import attention as hf_attention
from accel.integrations.transformers import decoder_layer as hf_layer
from accel.integrations.transformers import guards as hf_guards
from accel.integrations.transformers.handoff import HANDOFFS, RECIPES
from _kernel_helpers import saved_storages

pytestmark = pytest.mark.cpu

#: accel.nn's linear_cross_entropy (the causal LM's loss path) is in this checkout.
HAS_LCE = importlib.util.find_spec("accel.nn") is not None
needs_lce = pytest.mark.skipif(not HAS_LCE, reason="accel.nn (linear_cross_entropy) is not in this checkout")
LCE_OP = "accel.nn.functional.linear_cross_entropy"

V = 64  # vocabulary
#: transformers 5.x builds no mask for an unpadded causal batch without a cache; 4.x builds one (and keeps its KV
#: cache in a training call, see causal_lm): the one-node attention and the dropped training cache are 5.x paths.
TF5 = int(transformers.__version__.split(".")[0]) >= 5
needs_tf5 = pytest.mark.skipif(not TF5, reason="transformers 4.x passes every attention call a mask or a cache: "
                                                "the one-node attention (no mask, no cache) and the dropped training "
                                                "cache apply from 5.0 on")
_DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": V, "max_position_embeddings": 64}


def _configs() -> dict:
    t = transformers
    return {
        "llama": (t.LlamaForCausalLM, t.LlamaConfig(**_DECODER)),
        "mistral": (t.MistralForCausalLM, t.MistralConfig(**_DECODER)),
        "qwen2": (t.Qwen2ForCausalLM, t.Qwen2Config(**_DECODER)),
        "qwen3": (t.Qwen3ForCausalLM, t.Qwen3Config(**_DECODER, head_dim=8)),
        "gemma": (t.GemmaForCausalLM, t.GemmaConfig(**_DECODER, head_dim=8)),
        "gemma2": (t.Gemma2ForCausalLM, t.Gemma2Config(**_DECODER, head_dim=8)),
        "gemma3": (t.Gemma3ForCausalLM, t.Gemma3TextConfig(**_DECODER, head_dim=8, final_logit_softcapping=None)),
        "phi3": (t.Phi3ForCausalLM, t.Phi3Config(**_DECODER, pad_token_id=0)),
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=V, n_positions=64)),
        "bert": (t.BertForMaskedLM, t.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                 intermediate_size=64, vocab_size=V)),
        "t5": (t.T5ForConditionalGeneration, t.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8,
                                                        vocab_size=V, feed_forward_proj="gated-silu",
                                                        decoder_start_token_id=0, pad_token_id=0)),
    }


#: What patch replaces per family (original class -> accel op), and what it leaves with which reason.
EXPECTED = {
    "llama": ("Llama", "swiglu", True, True), "mistral": ("Mistral", "swiglu", True, True),
    "qwen2": ("Qwen2", "swiglu", True, True), "qwen3": ("Qwen3", "swiglu", True, True),
    "phi3": ("Phi3", "swiglu", True, True), "gemma": ("Gemma", "geglu", True, True),
    "gemma2": ("Gemma2", "geglu", True, True), "gemma3": ("Gemma3", "geglu", True, True),
}
#: Why a decoder layer whose residual adds accel does not fuse is left (Phi-3's dropout on each branch).
LAYER_LEFT = "its modules are not a pre-norm layer's (input_layernorm, mlp, post_attention_layernorm, self_attn): it holds "


def _is_accel(module) -> bool:
    return "accel_original" in vars(type(module))


def _build(family: str, seed: int = 0):
    cls, cfg = _configs()[family]
    torch.manual_seed(seed)
    model = cls(cfg).eval()  # eval: dropout off, so both models compute the same
    return model, copy.deepcopy(model)


def _inputs(family: str):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (2, 12), generator=g)
    if family == "t5":
        return {"input_ids": ids, "labels": torch.randint(1, V, (2, 7), generator=g)}
    labels = ids.clone()
    labels[0, :3] = -100  # ignored positions, as padding gives them
    return {"input_ids": ids, "labels": labels}


def _loss_and_grads(model, inputs, **extra):
    model.zero_grad(set_to_none=True)
    out = model(**inputs, **extra)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _routed(names: dict) -> dict:
    import accel.kernels as ak

    info = {o.name: o for o in ak.overrides()}
    return {op: info[n].routed for op, n in names.items()}


@pytest.mark.parametrize("family", sorted(_configs()))
def test_patched_model_matches_the_unpatched_one_outputs_and_gradients(family, cpu_kernels):
    ref, model = _build(family)
    params = {n: id(p) for n, p in model.named_parameters()}
    keys = list(model.state_dict())
    assert hf.patch(model) is model
    assert {n: id(p) for n, p in model.named_parameters()} == params  # the same Parameter objects
    assert list(model.state_dict()) == keys
    inputs = _inputs(family)
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    lm_replaced = _is_accel(model)  # the loss path: logits only when asked for
    out, grads = _loss_and_grads(model, inputs, **({"return_logits": True} if lm_replaced else {}))
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.logits, ref_out.logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    routed = _routed(cpu_kernels)
    replaced = {e["op"] for e in hf.report(model).replaced.values()}
    for op, n in routed.items():  # every op the patch put in ran through accel's registry
        wanted = op in replaced or (op == "accel::linear_cross_entropy" and LCE_OP in replaced)
        assert (n > 0) == wanted, (op, n, replaced)


@pytest.mark.parametrize("family", sorted(_configs()))
def test_where_no_kernel_takes_a_call_the_patched_model_runs_its_own_code_bit_for_bit(family):
    """No accel kernel at the CPU key: every replaced module declines to the model's own code (not the ops'
    references, which are slower): outputs, logits and gradients equal the unpatched model's exactly."""
    import accel.kernels as ak

    assert not any("cpu" in o.backends for o in ak.overrides())
    ref, model = _build(family)
    hf.patch(model)
    inputs = _inputs(family)
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    out, grads = _loss_and_grads(model, inputs, **({"return_logits": True} if _is_accel(model) else {}))
    assert torch.equal(out.loss, ref_out.loss) and out.loss.dtype == torch.float32
    assert torch.equal(out.logits, ref_out.logits)  # the model's own loss path returns its logits
    assert grads.keys() == ref_grads.keys()
    assert all(torch.equal(grads[n], ref_grads[n]) for n in ref_grads)


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_report_names_each_replacement_and_what_is_left(family):
    prefix, gated, fused_loss, fused_adds = EXPECTED[family]
    _, model = _build(family)
    before = hf.report(model)
    assert before.known and before.families == [family] and before.replaced == {}
    assert before.left[f"{prefix}RMSNorm"]["reason"] == "not patched"
    report = hf.patch(model) and hf.report(model)
    lm = f"{prefix}ForCausalLM"
    n_layers = 2
    assert report.replaced[f"{prefix}Attention"] == {"op": "accel::rope", "count": n_layers}
    left = {}
    if fused_loss and HAS_LCE:
        assert report.replaced[lm] == {"op": LCE_OP, "count": 1}
    else:
        left[lm] = report.left[lm]
        assert left[lm]["reason"].startswith(f"{LCE_OP} is not available here")
    norms = report.replaced[f"{prefix}RMSNorm"]
    assert norms["op"] == "accel::rms_norm_hf" and norms["count"] >= 2 * n_layers + 1
    assert report.replaced[f"{prefix}MLP"] == {"op": f"accel::{gated}", "count": n_layers}
    if fused_adds:
        assert report.replaced[f"{prefix}DecoderLayer"] == {"op": "accel::add_rms_norm_hf", "count": n_layers}
    else:
        layer = report.left.pop(f"{prefix}DecoderLayer")
        assert layer["count"] == n_layers and layer["reason"].startswith(LAYER_LEFT), layer
    assert report.left == left
    assert json.loads(json.dumps(report.as_dict()))["replaced"] == report.replaced
    assert str(report).startswith(f"{lm} ({family}):")


def test_gpt2_and_bert_layernorm_already_routes_and_t5_norms_are_replaced():
    _, gpt2 = _build("gpt2")
    r = hf.report(hf.patch(gpt2))
    assert r.routes == {"LayerNorm": {"op": "aten::native_layer_norm", "count": 2 * 2 + 1}}
    assert r.replaced == ({"GPT2LMHeadModel": {"op": LCE_OP, "count": 1}} if HAS_LCE else {})
    _, bert = _build("bert")
    r = hf.report(hf.patch(bert))
    assert r.families == ["bert"] and r.replaced == {} and r.routes["LayerNorm"]["op"] == "aten::native_layer_norm"
    _, t5 = _build("t5")
    r = hf.report(hf.patch(t5))
    assert r.replaced == {"T5LayerNorm": {"op": "accel::rms_norm_hf", "count": (2 * 2 + 1) + (2 * 3 + 1)}}


@needs_lce
def test_logits_are_none_with_labels_unless_asked_and_unchanged_without_labels(cpu_kernels):
    """With grad on (a training step, train or eval mode) and labels: accel's loss, logits None unless
    return_logits=True. Under no_grad (evaluation: Trainer.evaluate's compute_metrics reads the logits) and
    without labels: the model's own code, logits as always."""
    ref, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    out = model(**inputs)
    assert out.logits is None
    torch.testing.assert_close(out.loss, ref(**inputs).loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model(**inputs, return_logits=True).logits, ref(**inputs).logits, rtol=1e-5,
                               atol=1e-5)
    as_tuple = model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], ref(**inputs).loss, rtol=1e-5, atol=1e-6)
    ref_sum = ref(**inputs, num_items_in_batch=torch.tensor(7)).loss
    torch.testing.assert_close(model(**inputs, num_items_in_batch=torch.tensor(7)).loss, ref_sum, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        plain = ref(**inputs)
        got = model(**inputs)
        torch.testing.assert_close(got.logits, plain.logits, rtol=0, atol=0)  # evaluation: the class's own path
        torch.testing.assert_close(got.loss, plain.loss, rtol=0, atol=0)
        got = model(input_ids=inputs["input_ids"])
        assert got.loss is None
        torch.testing.assert_close(got.logits, ref(input_ids=inputs["input_ids"]).logits, rtol=0, atol=0)


@needs_tf5
@needs_lce
def test_a_training_call_with_labels_builds_no_kv_cache_unless_asked(cpu_kernels):
    """Training mode, labels, no past_key_values: no cache (Hugging Face builds one and the step drops it), the
    loss unchanged; ``use_cache=True`` or eval mode: the cache as the model builds it."""
    ref, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    ref.train(), model.train()  # the tiny configs have no dropout: both still compute the same
    out = model(**inputs)
    assert out.past_key_values is None
    torch.testing.assert_close(out.loss, ref(**inputs).loss, rtol=1e-5, atol=1e-6)
    assert ref(**inputs).past_key_values is not None  # what the model itself does
    assert model(**inputs, use_cache=True).past_key_values is not None
    model.eval()
    with torch.no_grad():
        assert model(**inputs).past_key_values is not None


def test_unpatch_restores_every_original_class():
    _, model = _build("qwen3")
    classes = [type(m) for m in model.modules()]
    params = [id(p) for p in model.parameters()]
    hf.patch(model)
    assert any(_is_accel(m) for m in model.modules())
    assert hf.unpatch(model) is model
    assert [type(m) for m in model.modules()] == classes
    assert [id(p) for p in model.parameters()] == params
    assert hf.report(model).replaced == {}


def test_patch_can_leave_roles_out_and_twice_is_once():
    _, model = _build("mistral")
    hf.patch(model, mlp=False, loss=False)
    hf.patch(model, mlp=False, loss=False)
    r = hf.report(model)
    assert set(r.replaced) == {"MistralRMSNorm", "MistralAttention", "MistralDecoderLayer"}
    assert r.left["MistralMLP"]["reason"] == "not patched"


def test_unknown_models_are_left_as_they_are():
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    classes = [type(m) for m in seq.modules()]
    assert hf.patch(seq) is seq and [type(m) for m in seq.modules()] == classes
    r = hf.report(seq)
    assert not r.known and r.replaced == {} and "left as it is" in str(r)

    class LlamaRMSNorm(torch.nn.Module):  # a look-alike outside transformers: not a class accel covers
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))
            self.variance_epsilon = 1e-6

        def forward(self, x):
            return x * self.weight

    fake = torch.nn.Sequential(LlamaRMSNorm())
    hf.patch(fake)
    assert type(fake[0]) is LlamaRMSNorm and not hf.report(fake).known
    with pytest.raises(TypeError, match="not an nn.Module"):
        hf.patch("model")


def test_a_patched_model_pickles_and_saves_under_its_own_architecture(tmp_path):
    _, model = _build("llama")
    hf.patch(model)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded.model.norm).__qualname__ == "AccelLlamaRMSNorm" and _is_accel(loaded.model.norm)
    assert hf.report(loaded).replaced == hf.report(model).replaced


def _hook_works() -> bool:
    """Whether transformers' patch hook runs here with a class registered (5.17's lists every transformers
    module, importing image-processor aliases that need torchvision; later releases do not)."""
    try:
        import transformers.monkey_patching as mp
    except ImportError:
        return False
    key = "^AccelHookProbeNoSuchClass$"
    mp.register_patch_mapping({key: torch.nn.Identity})
    try:
        with mp.apply_patches():
            pass
        return True
    except Exception:  # noqa: BLE001 - whatever the hook raises, it does not work here
        return False
    finally:
        mp.unregister_patch_mapping([key])


@pytest.fixture
def working_hook(monkeypatch):
    """transformers 5.17's ``apply_patches`` lists every transformers module with ``dir()``, which imports each
    image-processor alias module, which needs torchvision: without it every ``from_config`` fails while any
    class is registered. Where torchvision is missing, the aliases are hidden from ``sys.modules`` for the test
    (they are import-time shims no model here uses)."""
    if not _hook_works():
        for name, module in list(sys.modules.items()):
            if name.startswith("transformers") and getattr(module, "__file__", "") is None:
                monkeypatch.delitem(sys.modules, name)


needs_hook_module = pytest.mark.skipif(importlib.util.find_spec("transformers.monkey_patching") is None,
                                       reason="transformers.monkey_patching is new in 5.17")


@needs_hook_module
@pytest.mark.skipif(_hook_works(), reason="transformers' patch hook works here")
def test_enable_refuses_a_hook_that_fails_here_and_leaves_no_class_patched():
    from transformers.models.llama import modeling_llama

    with pytest.raises(FeatureUnavailableError, match="patch hook fails in this environment"):
        hf.enable(families=["llama"])
    assert hf.enabled() == {} and not _is_accel(modeling_llama.LlamaRMSNorm.__new__(modeling_llama.LlamaRMSNorm))
    from transformers.monkey_patching import get_patch_mapping

    assert get_patch_mapping() == {}


@needs_hook_module
def test_enable_builds_patched_models_through_transformers_hook_and_disable_undoes_it(working_hook):
    cfg = _configs()["llama"][1]
    try:
        result = hf.enable(families=["llama", "t5"])
        assert result["registered"] == {"LlamaRMSNorm": "accel::rms_norm_hf", "LlamaMLP": "accel::swiglu",
                                        "LlamaAttention": "accel::rope", "LlamaDecoderLayer": "accel::add_rms_norm_hf",
                                        "T5LayerNorm": "accel::rms_norm_hf"}
        assert "patch(model)" in result["skipped"]["LlamaForCausalLM"]
        assert hf.enabled()["LlamaAttention"] == "accel::rope"
        torch.manual_seed(0)
        built = transformers.AutoModelForCausalLM.from_config(cfg)
        r = hf.report(built)
        assert set(r.replaced) == {"LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "LlamaDecoderLayer"}
        assert set(r.left) == {"LlamaForCausalLM"}  # the loss: patch(model) only
        assert r.left["LlamaForCausalLM"]["reason"] == "not patched" or not HAS_LCE
        mt5 = transformers.MT5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=V)
        assert not any(_is_accel(m)  # an anchored key: MT5LayerNorm is not T5LayerNorm
                       for m in transformers.MT5ForConditionalGeneration(mt5).modules())
        assert hf.enable(families=["llama"])["registered"]["LlamaMLP"] == "accel::swiglu"  # again: no error
        with pytest.raises(ValueError, match="unknown families"):
            hf.enable(families=["llama4000"])
    finally:
        undone = hf.disable()
    assert sorted(undone) == ["LlamaAttention", "LlamaDecoderLayer", "LlamaMLP", "LlamaRMSNorm", "T5LayerNorm"]
    assert hf.disable() == [] and hf.enabled() == {}
    torch.manual_seed(0)
    plain = transformers.AutoModelForCausalLM.from_config(cfg)
    assert not any(_is_accel(m) for m in plain.modules())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), built.state_dict().values()))
    from transformers.models.llama import modeling_llama

    assert modeling_llama.LlamaPreTrainedModel._can_record_outputs["attentions"] is modeling_llama.LlamaAttention
    assert hf.unpatch(built).model.norm.__class__ is modeling_llama.LlamaRMSNorm


def test_module_docstring_example_runs():
    result = doctest.testmod(hf, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0


@needs_lce
def test_loss_options_reach_the_chunked_loss_and_unpatch_forgets_them(cpu_kernels):
    from accel.nn import LinearCrossEntropyOptions

    ref, model = _build("qwen2")
    hf.patch(model, loss_options=LinearCrossEntropyOptions(batch_chunk_size=7, chunking_method=None))
    assert model.accel_loss_options.batch_chunk_size == 7
    hf.patch(model, loss_options=LinearCrossEntropyOptions(batch_chunk_size=5, chunking_method=None))
    assert model.accel_loss_options.batch_chunk_size == 5  # a second patch's options replace the first's
    inputs = _inputs("qwen2")
    torch.testing.assert_close(_loss_and_grads(model, inputs)[0].loss, _loss_and_grads(ref, inputs)[0].loss,
                               rtol=1e-5, atol=1e-6)
    hf.unpatch(model)
    assert "accel_loss_options" not in vars(model)


@needs_lce
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_loss_is_fp32_and_within_1e_3_of_eager_on_the_first_step(dtype, cpu_kernels):
    """Hugging Face's loss is fp32 (cross_entropy on logits.float()); accel's chunked loss returns its fp32 value,
    not one rounded to bf16 (2e-3 off on the H200: 10.7718 read 10.75)."""
    ref, model = _build("llama")
    ref, model = ref.to(dtype), model.to(dtype)
    hf.patch(model)
    inputs = _inputs("llama")
    want = ref(**inputs).loss
    got = model(**inputs).loss
    assert _routed(cpu_kernels)["accel::linear_cross_entropy"] == 1
    assert want.dtype == got.dtype == torch.float32
    assert abs(got.item() - want.item()) <= 1e-3 * abs(want.item())
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_is_sharded_asks_the_dtensor_class_resolved_once(monkeypatch):
    from accel import _compat

    class FakeDTensor(torch.Tensor):
        pass

    plain = torch.zeros(2)
    monkeypatch.setattr(_compat, "dtensor_class", lambda: FakeDTensor)
    assert hf_guards.is_sharded(plain.as_subclass(FakeDTensor)) and not hf_guards.is_sharded(plain)
    monkeypatch.setattr(_compat, "dtensor_class", lambda: None)  # torch without DTensor
    assert not hf_guards.is_sharded(plain.as_subclass(FakeDTensor))


def test_chunk_rows_are_bounded_below_for_matmul_efficiency_and_above_in_memory():
    from accel.nn.linear_cross_entropy import MAX_CHUNK_BYTES, MIN_ROWS, model_chunk_rows

    cuda = torch.device("cuda")
    # Qwen3-style: the aspect-ratio rule alone gives 64 rows (128 chunks, the 311 MB weight re-read each time)
    assert model_chunk_rows(8192, 1024, 151936, torch.bfloat16, cuda) == MIN_ROWS
    # Llama d 2048: the chunk's logits as large as the head's weight (2048 x 32000), not the floor
    assert model_chunk_rows(8192, 2048, 32000, torch.bfloat16, cuda) == 2 * MIN_ROWS
    assert model_chunk_rows(8192, 1536, 50257, torch.bfloat16, cuda) == MIN_ROWS  # GPT-2 d 1536: 1024 <= 1536
    assert model_chunk_rows(8192, 8192, 32000, torch.bfloat16, cuda) == 2048  # the aspect rule: 8192 / 4 > MIN_ROWS
    # the weight term stops at twice the floor (a d 8192 head would allow 8192 rows)
    assert model_chunk_rows(8192, 8192, 100000, torch.bfloat16, cuda) == 2 * MIN_ROWS  # aspect 1024, memory 4096
    assert model_chunk_rows(300, 64, 320, torch.float32) == 300  # fewer tokens than the floor: one chunk
    assert model_chunk_rows(0, 64, 320, torch.float32) == 1
    rows = model_chunk_rows(65536, 1024, 2**20, torch.float32, torch.device("cpu"))  # a huge vocabulary
    assert rows * 2**20 * 4 <= MAX_CHUNK_BYTES and rows == 256
    with pytest.raises(ValueError, match="num_classes=0"):
        model_chunk_rows(8, 4, 0, torch.float32)


@needs_lce
def test_default_loss_chunks_come_from_model_chunk_rows(cpu_kernels, monkeypatch):
    from accel.kernels.ops.linear_cross_entropy import reference as lce_ref

    seen = []
    real = lce_ref.forward

    def spy(*args):
        seen.append(args[8])  # batch_chunk_size
        return real(*args)

    import accel.kernels as ak

    ak.unregister(cpu_kernels.pop("accel::linear_cross_entropy"))
    cpu_kernels["accel::linear_cross_entropy"] = ak.register("accel::linear_cross_entropy", impl=spy, backends=["cpu"],
                                                             dsl="triton", name="test_lce_spy.cpu")
    _, model = _build("qwen3")
    hf.patch(model)
    model(**_inputs("qwen3"))
    assert seen == [24]  # 2 x 12 tokens: fewer than MIN_ROWS, one chunk


def _op_counts(model, inputs) -> dict:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket._qualified_op_name
            self.calls[name] = self.calls.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    model.train()
    model(**inputs).loss.backward()  # warm-up
    model.zero_grad(set_to_none=True)
    mode = Count()
    with mode:
        model(**inputs).loss.backward()
    return mode.calls


#: The ATen ops a patched step with accel's loss may call more often than eager: without the KV cache (not built
#: for a training call, patch's ``loss``) Hugging Face's mask path checks position_ids for packed sequences
#: (masking_utils.find_packed_sequence_indices: diff, compare, cumsum, one host read), and the loss's backward
#: reads the loss's gradient on the host (op.py _host_scale: a scale of 1 then multiplies nothing).
_ALLOWED_MORE = {"aten::sub": 2, "aten::ne": 1, "aten::cumsum": 1, "aten::select": 1, "aten::eq": 1, "aten::all": 1,
                 "aten::_local_scalar_dense": 2}
#: GPT-2's keys and values are strided views of c_attn's output: without the cache's cat, CPU attention copies
#: them (2 per layer), in place of the cache's 2 cats per layer (checked: fewer cats).
#: The SwiGLU MLP and the attention's q/k/v projections as one node each (Llama-style families): a stand-in of
#: the gate for the kernel's decision (new_empty, never written), and the projections' input gradients summed
#: inside the GEMMs (addmm_: one per MLP, two per attention, 2 layers; autograd's engine adds out of place: fewer
#: aten::add).
_ALLOWED_MORE_MLP = {"aten::new_empty": 2, "aten::addmm_": 6}
#: Llama's attention as one node (:func:`accel.integrations._attention.self_attention`): stand-ins of q and k for
#: the RoPE kernel's decision (new_empty and transpose, never written), and SDPA's output laid out again for the
#: output projection's weight gradient in backward (one transpose per layer; its copy is not kept from forward).
_ALLOWED_MORE_ATTENTION = {"aten::new_empty": 4, "aten::transpose": 6}
_ALLOWED_MORE_GPT2 = {"aten::clone": 4, "aten::_unsafe_view": 4, "aten::expand": 1}


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2"])
def test_a_patched_step_runs_no_aten_op_more_often_than_eager(family, request):
    """Per ATen op, a patched training step (forward + backward) calls it at most as often as the unpatched one:
    no extra casts, copies, zero-filled gradients or host reads; with accel's ops taking the calls, far fewer."""
    ref, model = _build(family)
    inputs = _inputs(family)
    eager = _op_counts(ref, inputs)
    hf.patch(model)
    declined = _op_counts(model, inputs)
    assert all(n <= eager.get(op, 0) for op, n in declined.items()), declined
    names = request.getfixturevalue("cpu_kernels")
    taken = _op_counts(model, inputs)
    more = {op: n - eager.get(op, 0) for op, n in taken.items()
            if not op.startswith("accel::") and n > eager.get(op, 0)}
    allowed = _ALLOWED_MORE | (_ALLOWED_MORE_GPT2 if family == "gpt2" else _ALLOWED_MORE_MLP)
    if family == "llama":
        allowed = {op: allowed.get(op, 0) + _ALLOWED_MORE_ATTENTION.get(op, 0)
                   for op in allowed.keys() | _ALLOWED_MORE_ATTENTION.keys()}
    assert all(n <= allowed.get(op, 0) for op, n in more.items()), {op: n for op, n in more.items() if n > allowed.get(op, 0)}
    if family == "gpt2" and TF5:  # no KV cache built in a training call (4.x keeps it: see causal_lm)
        assert taken.get("aten::cat", 0) < eager["aten::cat"]
    assert sum(taken.values()) < sum(eager.values())
    assert all(n > 0 for op, n in _routed(names).items() if op == "accel::linear_cross_entropy")


def _graph_ops(explained) -> set:
    """The accel ops the captured graphs call, also inside their subgraphs (an autograd.Function such as
    ``swiglu_linear`` is traced as a higher-order op whose forward is a submodule of the graph)."""
    return {str(n.target) for g in explained.graphs for m in g.modules() if hasattr(m, "graph")
            for n in m.graph.nodes if n.op == "call_function" and str(n.target).startswith("accel.")}


@needs_lce
def test_a_compiled_patched_model_keeps_accel_ops_in_one_graph_and_trains_like_eager(cpu_kernels):
    """Under torch.compile the four accel ops are nodes of one graph (fake kernels; no graph break from the
    integration's kernel-or-own-code decision), and accel.compile(fullgraph=True) trains as eager does."""
    import accel

    ref, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda **kw: model(**kw).loss)(**inputs)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    assert {"accel.linear_cross_entropy.default", "accel.rms_norm_hf.default", "accel.rope.default",
            "accel.swiglu.default"} <= _graph_ops(explained)
    compiled = accel.compile(model, fullgraph=True, backend="aot_eager")
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    out, grads = _loss_and_grads(compiled, inputs)
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    grads = {n.removeprefix("_orig_mod."): g for n, g in grads.items()}
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


def test_a_compiled_patched_model_without_kernels_is_the_models_own_graph():
    """No accel kernel: the compiled patched model traces the model's own code (Inductor fuses it), no accel op."""
    ref, model = _build("qwen3")
    hf.patch(model)
    inputs = _inputs("qwen3")
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda **kw: model(**kw).loss)(**inputs)
    assert explained.graph_break_count == 0 and _graph_ops(explained) == set()
    torch._dynamo.reset()


@needs_lce
def test_loss_options_of_another_kind_are_a_typed_error_and_torchs_options_are_read(cpu_kernels):
    _, model = _build("llama")
    classes = {name: type(m) for name, m in model.named_modules()}
    with pytest.raises(TypeError, match="cannot be read as LinearCrossEntropyOptions"):
        hf.patch(model, loss_options=object())  # refused at patch time, not at the first training step
    assert {name: type(m) for name, m in model.named_modules()} == classes  # nothing was changed
    torch_options = getattr(torch.nn, "LinearCrossEntropyOptions", None)
    if torch_options is not None:  # torch 2.13+: accel.nn hands out torch's class; the patch reads it field by field
        ref, model = _build("llama")
        hf.patch(model, loss_options=torch_options(batch_chunk_size=5, chunking_method=None))
        inputs = _inputs("llama")
        loss = model(**inputs).loss
        assert loss.dtype == torch.float32 and _routed(cpu_kernels)["accel::linear_cross_entropy"] == 1
        torch.testing.assert_close(loss, ref(**inputs).loss, rtol=1e-5, atol=1e-6)


def test_mlp_recompute_keeps_the_bits_and_saves_one_product_per_layer(cpu_kernels):
    """``patch(mlp_recompute=True)`` (the default): the MLP saves gate and up, not their SwiGLU product: the
    same loss and gradients bit for bit as ``mlp_recompute=False``, and autograd keeps one ``[tokens,
    intermediate]`` fp32 tensor less per layer. Measured under saved-tensor hooks, where the MLP runs as
    modules with the down projection's ``swiglu_linear`` (the one-node MLP's savings: tests/kernels/
    test_swiglu_mlp.py and the norm-recompute test). A second patch call switches it; unpatch clears it."""
    inputs = _inputs("llama")
    runs = {}
    for recompute in (False, True):
        _, model = _build("llama")
        hf.patch(model, mlp_recompute=recompute)
        saved = []

        def pack(t, saved=saved):
            saved.append(t.untyped_storage())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out, grads = _loss_and_grads(model, inputs)
        storages = {s.data_ptr(): s.nbytes() for s in saved}
        runs[recompute] = (out.loss, grads, sum(storages.values()), model)
    assert torch.equal(runs[True][0], runs[False][0])
    assert all(torch.equal(runs[True][1][n], runs[False][1][n]) for n in runs[False][1])
    layers, tokens, inter = _DECODER["num_hidden_layers"], 2 * 12, _DECODER["intermediate_size"]
    assert runs[False][2] - runs[True][2] == layers * tokens * inter * 4
    model = runs[True][3]
    mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
    hf.patch(model, mlp_recompute=False)
    assert all(m.accel_mlp_recompute is False for m in mlps)
    hf.patch(model)  # not given: kept
    assert all(m.accel_mlp_recompute is False for m in mlps)
    hf.patch(model, mlp_recompute=True)
    assert not any("accel_mlp_recompute" in vars(m) for m in mlps)
    hf.patch(model, mlp_recompute=False)
    hf.unpatch(model)
    assert not any("accel_mlp_recompute" in vars(m) for m in mlps)


def test_norm_recompute_keeps_no_rmsnorm_output_for_backward_and_the_same_bits(cpu_kernels):
    """``norm_recompute`` (default on): no module keeps an RMSNorm's output between forward and backward (the
    attention's projections and the MLP recompute it from the norm's input), with the loss and gradients bit
    for bit those of ``norm_recompute=False``, where the outputs are kept."""
    import gc
    import weakref

    inputs = _inputs("llama")
    runs = {}
    for recompute in (False, True):
        _, model = _build("llama")
        hf.patch(model, norm_recompute=recompute)
        outputs = []
        hooks = [m.register_forward_hook(lambda m, a, y: outputs.append(weakref.ref(y)))
                 for n, m in model.named_modules() if n.endswith(("input_layernorm", "post_attention_layernorm"))]
        model.zero_grad(set_to_none=True)
        out = model(**inputs)
        gc.collect()
        alive = sum(r() is not None for r in outputs)
        out.loss.backward()
        for h in hooks:
            h.remove()
        runs[recompute] = (alive, len(outputs), out.loss.detach(),
                           {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert runs[False][0] == runs[False][1] == 2 * _DECODER["num_hidden_layers"]  # kept by their consumers
    assert runs[True][0] == 0
    assert torch.equal(runs[True][2], runs[False][2])
    assert all(torch.equal(runs[True][3][n], g) for n, g in runs[False][3].items())


def test_a_norm_input_changed_in_place_before_backward_is_an_error(cpu_kernels):
    _, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    grab = []
    layer = model.model.layers[0]
    hook = layer.input_layernorm.register_forward_pre_hook(lambda m, a: grab.append(a[0]))
    loss = model(**inputs).loss
    hook.remove()
    with torch.no_grad():
        grab[0].add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def _grads_with(family, inputs, patch=None, prepare=None):
    _, model = _build(family)
    if patch is not None:
        hf.patch(model, **patch)
    if prepare is not None:
        prepare(model)
    model.train()  # the tiny configs have no dropout: modes compute the same
    out, grads = _loss_and_grads(model, inputs)
    return out.loss.detach(), grads


def _same(a, b):
    assert torch.equal(a[0], b[0])
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][n], b[1][n]) for n in a[1])


def test_a_norm_output_changed_in_place_before_its_consumer_is_kept_not_recomputed(cpu_kernels):
    """A forward hook scaling the norms' outputs in place (activation steering): the consumers keep the changed
    output, so the gradients are those of norm_recompute=False (which keeps every output), not of the norm."""
    def steer(model):
        for n, m in model.named_modules():
            if n.endswith(("input_layernorm", "post_attention_layernorm")):
                m.register_forward_hook(lambda m, a, y: y.mul_(2.0))

    inputs = _inputs("llama")
    _same(_grads_with("llama", inputs, {}, steer), _grads_with("llama", inputs, {"norm_recompute": False}, steer))


@pytest.mark.parametrize("where", ["norm input after the norm", "output inside the attention"])
def test_a_change_between_the_norm_and_the_projections_is_kept_not_recomputed(where, cpu_kernels):
    """In-place changes the recipe must not paper over: the first norm's input changed after the norm ran (its
    weight and the embeddings frozen, so the norm's own backward cannot see it), or its output changed just
    before q_proj saves it. Either way the gradients are those of norm_recompute=False."""
    def change(model):
        layer = model.model.layers[0]
        if where == "norm input after the norm":
            model.model.embed_tokens.weight.requires_grad_(False)
            layer.input_layernorm.weight.requires_grad_(False)
            layer.input_layernorm.register_forward_hook(lambda m, a, y: a[0].add_(1.0))
        else:
            layer.self_attn.q_proj.register_forward_pre_hook(lambda m, a: a[0].mul_(2.0))

    inputs = _inputs("llama")
    _same(_grads_with("llama", inputs, {}, change), _grads_with("llama", inputs, {"norm_recompute": False}, change))


def test_disabled_saved_tensor_hooks_run_as_the_unpatched_model_does(cpu_kernels):
    _, model = _build("llama")
    hf.patch(model)
    model.train()
    with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        model(**_inputs("llama")).loss.backward()


def test_non_reentrant_checkpointing_gets_no_recompute_and_trains_like_the_unpatched_model(cpu_kernels):
    """Under HF's gradient checkpointing (non-reentrant: saved-tensor hooks) nothing is recomputed by accel and
    the MLP runs as modules: the checkpoint's recomputation saves what the forward saved, even with a forward
    hook that exists only during the first forward, and the gradients are the unpatched model's."""
    inputs = _inputs("llama")

    def ckpt(model):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        proj = model.model.layers[0].mlp.gate_proj
        handle = []
        handle.append(proj.register_forward_hook(lambda m, a, y: handle[0].remove()))  # the first forward only

    ref = _grads_with("llama", inputs, None, ckpt)
    got = _grads_with("llama", inputs, {}, ckpt)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-6)
    for n in ref[1]:
        torch.testing.assert_close(got[1][n], ref[1][n], rtol=1e-4, atol=1e-6, msg=n)


@needs_lce
def test_packed_position_ids_without_a_mask_keep_the_cache_and_the_models_loss(cpu_kernels):
    """position_ids given without an attention_mask: Hugging Face builds the mask differently without a cache
    (packed sequences), so the patched model keeps the cache and gives the unpatched model's loss."""
    ref, model = _build("llama")
    hf.patch(model)
    ref.train(), model.train()
    inputs = _inputs("llama")
    packed = torch.cat([torch.arange(6), torch.arange(6)]).expand(2, -1)
    out = model(**inputs, position_ids=packed)
    assert out.past_key_values is not None
    torch.testing.assert_close(out.loss, ref(**inputs, position_ids=packed).loss, rtol=1e-5, atol=1e-6)


def test_the_recipe_does_not_travel_with_the_norm_output(cpu_kernels):
    """How to recompute a norm's output is kept beside it, weakly: the returned hidden states carry no attribute
    and pickle as the unpatched model's do, and nothing is left once the step's tensors are gone."""
    import gc
    import io

    ref, model = _build("llama")
    hf.patch(model)
    model.train()
    inputs = _inputs("llama")
    out = model(**inputs, output_hidden_states=True)
    last = out.hidden_states[-1]
    assert not hasattr(last, "accel_recompute")
    sizes = []
    for t in (last, ref(**inputs, output_hidden_states=True).hidden_states[-1]):
        buf = io.BytesIO()
        torch.save(t.detach(), buf)
        sizes.append(len(buf.getvalue()))
    assert sizes[0] == sizes[1]
    out.loss.backward()
    del out, last
    gc.collect()
    assert len(RECIPES) == 0


def _saved_bytes_and_grads(model, inputs):
    (out, grads), kept = saved_storages(_loss_and_grads, model, inputs)
    return sum(kept.values()), out, grads


def test_mlp_recompute_steps_aside_for_hooks_and_autocast(cpu_kernels):
    """A down projection with a forward hook runs as a module (the hook fires, the product is saved: the
    same saved bytes as mlp_recompute=False); under autocast with fp32 weights the patched model trains and
    matches mlp_recompute=False bit for bit (the recomputing backward would see uncast weights)."""
    inputs = _inputs("llama")
    _, plain = _build("llama")
    hf.patch(plain, mlp_recompute=False)
    plain_bytes, _, _ = _saved_bytes_and_grads(plain, inputs)
    _, hooked = _build("llama")
    hf.patch(hooked)
    calls = []
    for name, m in hooked.named_modules():
        if name.endswith("mlp.down_proj"):
            m.register_forward_hook(lambda mod, args, out: calls.append(1))
    hooked_bytes, _, _ = _saved_bytes_and_grads(hooked, inputs)
    assert len(calls) == _DECODER["num_hidden_layers"] and hooked_bytes == plain_bytes
    runs = []
    for recompute in (False, True):
        _, model = _build("llama")
        hf.patch(model, mlp_recompute=recompute)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs.append(_loss_and_grads(model, inputs))
    assert torch.equal(runs[0][0].loss, runs[1][0].loss)
    assert all(torch.equal(runs[0][1][n], runs[1][1][n]) for n in runs[0][1])


def test_plain_linear_sees_every_kind_of_hook_and_a_foreign_weight():
    """The MLP's fast path is taken only for projections that ``F.linear`` stands in for exactly."""
    x = torch.randn(2, 8)
    projs = [nn.Linear(8, 8) for _ in range(3)]
    assert hf_guards.plain_linear(x, *projs)
    assert not hf_guards.plain_linear(x.to(torch.bfloat16), *projs)  # weight in another dtype
    changed = [
        lambda p: setattr(p, "_hf_hook", object()),               # accelerate's offload hook
        lambda p: setattr(p, "forward", lambda t: t),              # a replaced forward
        lambda p: p.register_forward_hook(lambda *a: None),
        lambda p: p.register_forward_pre_hook(lambda *a: None),
        lambda p: p.register_full_backward_hook(lambda *a: None),
        lambda p: p.register_full_backward_pre_hook(lambda *a: None),
        lambda p: setattr(p, "weight", nn.Parameter(p.weight.detach().as_subclass(_FakeQuant))),
        lambda p: setattr(p, "bias", nn.Parameter(p.bias.detach().as_subclass(_FakeQuant))),
    ]
    for change in changed:
        fresh = [nn.Linear(8, 8) for _ in range(3)]
        change(fresh[2])
        assert not hf_guards.plain_linear(x, *fresh)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert not hf_guards.plain_linear(x, *projs)
    finally:
        handle.remove()
    assert hf_guards.plain_linear(x, *projs)

    class Subclass(nn.Linear):
        pass

    assert not hf_guards.plain_linear(x, projs[0], Subclass(8, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not hf_guards.plain_linear(x, *projs)


class _FakeQuant(torch.Tensor):
    """A weight whose ``F.linear`` rounds it to multiples of 1/64 first, with a straight-through gradient (fake
    quantisation, as quantisation-aware training does): ``F.linear`` on it is not ``F.linear`` on its values."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            x, w, *rest = args
            w = w.as_subclass(torch.Tensor)
            return func(x, w + (torch.round(w * 64) / 64 - w).detach(), *rest, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def test_a_model_with_tensor_subclass_weights_trains_as_its_own_code_does(cpu_kernels, monkeypatch):
    """Fake-quantised attention and MLP weights (a ``torch.Tensor`` subclass overriding ``F.linear``): the
    fused nodes, whose backward GEMMs read the raw values, step aside, and the loss and gradients are the
    unpatched model's."""
    calls = _one_node_calls(monkeypatch)
    ref, model = _build("llama")
    hf.patch(model)
    for m in (ref, model):
        for layer in m.model.layers:
            for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                        layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                lin.weight = nn.Parameter(lin.weight.detach().as_subclass(_FakeQuant))
    inputs = _inputs("llama")
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    out, grads = _loss_and_grads(model, inputs)
    assert calls == []
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_torch_func_grad_of_a_patched_model_is_the_unpatched_models(cpu_kernels):
    """Under ``torch.func.grad`` (where accel's autograd nodes cannot run) every replacement runs the model's own
    code: the gradients are the unpatched model's."""
    from torch.func import functional_call, grad

    ref, model = _build("llama")
    hf.patch(model)
    ids = _inputs("llama")["input_ids"]
    results = []
    for m in (ref, model):
        params = {k: v.detach() for k, v in m.named_parameters()}
        results.append(grad(lambda p, m=m: functional_call(m, p, (ids,), {"labels": ids, "use_cache": False})
                            .loss)(params))
    assert results[0].keys() == results[1].keys()
    for name in results[0]:
        torch.testing.assert_close(results[1][name], results[0][name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_the_attentions_projections_run_as_one_node_and_step_aside_for_a_hooked_projection(family, cpu_kernels,
                                                                                         monkeypatch):
    """With accel's RoPE at the device's key, each attention's q/k/v projections are one shared-input node (their
    input gradient summed inside the GEMMs, no add kernels); a projection with a hook makes that layer run its
    modules (the hook fires), and either way the loss and gradients match the unpatched model's (Qwen2: biases;
    Qwen3: q/k norms on the projections' outputs)."""
    calls = []
    real = hf_attention.shared_input_linears

    def counting(*args, **kwargs):
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_attention, "shared_input_linears", counting)
    ref, model = _build(family)
    hf.patch(model)
    fired = []
    model.model.layers[1].self_attn.k_proj.register_forward_hook(lambda m, a, y: fired.append(1))
    inputs = _inputs(family)
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    out, grads = _loss_and_grads(model, inputs)
    assert calls == [3] and fired == [1]  # layer 0 fused (three projections), layer 1 as modules
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():  # no gradient to sum: the modules run
        model(**inputs)
    assert calls == [3]


# ------------------------------------------------------------------ Llama's attention as one autograd node
def _one_node_calls(monkeypatch) -> list:
    """Record each call of the one-node attention (:func:`accel.integrations._attention.self_attention`)."""
    calls = []
    real = hf_attention.self_attention

    def counting(*args, **kwargs):
        calls.append(kwargs["enable_gqa"])
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_attention, "self_attention", counting)
    return calls


def _train_step(model, inputs, *, one_node: bool = True, monkeypatch=None):
    if not one_node:
        monkeypatch.setattr(hf_attention, "_one_node_attention", lambda *args: None)
    model.train()  # a training call: no KV cache (patch's loss), the attention's fast path applies
    try:
        return _loss_and_grads(model, inputs)
    finally:
        if not one_node:
            monkeypatch.undo()


@needs_tf5
@pytest.mark.parametrize("kv_heads", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llamas_attention_runs_as_one_node_with_the_bits_of_the_attention_it_replaces(kv_heads, dtype,
                                                                                      cpu_kernels, monkeypatch):
    """A training step runs each Llama attention as one node (grouped heads through SDPA's ``enable_gqa``, and
    without groups); its loss and every gradient are bit for bit those of the same patched model with the
    attention's own code (q/k/v as one node, accel's RoPE, SDPA, o_proj), and close to the unpatched model's."""
    cfg = transformers.LlamaConfig(**{**_DECODER, "num_key_value_heads": kv_heads})
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg).to(dtype)
    model = copy.deepcopy(ref)
    hf.patch(model)
    inputs = _inputs("llama")
    calls = _one_node_calls(monkeypatch)
    out, grads = _train_step(model, inputs)
    assert calls == [kv_heads != 4] * cfg.num_hidden_layers
    base_out, base_grads = _train_step(model, inputs, one_node=False, monkeypatch=monkeypatch)
    assert len(calls) == cfg.num_hidden_layers  # the second step ran the attention's own code
    assert torch.equal(out.loss, base_out.loss) and grads.keys() == base_grads.keys()
    assert all(torch.equal(grads[n], base_grads[n]) for n in grads), [n for n in grads
                                                                       if not torch.equal(grads[n], base_grads[n])]
    ref.train()
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    tol = {"rtol": 1e-4, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(out.loss, ref_out.loss, **tol)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **tol, msg=name)


@needs_tf5
def test_the_one_node_attentions_kept_rope_decision_follows_the_registry(cpu_kernels, monkeypatch):
    """With a cacheable cond on accel's RoPE, the attention decides on its stand-ins once per shape and reuses the
    yes (no ``accepts`` call on later steps); disabling the RoPE override, or a change of the tuning tables,
    takes effect at the next step (the kept yes is not reused), and the declined calls are counted."""
    import accel.kernels as ak
    from accel.kernels.ops.rope import reference as rp
    from accel.kernels.tuning import table

    ak.unregister(cpu_kernels.pop("accel::rope"))
    verdict = {"take": True}

    def cond(*args):
        return verdict["take"]

    cond.cacheable = True
    cpu_kernels["accel::rope"] = ak.register("accel::rope", impl=rp.rope, backends=["cpu"], dsl="triton",
                                             cond=cond, name="test_rope_cacheable.cpu")
    _, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    layers = _DECODER["num_hidden_layers"]
    asked = []
    accepts = rp.accepts
    monkeypatch.setattr(rp, "accepts", lambda *a: asked.append(1) or accepts(*a))
    calls = _one_node_calls(monkeypatch)
    _train_step(model, inputs)
    first = len(asked)
    assert calls == [True] * layers and first >= 1
    _train_step(model, inputs)
    assert len(calls) == 2 * layers and len(asked) == first  # the kept yes: no stand-ins, no accepts
    ak.disable(name="test_rope_cacheable.cpu")
    _train_step(model, inputs)
    assert len(calls) == 2 * layers  # the attention's own code ran
    ak.enable(name="test_rope_cacheable.cpu")
    _train_step(model, inputs)
    assert len(calls) == 3 * layers
    verdict["take"] = False
    table.forget_floors()  # what a table change does: the memo of every cond and the kept decisions go
    declined = {o.name: o.declined for o in ak.overrides()}["test_rope_cacheable.cpu"]
    _train_step(model, inputs)
    assert len(calls) == 3 * layers
    assert {o.name: o.declined for o in ak.overrides()}["test_rope_cacheable.cpu"] > declined


@pytest.mark.parametrize("case", ["mask", "cache", "dropout", "eager_attention", "hooked_o_proj", "no_grad"])
def test_the_one_node_attention_steps_aside_where_the_attentions_code_computes_something_else(case, cpu_kernels,
                                                                                              monkeypatch):
    """A padding mask, a KV cache, attention dropout in training, another attention implementation, a hook on
    the output projection, or no grad: the attention runs its own code (the hook fires), and the step matches
    the unpatched model's."""
    extra = {"attention_dropout": 0.5} if case == "dropout" else {}
    cfg = transformers.LlamaConfig(**{**_DECODER, **extra})
    if case == "eager_attention":
        cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg)
    model = copy.deepcopy(ref)
    hf.patch(model)
    inputs = dict(_inputs("llama"))
    if case == "mask":
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        inputs["attention_mask"][1, :2] = 0
    if case == "cache":
        inputs["use_cache"] = True
    fired = []
    if case == "hooked_o_proj":
        for layer in model.model.layers:
            layer.self_attn.o_proj.register_forward_hook(lambda m, a, y: fired.append(1))
    calls = _one_node_calls(monkeypatch)
    if case == "no_grad":
        with torch.no_grad():
            model.train()
            out = model(**inputs)
        assert calls == []
        return
    torch.manual_seed(1)
    out, grads = _train_step(model, inputs)
    assert calls == []
    assert fired == ([1] * cfg.num_hidden_layers if case == "hooked_o_proj" else [])
    ref.train()
    torch.manual_seed(1)  # the same dropout draws
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


@needs_tf5
def test_the_one_node_attention_backward_twice_needs_retain_graph_and_refuses_double_backward(cpu_kernels,
                                                                                             monkeypatch):
    _, model = _build("llama")
    hf.patch(model)
    model.train()
    ids = _inputs("llama")["input_ids"]
    calls = _one_node_calls(monkeypatch)

    def loss_of():
        return model.model(input_ids=ids, use_cache=False).last_hidden_state.float().pow(2).mean()

    loss = loss_of()
    assert len(calls) == _DECODER["num_hidden_layers"]
    first = torch.autograd.grad(loss, list(model.model.parameters()), retain_graph=True)
    second = torch.autograd.grad(loss, list(model.model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # the retained graph gives the same gradients
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        torch.autograd.grad(loss, list(model.model.parameters()), allow_unused=True)
    loss = loss_of()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(loss, list(model.model.parameters()), create_graph=True)


def test_the_one_node_attention_is_verified_by_behaviour():
    """Llama's, Gemma's and Mistral's attention run as one node (verified on a tiny instance, where it ran and
    matched); Qwen3's (q/k norms: modules the one-node path does not compute) keeps the rest of accel's
    attention without it."""
    for family, one_node in (("llama", True), ("gemma", True), ("mistral", True), ("qwen3", False)):
        _, model = _build(family)
        hf.patch(model)
        attn = model.model.layers[0].self_attn
        assert _is_accel(attn) and attn.__dict__.get("accel_one_node", False) is (one_node and TF5), family


@pytest.fixture
def fresh_verdicts():
    from accel.integrations.transformers import verify

    verify.forget()
    yield verify
    verify.forget()


def test_a_class_whose_code_computes_something_else_keeps_it_and_says_so_once(fresh_verdicts, monkeypatch):
    """The MLP's forward edited (the activation on the up projection, not the gate): the replacement, run on a
    tiny instance, differs from the class's own outputs, so the class is left with that reason, said once as an
    IntegrationWarning naming the class, the role and the transformers version; the other roles stay."""
    from accel.errors import IntegrationWarning
    from transformers.models.llama import modeling_llama

    def edited(self, x):
        return self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))

    monkeypatch.setattr(modeling_llama.LlamaMLP, "forward", edited)
    fresh_verdicts._SAID.clear()
    _, model = _build("llama")
    with pytest.warns(IntegrationWarning, match=rf"LlamaMLP keeps its own code \(mlp role.*transformers "
                                                 rf"{transformers.__version__}") as seen:
        hf.patch(model)
        hf.patch(_build("llama")[1])  # said once
    assert sum("LlamaMLP" in str(w.message) for w in seen) == 1
    r = hf.report(model)
    assert "differs from the class's own on a tiny instance" in r.left["LlamaMLP"]["reason"]
    assert {"LlamaRMSNorm", "LlamaAttention", "LlamaDecoderLayer"} <= set(r.replaced)


def test_verification_leaves_the_random_state_and_the_model_untouched(fresh_verdicts):
    _, model = _build("llama")
    state = torch.random.get_rng_state()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    hf.patch(model)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())


def test_roles_are_verified_with_the_models_own_config_kinds(fresh_verdicts):
    """A Llama with attention and MLP biases is verified on a tiny Llama with biases (its own kinds), and gets
    every role; the verdict is kept per config kind."""
    cls, cfg = _configs()["llama"]
    biased = cls(type(cfg)(**{**_DECODER, "attention_bias": True, "mlp_bias": True})).eval()
    hf.patch(biased)
    assert {"LlamaAttention", "LlamaMLP", "LlamaDecoderLayer", "LlamaForCausalLM"} <= set(hf.report(biased).replaced)
    keys = {k[1] for k in fresh_verdicts._VERDICTS if k[0].__name__ == "LlamaMLP"}
    assert len(keys) == 1 and "attention_bias', True" in next(iter(keys))[1]


def test_a_kernelized_module_is_left_to_its_kernel_and_the_report_says_why():
    """The kernels package's kernelize (and use_kernels=True) sets ``forward`` on the instance, so a class swap
    underneath would do nothing: such a module is not replaced, and one kernelized after patch is no longer
    reported as replaced."""
    _, model = _build("llama")
    norm = model.model.norm
    norm.forward = norm.forward  # what kernelize leaves: an instance attribute
    hf.patch(model)
    r = hf.report(model)
    assert not _is_accel(norm) and r.replaced["LlamaRMSNorm"]["count"] == 4
    assert "forward is set on the instance" in r.left["LlamaRMSNorm"]["reason"]
    mlp = model.model.layers[0].mlp
    mlp.forward = lambda x: x
    assert "replaced, but its forward is set on the instance" in hf.report(model).left["LlamaMLP"]["reason"]


# ------------------------------------------------------------------ residual adds fused into the RMSNorms
def _hidden(model, ids):
    return model.model(input_ids=ids).last_hidden_state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_adds_fuse_into_the_norms_that_read_them_with_the_same_bits(dtype, cpu_kernels):
    """Each layer's two residual adds run inside accel::add_rms_norm_hf: the attention's with the layer's
    post-attention norm, the MLP's with the next layer's input norm (the last: the model's final norm), whose own
    call then takes the handed-off output. Only the first layer's input norm runs alone; the hidden states are
    the unpatched model's bit for bit (the ops' references are Hugging Face's arithmetic), and no handed-off
    output outlives the forward."""
    ref, model = _build("llama")
    ref, model = ref.to(dtype), model.to(dtype)
    hf.patch(model)
    ids = _inputs("llama")["input_ids"]
    before = _routed(cpu_kernels)
    with torch.no_grad():
        got = _hidden(model, ids)
    after = _routed(cpu_kernels)
    layers = _DECODER["num_hidden_layers"]
    assert after["accel::add_rms_norm_hf"] - before["accel::add_rms_norm_hf"] == 2 * layers
    assert after["accel::rms_norm_hf"] - before["accel::rms_norm_hf"] == 1
    with torch.no_grad():
        assert torch.equal(got, _hidden(ref, ids))
    assert len(HANDOFFS) == 0


def _scaled_in_place(module, args, out):
    out.mul_(1.5)


def _scaled_copy(module, args, out):
    return out * 1.5


@pytest.mark.parametrize("hook", [_scaled_in_place, _scaled_copy])
def test_a_layer_output_changed_before_the_next_norm_is_normalised_again(hook, cpu_kernels):
    """A forward hook that changes a layer's output (in place, or by returning another tensor) makes the next
    norm compute its own output from what it is given: the handed-off one is of the old value."""
    ref, model = _build("llama")
    hf.patch(model)
    ids = _inputs("llama")["input_ids"]
    for m in (ref, model):
        m.model.layers[0].register_forward_hook(hook)
    before = _routed(cpu_kernels)["accel::rms_norm_hf"]
    with torch.no_grad():
        got = _hidden(model, ids)
        assert torch.equal(got, _hidden(ref, ids))
    assert _routed(cpu_kernels)["accel::rms_norm_hf"] - before == 2  # layer 0's and layer 1's input norms
    assert len(HANDOFFS) == 0


def test_a_hooked_norm_is_called_as_a_module_and_an_unconsumed_handoff_dies_with_its_tensor(cpu_kernels):
    import gc

    ref, model = _build("llama")
    hf.patch(model)
    ids = _inputs("llama")["input_ids"]
    seen = []
    for m in (ref, model):
        m.model.layers[0].post_attention_layernorm.register_forward_hook(lambda *a: seen.append(1))
    with torch.no_grad():
        assert torch.equal(_hidden(model, ids), _hidden(ref, ids))
    assert len(seen) == 2  # the hook ran in both models: the hooked norm's add was not fused
    last = model.model.layers[-1]
    h = torch.randn(2, 12, _DECODER["hidden_size"])
    pe = model.model.rotary_emb(h, torch.arange(12)[None])
    with torch.no_grad():
        out = last(h, position_embeddings=pe)  # its output's norm is handed off, and never called
    assert len(HANDOFFS) == 1
    del out
    gc.collect()
    assert len(HANDOFFS) == 0


def test_each_layer_is_linked_to_the_norm_after_it_through_copies_and_unpatch_drops_the_links():
    _, model = _build("qwen3")
    keys = list(model.state_dict())
    modules = len(list(model.modules()))
    hf.patch(model)
    layers = model.model.layers
    assert [vars(layer)["accel_next_norm"][0] for layer in layers] == [layers[1].input_layernorm, model.model.norm]
    assert list(model.state_dict()) == keys and len(list(model.modules())) == modules  # the link is no submodule
    twin = copy.deepcopy(model)
    assert vars(twin.model.layers[0])["accel_next_norm"][0] is twin.model.layers[1].input_layernorm
    hf.unpatch(model)
    assert not any("accel_next_norm" in vars(m) for m in model.modules())


def test_fused_adds_train_with_the_same_bits_whether_norm_outputs_are_recomputed_or_kept(cpu_kernels):
    """The fused norms' outputs (a layer's own and the handed-off ones) are recomputed for backward from the sum
    and weight by accel::rms_norm_hf, which gives the fused op's bits: loss and gradients equal those of
    ``norm_recompute=False``, where the outputs are kept."""
    inputs = _inputs("llama")
    runs = []
    for recompute in (False, True):
        _, model = _build("llama")
        model.to(torch.bfloat16)
        hf.patch(model, norm_recompute=recompute)
        before = _routed(cpu_kernels)["accel::add_rms_norm_hf"]
        runs.append(_loss_and_grads(model, inputs))
        assert _routed(cpu_kernels)["accel::add_rms_norm_hf"] - before == 2 * _DECODER["num_hidden_layers"]
    (out0, g0), (out1, g1) = runs
    assert torch.equal(out0.loss, out1.loss) and g0.keys() == g1.keys()
    assert all(torch.equal(g0[n], g1[n]) for n in g0)


@pytest.mark.parametrize("how", ["reentrant", "every_other_layer"])
def test_checkpointed_layers_never_take_an_output_handed_off_in_another_autograd_context(how, cpu_kernels):
    """A reentrant checkpoint runs its layer's forward under no_grad: the norm output it hands off has no graph,
    so a norm running with grad (the model's final norm) computes its own. A non-reentrant checkpoint of every
    other layer: the checkpointed layer's input norm computes its own output (in its recomputation the handoff
    would be gone). Either way every parameter gets the unpatched model's gradient."""
    ref, model = _build("llama")
    hf.patch(model)
    inputs = _inputs("llama")
    for m in (ref, model):
        m.train()
        if how == "reentrant":
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        else:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            m.model.layers[0].gradient_checkpointing = False  # layer 1 checkpointed, after one that is not
    ref_out, ref_grads = _loss_and_grads(ref, inputs)
    out, grads = _loss_and_grads(model, inputs)
    torch.testing.assert_close(out.loss, ref_out.loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert len(HANDOFFS) == 0


def test_inference_mode_and_sharded_or_subclass_weights_keep_the_models_own_add(cpu_kernels):
    ref, model = _build("llama")
    hf.patch(model)
    ids = _inputs("llama")["input_ids"]
    with torch.inference_mode():  # inference tensors have no version counter: nothing is handed off
        assert torch.equal(_hidden(model, ids), _hidden(ref, ids))
    assert len(HANDOFFS) == 0

    class _Sharded(torch.Tensor):  # stands in for FSDP2's DTensor weight of a layer not running
        pass

    norm = model.model.layers[1].input_layernorm
    h = torch.randn(2, 3, _DECODER["hidden_size"])
    assert hf_layer.fused_add_norm(norm, h, h) is not None
    saved = norm.weight
    norm._parameters["weight"] = nn.Parameter(saved.detach().as_subclass(_Sharded))
    try:
        assert hf_layer.fused_add_norm(norm, h, h) is None
    finally:
        norm._parameters["weight"] = saved
