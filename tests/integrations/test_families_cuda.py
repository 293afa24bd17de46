"""Gemma 2, Gemma 3 and Phi-3 on a real GPU with accel's kernels installed (``-m cuda``; skipped elsewhere with the
probe's reason): the GeGLU kernel against its reference, and each family's patched model against the unpatched
one, every role replaced and its op answered by a kernel (not the reference fallback).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

pytestmark = pytest.mark.cuda

V, D, S = 4096, 1024, 1024  # [2 x 1024 tokens, 1024]: above the loss kernel's 2**20-element floor

#: the ops whose routed count must grow in a step of each family (the norms route through ATen's fused op)
OPS = {"gemma2": ("accel::geglu", "accel::rope", "accel::linear_cross_entropy"),
       "gemma3": ("accel::geglu", "accel::rope", "accel::linear_cross_entropy"),
       "phi3": ("accel::swiglu", "accel::rope", "accel::linear_cross_entropy")}


@pytest.fixture(scope="module")
def installed():
    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy

    ak.install()
    yield ak


def _routed(ak, op: str) -> int:
    return sum(o.routed for o in ak.overrides() if o.op == op)


def test_geglu_kernel_matches_the_reference_forward_and_backward(installed):
    from accel.kernels.ops.geglu import op as gg_op
    from accel.kernels.ops.geglu import reference as gg_ref

    g = torch.Generator("cuda").manual_seed(0)
    a, b, dy = (torch.randn(4096, 6912, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    before = _routed(installed, "accel::geglu"), _routed(installed, "accel::geglu_backward")
    a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
    y = gg_op.geglu(a_, b_)
    y.backward(dy)
    want = gg_ref.geglu(a.float(), b.float())
    want_da, want_db = gg_ref.geglu_backward(dy.float(), a.float(), b.float())
    torch.testing.assert_close(y.float(), want, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(a_.grad.float(), want_da, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(b_.grad.float(), want_db, rtol=1.6e-2, atol=1e-2)
    after = _routed(installed, "accel::geglu"), _routed(installed, "accel::geglu_backward")
    assert after[0] > before[0] and after[1] > before[1], "the Triton kernels answered, not the reference"


def _model(family: str):
    t = transformers
    common = dict(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=V, max_position_embeddings=2 * S)
    if family == "gemma2":
        cls, cfg = t.Gemma2ForCausalLM, t.Gemma2Config(**common, head_dim=128, final_logit_softcapping=30.0)
    elif family == "gemma3":
        cls, cfg = t.Gemma3ForCausalLM, t.Gemma3TextConfig(**common, head_dim=128, sliding_window=256)
    else:  # Phi-4-mini's partial rotary embedding: RoPE on the first 3/4 of each 128-wide head
        cls, cfg = t.Phi3ForCausalLM, t.Phi3Config(**common, pad_token_id=0, partial_rotary_factor=0.75)
    torch.manual_seed(0)
    return cls(cfg).to("cuda", torch.bfloat16).train()


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach().float(), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "phi3"])
def test_a_patched_family_matches_the_unpatched_model_on_the_gpu(family, installed):
    """Loss within 2e-2 relative and every gradient's direction (cosine >= 0.99) and norm (within 5 %) equal to the
    unpatched bf16 model's: both run bf16 matmuls, accel's kernels keep fp32 inside, so they differ by rounding."""
    from accel.integrations import transformers as hf

    ref, model = _model(family), hf.patch(_model(family))
    report = hf.report(model)
    assert not report.left and len(report.replaced) == 5, report.left
    ids = torch.randint(1, V, (2, S), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    before = {op: _routed(installed, op) for op in OPS[family]}
    got, grads = _loss_and_grads(model, ids)
    routed = {op: _routed(installed, op) - n for op, n in before.items()}
    assert all(routed.values()), f"ops that never reached a kernel: {routed}"
    want, want_grads = _loss_and_grads(ref, ids)
    assert abs(float(got) - float(want)) <= 2e-2 * abs(float(want)), (float(got), float(want))
    assert grads.keys() == want_grads.keys()
    for name, w in want_grads.items():
        g = grads[name]
        cos = torch.nn.functional.cosine_similarity(g.flatten(), w.flatten(), dim=0)
        assert cos >= 0.99, f"{name}: cosine {float(cos):.4f}"
        assert abs(float(g.norm()) / float(w.norm()) - 1) <= 0.05, name


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_a_patched_moe_model_takes_accels_experts_and_matches_on_the_gpu(family, installed, monkeypatch):
    """Qwen3-MoE (top-8 of 16) and Mixtral (top-2 of 8) in bf16: the experts run accel.nn.moe.experts (torch's
    grouped GEMM takes bf16 on sm80+), loss and gradients as in the family test above."""
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4.x has no experts class")
    from accel.integrations import transformers as hf
    from accel.integrations.transformers import experts as hf_experts

    t = transformers
    common = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, vocab_size=V,
                  max_position_embeddings=2 * S, num_experts_per_tok=8 if family == "qwen3_moe" else 2)
    if family == "qwen3_moe":
        cls, cfg = t.Qwen3MoeForCausalLM, t.Qwen3MoeConfig(**common, head_dim=128, num_experts=16,
                                                           moe_intermediate_size=512)
    else:
        cls, cfg = t.MixtralForCausalLM, t.MixtralConfig(**common, intermediate_size=2 * D, num_local_experts=8)
    torch.manual_seed(0)
    ref = cls(cfg).to("cuda", torch.bfloat16).train()
    with torch.no_grad():  # expert weights as a checkpoint would hold them, whatever the release's init does
        for p in ref.parameters():
            if p.dim() == 3:
                p.normal_(0.0, 0.02)
    model = cls(cfg).to("cuda", torch.bfloat16).train()
    model.load_state_dict(ref.state_dict())
    hf.patch(model)
    report = hf.report(model)
    assert not report.left and any(v["op"] == "accel.nn.moe.experts" for v in report.replaced.values())
    calls = []
    real = hf_experts.experts_forward
    monkeypatch.setattr(hf_experts, "experts_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    ids = torch.randint(1, V, (2, S), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    got, grads = _loss_and_grads(model, ids)
    assert len(calls) == cfg.num_hidden_layers, "every MoE layer ran accel's experts"
    want, want_grads = _loss_and_grads(ref, ids)
    assert abs(float(got) - float(want)) <= 2e-2 * abs(float(want)), (float(got), float(want))
    for name, w in want_grads.items():
        g = grads[name]
        cos = torch.nn.functional.cosine_similarity(g.flatten(), w.flatten(), dim=0)
        assert cos >= 0.99, f"{name}: cosine {float(cos):.4f}"
