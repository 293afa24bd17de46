"""The experts role: Hugging Face's mixture-of-experts models (Qwen3-MoE, OLMoE, Mixtral, GPT-OSS) patched, their
experts on :func:`accel.nn.moe.experts`, with accel's references registered at the CPU key (every replaced module
takes accel's path), against the unpatched model."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                                                          "'accel-portability[transformers]')")

import accel.kernels as ak  # noqa: E402
from accel.integrations import transformers as hf  # noqa: E402
from accel.integrations.transformers import experts as hf_experts  # noqa: E402
from accel.integrations.transformers.families import TINY, expected  # noqa: E402

pytestmark = pytest.mark.cpu
MAJOR = int(transformers.__version__.split(".")[0])
FAMILIES = ("qwen3_moe", "olmoe", "mixtral", "gpt_oss")


def _model(family: str, **over):
    cfg_name, lm_name, kwargs = TINY[family]
    cfg = getattr(transformers, cfg_name)(**{**kwargs, **over})
    torch.manual_seed(0)
    model = getattr(transformers, lm_name)(cfg).train()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # experts are torch.empty until from_pretrained fills them: random values here
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if p.dim() == 1 and (p == 1).all() else 0.0))
    return model


def _step(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _routed(name: str) -> int:
    return next(o.routed for o in ak.overrides() if o.name == name)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_patched_moe_model_trains_as_the_unpatched_one(family, cpu_kernels):
    """Every role the family gets on this release replaced; the loss and every gradient (router's, experts',
    attention's) equal the unpatched model's within fp32 summation order; the experts' GEMMs ran in accel's op."""
    ref = _model(family)
    model = hf.patch(copy.deepcopy(ref))
    report = hf.report(model)
    got_roles = {hf.FAMILIES[family][1][name][0] for name in report.replaced}
    assert got_roles >= expected(family, MAJOR), report.left
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    before = _routed(cpu_kernels["accel::grouped_mm"])
    want, want_grads = _step(ref, ids)
    got, grads = _step(model, ids)
    if MAJOR >= 5:
        layers = sum(getattr(m, "accel_role", None) == "experts" for m in model.modules())
        assert layers and _routed(cpu_kernels["accel::grouped_mm"]) >= before + 2 * layers  # two GEMMs per layer
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert grads.keys() == want_grads.keys()
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.skipif(MAJOR < 5, reason="transformers 4.x has no experts class (its experts are nn.ModuleLists)")
def test_without_a_kernel_the_experts_run_their_own_code_bit_for_bit():
    """No accel kernel serves accel::grouped_mm on a CPU and torch's grouped GEMM does not take fp32: the replaced
    experts run the module's own code (whatever experts_implementation chose), the same bits."""
    ref = _model("qwen3_moe")
    model = hf.patch(copy.deepcopy(ref))
    assert "Qwen3MoeExperts" in hf.report(model).replaced
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    want, want_grads = _step(ref, ids)
    got, grads = _step(model, ids)
    assert torch.equal(got, want)
    assert all(torch.equal(grads[n], g) for n, g in want_grads.items())


@pytest.mark.skipif(MAJOR < 5, reason="transformers 4.x has no experts interface")
def test_experts_implementation_accel_is_transformers_own_switch(cpu_kernels):
    """``experts_implementation="accel"`` (transformers' ALL_EXPERTS_FUNCTIONS, once patch has run) calls accel's
    experts on an unpatched model: the same numbers as the default implementation."""
    assert hf_experts.register()
    ref = _model("mixtral")
    model = copy.deepcopy(ref)
    model.config._experts_implementation = "accel"
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    before = _routed(cpu_kernels["accel::grouped_mm"])
    want, _ = _step(ref, ids)
    got, _ = _step(model, ids)
    assert _routed(cpu_kernels["accel::grouped_mm"]) > before
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(MAJOR < 5, reason="transformers 4.x has no experts class")
def test_experts_step_aside_for_expert_parallelism_and_chosen_kernels():
    model = _model("qwen3_moe")
    module = next(m for m in model.modules() if type(m).__name__ == "Qwen3MoeExperts")
    assert hf_experts.instance_reason(module) is None
    module._is_expert_parallel = True
    assert "expert parallelism" in hf_experts.instance_reason(module)
    module._is_expert_parallel = False
    model.config._experts_implementation = "sonicmoe"
    assert "'sonicmoe'" in hf_experts.instance_reason(module)
    model.config._experts_implementation = "grouped_mm"
    module.has_post_expert_norm = True
    assert "has_post_expert_norm" in hf_experts.instance_reason(module)


@pytest.mark.skipif(MAJOR < 5, reason="transformers 4.x has no experts class")
def test_an_experts_class_outside_transformers_interface_is_left_with_the_reason():
    module = importlib.import_module("transformers.models.qwen3_moe.modeling_qwen3_moe")

    class Plain(torch.nn.Module):
        def forward(self, hidden_states, top_k_index, top_k_weights):
            return hidden_states

    cls, why = hf_experts.build(Plain, None)
    assert cls is None and "experts interface" in why
    accel_cls, why = hf_experts.build(module.Qwen3MoeExperts, None)
    assert why is None and accel_cls.accel_original is module.Qwen3MoeExperts


@pytest.mark.skipif(MAJOR < 5, reason="transformers 4.x has no experts interface")
def test_experts_implementation_accel_hands_what_it_does_not_compute_to_transformers(cpu_kernels):
    """A norm after each expert, or expert-parallel sentinel ids (>= E, weight 0): transformers' batched_mm
    computes them, not accel's experts."""
    from transformers.integrations import moe as hf_moe

    model = _model("qwen3_moe")
    module = next(m for m in model.modules() if type(m).__name__ == "Qwen3MoeExperts")
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(5, 32, generator=gen)
    ids = torch.randint(0, 4, (5, 2), generator=gen)
    w = torch.rand(5, 2, generator=gen)
    module._is_expert_parallel = True
    ids[0, 1], w[0, 1] = 4, 0.0  # a sentinel: an expert on another rank
    before = _routed(cpu_kernels["accel::grouped_mm"])
    got = hf_experts.experts_forward(module, h, ids, w)
    assert _routed(cpu_kernels["accel::grouped_mm"]) == before
    torch.testing.assert_close(got, hf_moe.batched_mm_experts_forward(module, h, ids, w))


def test_the_report_says_whether_the_experts_take_accels_path(cpu_kernels):
    if MAJOR < 5:
        pytest.skip("transformers 4.x has no experts class")
    model = hf.patch(_model("mixtral"))
    assert "accel.nn.moe.experts" not in (hf.report(model).idle or "")  # a CPU accel::grouped_mm serves them
    ak.unregister(cpu_kernels.pop("accel::grouped_mm"))
    assert "accel.nn.moe.experts" in hf.report(model).idle
