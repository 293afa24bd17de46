"""Gradient checkpointing (``model.gradient_checkpointing_enable()``, reentrant and not) on every decoder family a
patch replaces roles in: with accel's references registered at the CPU key (every replaced module takes accel's
path), the loss and every parameter's gradient equal the unpatched model's under the same checkpointing.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

import accel.kernels as ak  # noqa: E402
from accel.integrations import transformers as hf  # noqa: E402
from accel.integrations.transformers.handoff import HANDOFFS  # noqa: E402

# transformers 5.25 renames gradient_checkpointing_enable (activation_checkpointing_enable); 4.57-5.17 have only it
pytestmark = [pytest.mark.cpu, pytest.mark.filterwarnings("ignore:`gradient_checkpointing_enable` is deprecated")]
V = 64
_DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": V, "max_position_embeddings": 64}
FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", {}),
    "mistral": ("MistralForCausalLM", "MistralConfig", {}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", {}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", {"head_dim": 8}),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", {"head_dim": 8}),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", {"head_dim": 8}),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", {"head_dim": 8}),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", {"pad_token_id": 0}),
}


def _loss_and_grads(model, ids, labels):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpointed_patched_model_gives_the_unpatched_gradients(family, reentrant, cpu_kernels):
    model_cls, config_cls, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(**_DECODER, **extra)
    torch.manual_seed(0)
    ref = getattr(transformers, model_cls)(config).train()
    model = hf.patch(copy.deepcopy(ref))
    assert hf.report(model).replaced, family
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (2, 12), generator=g)
    labels = ids.clone()
    labels[0, :3] = -100
    for m in (ref, model):
        m.config.use_cache = False
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    torch.manual_seed(2)  # the same dropout draws (none are drawn at these configs' dropout of 0)
    want, want_grads = _loss_and_grads(ref, ids, labels)
    torch.manual_seed(2)
    got, grads = _loss_and_grads(model, ids, labels)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(grads[name], want_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert len(HANDOFFS) == 0
    assert sum(o.routed for o in ak.overrides() if o.name in cpu_kernels.values()) > 0  # accel's ops ran


def test_phi3_layers_with_dropout_draw_what_the_model_draws(cpu_kernels):
    """Phi-3's residual and attention dropouts on (p = 0.1, training): the patched layer calls the dropouts where
    the model does, so one seed gives the unpatched model's loss and gradients, with the fused adds routed."""
    config = transformers.Phi3Config(**_DECODER, pad_token_id=0, resid_pdrop=0.1, attention_dropout=0.1)
    torch.manual_seed(0)
    ref = transformers.Phi3ForCausalLM(config).train()
    model = hf.patch(copy.deepcopy(ref))
    assert hf.report(model).replaced["Phi3DecoderLayer"]["op"] == "accel::add_rms_norm_hf"
    ids = torch.randint(1, V, (2, 12), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(3)
    want, want_grads = _loss_and_grads(ref, ids, ids)
    torch.manual_seed(3)
    got, grads = _loss_and_grads(model, ids, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for name in want_grads:
        torch.testing.assert_close(grads[name], want_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    (add,) = [o for o in ak.overrides() if o.name == cpu_kernels["accel::add_rms_norm_hf"]]
    assert add.routed > 0
