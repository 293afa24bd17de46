"""A patched model where accel's kernels decline (decode: tiny tensors below every kernel's size floor): each replaced
module remembers a declined shape and runs the model's own code at once the next time; generation gives the
unpatched model's tokens; the memo is forgotten when the registry changes and never fed by a step-aside.
Host time itself is measured in ``benchmarks/decode_host_cpu.py``, not here.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

from accel.integrations import transformers as hf  # noqa: E402
from accel.integrations.transformers import declines  # noqa: E402

pytestmark = [pytest.mark.cpu, pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")]
V = 64
from conftest import DECLINING_OPS as OPS  # noqa: E402


def _llama(seed: int = 0):
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=V, max_position_embeddings=128, pad_token_id=0)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def _decode_steps(model, steps=4):
    ids = torch.randint(1, V, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache, logits = out.past_key_values, [out.logits]
        tok = out.logits[:, -1:].argmax(-1)
        for i in range(steps):
            out = model(tok, past_key_values=cache, use_cache=True, position_ids=torch.tensor([[6 + i]]))
            logits.append(out.logits)
            tok = out.logits[:, -1:].argmax(-1)
    return logits


def test_declined_shapes_skip_the_registry_and_compute_the_models_own_numbers(declining):
    calls, _ = declining
    ref, model = _llama(), None
    model = hf.patch(copy.deepcopy(ref))
    want = _decode_steps(ref)
    got = _decode_steps(model)
    assert all(torch.equal(a, b) for a, b in zip(got, want))  # the model's own code, bit for bit
    # each op's cond ran once per distinct shape it saw (prefill and decode), not once per call
    for op in OPS:
        assert calls[op] and len(calls[op]) == len(set(calls[op])), (op, calls[op])
    layer = model.model.layers[0]
    assert any(k[0] == "accel::add_rms_norm_hf" for k in vars(layer)[declines.ATTR])
    assert declines.ATTR not in model.state_dict() and all(declines.ATTR not in n for n, _ in model.named_buffers())


def test_kept_declines_count_as_declines_and_are_forgotten_when_the_registry_changes(declining):
    import accel.kernels as ak

    calls, names = declining
    model = hf.patch(_llama())
    _decode_steps(model, steps=3)
    (norm,) = [o for o in ak.overrides() if o.name in names and o.op == "accel::rms_norm_hf"]
    assert norm.declined >= (2 * 2 + 1) * 4  # every norm call of the prefill and 3 decode steps, memo hits included
    seen = len(calls["accel::rms_norm_hf"])
    _decode_steps(model, steps=3)
    assert len(calls["accel::rms_norm_hf"]) == seen  # nothing new to decide
    # a kernel that takes these shapes registered later (accel.kernels.install() after a first generation): the
    # kept declines no longer hold, and the norms route to it
    from accel.kernels.ops.rms_norm_hf import reference

    taker = ak.register("accel::rms_norm_hf", impl=reference.rms_norm_hf, backends=["cpu"], dsl="triton",
                        name="taking_rms_norm_hf.cpu")
    try:
        _decode_steps(model, steps=1)
        (info,) = [o for o in ak.overrides() if o.name == taker]
        assert info.routed > 0
    finally:
        ak.unregister(taker)


def test_a_step_aside_is_not_remembered(declining):
    """A hook makes the MLP run as modules (a step-aside), which must not be kept as a decline of its shape."""
    model = hf.patch(_llama())
    mlp = model.model.layers[0].mlp
    handle = mlp.register_forward_hook(lambda *a: None)
    _decode_steps(model, steps=1)
    handle.remove()
    assert not vars(mlp).get(declines.ATTR) or all(k[0] == "accel::swiglu" for k in vars(mlp)[declines.ATTR])


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_with_left_padding_gives_the_unpatched_models_tokens(beams, declining):
    ref = _llama()
    model = hf.patch(copy.deepcopy(ref))
    ids = torch.randint(1, V, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # the second row left-padded
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=beams, pad_token_id=0)
    want = ref.generate(ids, **kw)
    got = model.generate(ids, **kw)
    assert torch.equal(got, want)


def test_a_model_with_kept_declines_deep_copies_and_saves(declining, tmp_path):
    """The memo holds the registry's live overrides: copy.deepcopy and torch.save take it empty (the copy decides
    afresh), and the loaded model computes what the original does."""
    model = hf.patch(_llama())
    _decode_steps(model, steps=1)
    layer = model.model.layers[0]
    assert vars(layer)[declines.ATTR]
    twin = copy.deepcopy(model)
    assert not vars(twin.model.layers[0])[declines.ATTR]
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert not vars(loaded.model.layers[0])[declines.ATTR]
    assert all(torch.equal(a, b) for a, b in zip(_decode_steps(loaded), _decode_steps(model)))
    assert vars(layer)[declines.ATTR]  # the original keeps its own


def test_eval_loss_fuses_the_loss_under_no_grad_only_when_asked(cpu_kernels):
    """``patch(eval_loss=True)``: an evaluation call with labels under no_grad takes the fused loss (logits None
    unless asked for), equal to the model's own; without it (the default), the model's own code and logits run, as
    Trainer.evaluate's compute_metrics needs; a second patch with eval_loss=False turns it off; unpatch forgets."""
    import accel.kernels as ak

    ref = _llama()
    model = hf.patch(copy.deepcopy(ref))
    ids = torch.randint(1, V, (2, 12), generator=torch.Generator().manual_seed(5))
    def routed():  # (overrides() gives snapshots)
        return next(o.routed for o in ak.overrides() if o.name == cpu_kernels["accel::linear_cross_entropy"])

    with torch.no_grad():
        want = ref(input_ids=ids, labels=ids)
        before = routed()
        plain = model(input_ids=ids, labels=ids)
        assert routed() == before and torch.equal(plain.logits, want.logits)
        hf.patch(model, eval_loss=True)
        fused = model(input_ids=ids, labels=ids)
        assert routed() > before and fused.logits is None
        torch.testing.assert_close(fused.loss, want.loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(input_ids=ids, labels=ids, return_logits=True).logits, want.logits,
                                   rtol=1e-5, atol=1e-5)
        hf.patch(model, eval_loss=False)
        assert model(input_ids=ids, labels=ids).logits is not None
        hf.patch(model, eval_loss=True)
        hf.unpatch(model)
        assert "accel_eval_loss" not in vars(model)


