"""Family-specific shapes of the roles: Phi-4-mini's partial rotary embedding (``partial_rotary_factor < 1``), with
accel's references registered at the CPU key (every replaced module takes accel's path)."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

import accel.kernels as ak  # noqa: E402
from accel.integrations import transformers as hf  # noqa: E402
from accel.integrations.transformers.attention import partial_probe, rope_probe  # noqa: E402

pytestmark = pytest.mark.cpu
V = 64


def test_partial_rotary_rotates_the_leading_features_through_the_op(cpu_kernels):
    """Phi-3 with ``partial_rotary_factor=0.75`` (Phi-4-mini's): RoPE on the first 3/4 of each head through
    ``accel::rope``, the rest passed through; loss and every gradient equal the unpatched model's."""
    cfg = transformers.Phi3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=V, pad_token_id=0, partial_rotary_factor=0.75)
    torch.manual_seed(0)
    ref = transformers.Phi3ForCausalLM(cfg).train()
    model = hf.patch(copy.deepcopy(ref))
    assert hf.report(model).replaced["Phi3Attention"]["op"] == "accel::rope"
    ids = torch.randint(1, V, (2, 9), generator=torch.Generator().manual_seed(1))

    def routed():
        return next(o.routed for o in ak.overrides() if o.name == cpu_kernels["accel::rope"])

    before = routed()
    want, got = ref(input_ids=ids, labels=ids), model(input_ids=ids, labels=ids)
    want.loss.backward()
    got.loss.backward()
    assert routed() > before
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_probes_tell_whole_head_and_partial_rope_apart():
    from transformers.models.llama import modeling_llama
    from transformers.models.phi3 import modeling_phi3

    assert rope_probe(modeling_llama.apply_rotary_pos_emb) and rope_probe(modeling_phi3.apply_rotary_pos_emb)
    assert partial_probe(modeling_phi3.apply_rotary_pos_emb)
    assert not partial_probe(modeling_llama.apply_rotary_pos_emb)  # whole heads only: fails on narrow tables
