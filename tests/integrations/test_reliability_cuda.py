"""The reliability cases on a real GPU with accel's kernels installed (``-m cuda``; skipped elsewhere with the
probe's reason): RoPE with strided ``cos``/``sin`` tables against the reference, the fused loss stepping aside
for whatever ``lm_head``'s own call adds, and degenerate batches through the routed fused loss.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

pytestmark = pytest.mark.cuda

V, D, S = 4096, 1024, 1024  # [2 x 1024 tokens, 1024]: above the 2**20-element floor (tokens x hidden)


@pytest.fixture(scope="module")
def installed():
    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy

    ak.install()
    yield ak
    ak.uninstall() if hasattr(ak, "uninstall") else None


def _llama(seed: int = 0):
    cfg = transformers.LlamaConfig(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=V, max_position_embeddings=2 * S)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).train()


def _loss_and_grads(model, **inputs):
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach().float(), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


def _ids():
    return torch.randint(1, V, (2, S), device="cuda", generator=torch.Generator("cuda").manual_seed(1))


def _routed(ak, op: str) -> int:
    return sum(o.routed for o in ak.overrides() if o.op == op)


def test_rope_with_strided_tables_matches_the_reference(installed):
    from accel.kernels.ops.rope import op as rope_op
    from accel.kernels.ops.rope import reference as rope_ref

    g = torch.Generator("cuda").manual_seed(0)
    q = torch.randn(4, 512, 16, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
    k = torch.randn(4, 512, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
    cache = torch.randn(1, 512, 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    packed = torch.randn(1, 512, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    before = _routed(installed, "accel::rope")
    for cos, sin in ((packed, cache[:, :, 1]), (cache[:, :, 0], packed), (cache[:, :, 0], cache[:, :, 1])):
        got = rope_op.apply_rope(q, k, cos, sin, 1)
        want = rope_ref.rope(q.float(), k.float(), cos.float(), sin.float(), 1)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=3e-2)
    assert _routed(installed, "accel::rope") > before  # the kernel answered, not the reference


class _LoraLinear(nn.Linear):
    def __init__(self, base: nn.Linear) -> None:
        super().__init__(base.in_features, base.out_features, bias=False, device="cuda", dtype=torch.bfloat16)
        self.weight = base.weight
        self.lora_a = nn.Parameter(torch.randn(8, base.in_features, device="cuda", dtype=torch.bfloat16) * 0.05)
        self.lora_b = nn.Parameter(torch.randn(base.out_features, 8, device="cuda", dtype=torch.bfloat16) * 0.05)

    def forward(self, x):
        return super().forward(x) + x @ self.lora_a.t() @ self.lora_b.t()


@pytest.mark.parametrize("change", ["adapter", "hook", "forward"])
def test_the_fused_loss_steps_aside_for_what_lm_heads_own_call_adds(change, installed):
    from accel.integrations import transformers as hf

    ref, model = _llama(), _llama()
    for m in (ref, model):
        if change == "adapter":
            torch.manual_seed(3)
            m.lm_head = _LoraLinear(m.lm_head)
        elif change == "hook":
            m.lm_head.register_forward_hook(lambda mod, args, out: out * 1.5)
        else:
            plain = m.lm_head.forward
            m.lm_head.forward = lambda x, plain=plain: plain(x) - 0.5
    hf.patch(model)
    ids = _ids()
    want, want_grads = _loss_and_grads(ref, input_ids=ids, labels=ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, grads = _loss_and_grads(model, input_ids=ids, labels=ids)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert grads.keys() == want_grads.keys()
    if change == "adapter":
        for n in ("lm_head.lora_a", "lm_head.lora_b"):
            assert grads[n].abs().sum() > 0
            torch.testing.assert_close(grads[n], want_grads[n], rtol=5e-2, atol=5e-2, msg=n)


@pytest.mark.parametrize("case", ["all_ignored", "num_items_0", "one_token", "num_items_tensor"])
def test_degenerate_batches_through_the_routed_loss(case, installed):
    from accel.integrations import transformers as hf

    ids = _ids()
    labels, extra = ids, {}
    if case in ("all_ignored", "num_items_0"):
        labels = torch.full_like(ids, -100)
    if case == "one_token":
        labels = torch.full_like(ids, -100)
        labels[0, 7] = ids[0, 7]
    if case == "num_items_0":
        extra = {"num_items_in_batch": torch.tensor(0, device="cuda")}
    if case == "num_items_tensor":
        extra = {"num_items_in_batch": torch.tensor(321, device="cuda")}
    ref, model = _llama(), hf.patch(_llama())
    before = _routed(installed, "accel::linear_cross_entropy")
    want, want_grads = _loss_and_grads(ref, input_ids=ids, labels=labels, **extra)
    got, grads = _loss_and_grads(model, input_ids=ids, labels=labels, **extra)
    assert _routed(installed, "accel::linear_cross_entropy") > before
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2, equal_nan=True)
    for n in want_grads:
        assert torch.isnan(grads[n]).any() == torch.isnan(want_grads[n]).any(), n
        if case in ("all_ignored", "num_items_0"):
            assert not torch.isnan(grads[n]).any() and grads[n].abs().max() == 0, n


def test_gemma2_softcapped_loss_runs_in_the_kernel_and_matches_the_models_own(installed):
    """Gemma 2's final-logit softcapping (30.0) inside the routed loss kernel: the loss within 1e-3 relative of the
    model's own capped-logits loss (bf16 logits there, fp32 math in the kernel), the input and head gradients
    within bf16 rounding, and the loss op routed to accel's kernel."""
    import accel.integrations.transformers as hf

    cfg = transformers.Gemma2Config(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=D // 4, vocab_size=V, max_position_embeddings=2 * S,
                                    final_logit_softcapping=30.0)
    torch.manual_seed(0)
    ref = transformers.Gemma2ForCausalLM(cfg).to("cuda", torch.bfloat16).train()
    model = hf.patch(transformers.Gemma2ForCausalLM(cfg).to("cuda", torch.bfloat16).train())
    model.load_state_dict(ref.state_dict())
    ids = _ids()
    assert "Gemma2ForCausalLM" in hf.report(model).replaced
    before = _routed(installed, "accel::linear_cross_entropy")
    loss, grads = _loss_and_grads(model, input_ids=ids, labels=ids)
    assert _routed(installed, "accel::linear_cross_entropy") > before
    want, want_grads = _loss_and_grads(ref, input_ids=ids, labels=ids)
    assert abs(float(loss) - float(want)) <= 1e-3 * abs(float(want))
    for name in ("lm_head.weight", "model.embed_tokens.weight"):
        if name in want_grads:
            torch.testing.assert_close(grads[name], want_grads[name], rtol=5e-2, atol=5e-3, msg=name)
