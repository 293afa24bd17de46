"""``benchmarks/real_models.py --quick`` on CPU: the GPU batch's driver, one fresh process per (model, mode), runs
end to end on a tiny Hugging Face Llama for eager, accel and compile and writes complete JSON lines (a smoke test:
the measurement needs the GPU); a mode whose package is absent is a ``skipped`` line with the reason; the op
counts and the plot. ``once``: each run is a process that imports torch and transformers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.once]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "real_models.py"
needs = pytest.mark.skipif(not SCRIPT.exists() or importlib.util.find_spec("transformers") is None,
                           reason="benchmarks/ is not in this checkout, or transformers is not installed")


def _module():
    spec = importlib.util.spec_from_file_location("real_models_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@needs
def test_quick_runs_eager_accel_and_compile_each_in_its_own_process(tmp_path):
    rm = _module()
    out = tmp_path / "real_models.jsonl"
    assert rm.main(["--all", "--quick", "--models", "hf_llama", "--modes", "eager,accel,compile,liger",
                    "--steps", "1", "--warmup", "0", "--curve-steps", "3", "--compile-backend", "aot_eager",
                    "--device", "cpu", "--timeout", "600", "--out", str(out)]) == 0
    rows = {r["mode"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(rows) == ["eager", "accel", "compile", "liger"]
    for mode in ("eager", "accel", "compile"):
        r = rows[mode]
        assert "error" not in r and "skipped" not in r, r
        assert {"model", "mode", "ms", "speedup_vs_eager", "peak_gib", "loss"} <= set(r)
        assert r["model"] == "hf_llama" and r["ms"] > 0 and len(r["losses"]) == r["curve_steps"] == 3
    assert rows["eager"]["speedup_vs_eager"] == 1.0 and rows["accel"]["speedup_vs_eager"] > 0
    # CPU, no accel kernel: the patched model runs its own code, so its loss curve is eager's to the bit
    assert rows["accel"]["losses"] == rows["eager"]["losses"] and rows["accel"]["loss_rel_vs_eager"] == 0.0
    # ... and the result says so, so that no table takes these figures for accel's kernels
    assert rows["accel"]["warning"].startswith("no accel kernel took any call") and "warning" not in rows["eager"]
    assert rows["accel"]["patch"]["replaced"]["LlamaRMSNorm"]["op"] == "accel::rms_norm_hf"
    assert rows["compile"]["compile_backend"] == "aot_eager"
    assert rows["compile"]["loss_rel_vs_eager"] < 1e-5
    if importlib.util.find_spec("liger_kernel") is None:
        assert rows["liger"]["skipped"].startswith("liger_kernel does not import")
    if importlib.util.find_spec("matplotlib") is not None:
        png = rm.plot(rm.load_results(out), tmp_path / "real_models.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs
def test_the_driver_names_a_peer_without_a_patch_function_as_skipped_without_a_process(tmp_path):
    rm = _module()
    out = tmp_path / "r.jsonl"
    rm.drive(["gpt2"], ["liger"], out, quick=True, steps=1, warmup=0, device_spec="cpu", timeout=60)
    assert json.loads(out.read_text()) == {"model": "gpt2", "mode": "liger", "quick": True,
                                           "skipped": "Liger-Kernel has no patch function for gpt2"}


@needs
def test_the_sgd_optimizer_steps_the_same_first_loss_to_another_curve_and_is_kept_apart_from_adamw(tmp_path):
    rm = _module()
    runs = {name: rm.run_one("hf_llama", "eager", quick=True, steps=1, warmup=0, device_spec="cpu", eager_ms=None,
                             curve_steps=3, optimizer=name) for name in rm.OPTIMIZERS}
    assert runs["sgd"]["optimizer"] == "sgd" and "optimizer" not in runs["adamw"]
    assert runs["sgd"]["losses"][0] == runs["adamw"]["losses"][0]  # the same weights and batch
    assert runs["sgd"]["losses"][1:] != runs["adamw"]["losses"][1:]  # each optimizer took its own step
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in runs.values()))
    assert len(rm.load_results(out)) == 2


@needs
def test_gemma_and_phi3_families_run_with_every_role_and_report_their_flops():
    """The families added for the model-families table: patched with all five roles, the CPU run is the model's own
    code bit for bit (no kernel), and each line carries the step's model FLOPs (no MFU without a GPU's peak)."""
    rm = _module()
    import transformers

    moe = ("qwen3_moe", "mixtral") if int(transformers.__version__.split(".")[0]) >= 5 else ()  # 5.x's experts
    for family in ("gemma2", "gemma3", "phi3", *moe):
        eager = rm.run_one(family, "eager", quick=True, steps=1, warmup=0, device_spec="cpu", eager_ms=None,
                           curve_steps=2)
        accel = rm.run_one(family, "accel", quick=True, steps=1, warmup=0, device_spec="cpu", eager_ms=eager["ms"],
                           curve_steps=2)
        assert "error" not in accel and accel["losses"] == eager["losses"], family
        assert len(accel["patch"]["replaced"]) == 5 and not accel["patch"]["left"], (family, accel["patch"])
        assert accel["flops"] == eager["flops"] > 0 and accel["mfu"] is None and accel["pct_gemm"] is None


@needs
def test_train_flops_counts_the_linear_weights_and_causal_attention():
    """HF Llama at the benchmark's shapes, built on the meta device: 6 x tokens x the linear weights, plus
    12 x layers x heads x head_dim x tokens x seq / 2 for the causal attention (about 23.4 TFLOP per step)."""
    import torch
    import transformers

    rm = _module()
    families = rm._families()
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    per_layer = 2048 * 2048 * 2 + 2048 * 1024 * 2 + 3 * 2048 * 5632
    linear = 8 * per_layer + 2048 * 32000
    want = 6 * 8192 * linear + 12 * 8 * 16 * 128 * 8192 * 2048 / 2
    assert families.train_flops(model, 8192, 2048) == want
    assert 2.3e13 < want < 2.4e13
    assert families.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0 and families.peak_tflops("cpu") is None