def test_an_activation_is_judged_per_instance_not_per_class():
    """transformers' GELUTanh computes F.gelu(approximate="tanh") by default and a formula one bf16 step away with
    use_gelu_tanh_python=True: whichever Gemma is patched first, the default one gets accel::geglu and the other
    keeps its own MLP."""
    def gemma(act):
        torch.manual_seed(0)
        return transformers.GemmaForCausalLM(transformers.GemmaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=V, head_dim=8, hidden_act=act))

    python_tanh = hf.report(hf.patch(gemma("gelu_python_tanh")))
    default = hf.report(hf.patch(gemma("gelu_pytorch_tanh")))
    again = hf.report(hf.patch(gemma("gelu_python_tanh")))
    assert default.replaced["GemmaMLP"]["op"] == "accel::geglu"
    for r in (python_tanh, again):
        assert "GemmaMLP" not in r.replaced and "bit for bit" in r.left["GemmaMLP"]["reason"]


def test_a_decline_under_autocast_is_not_kept_for_calls_without_it():
    """A GeGLU kernel that takes fp32 gates only declines under bf16 autocast; the same shape without autocast is
    decided afresh (autocast's state is part of the memo's key) and routed."""
    import accel.kernels as ak
    from accel.kernels.ops.geglu import reference as gg

    def cond(gate, up):
        return gate.dtype == torch.float32
    cond.cacheable = True
    name = ak.register("accel::geglu", impl=gg.geglu, backends=["cpu"], dsl="triton", cond=cond,
                       name="fp32_geglu.cpu")
    try:
        torch.manual_seed(0)
        model = hf.patch(transformers.GemmaForCausalLM(transformers.GemmaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=V, head_dim=8)).eval())
        ids = torch.randint(1, V, (1, 7), generator=torch.Generator().manual_seed(1))

        def routed():
            return next(o.routed for o in ak.overrides() if o.name == name)

        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(ids)
            assert routed() == 0 and vars(model.model.layers[0].mlp)[declines.ATTR]
            model(ids)
        assert routed() == 2  # both layers' MLPs
    finally:
        ak.unregister(name)
