"""FSDP2 on gloo, 2 spawned CPU ranks, the core of examples/fsdp2_llama.py at toy size.

Every torch accel supports (2.9 through 2.15) has ``torch.distributed.fsdp.fully_shard`` and runs it on
gloo with CPU tensors, DCP included, so nothing here is skipped for the torch version. The plain-torch
test runs in every env; the Hugging Face one needs transformers (tox env ``cpu``) and is skipped with
the reason elsewhere.

Each test bounds its ranks: the example's ``spawn_phases`` kills them past ``TIMEOUT`` seconds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 240.0  # seconds per spawn; the machine these run on may be shared

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed (pip install "
                                                                     "'transformers>=5.17'); the integration needs it")


@pytest.fixture(scope="module")
def example():
    """examples/fsdp2_llama.py as a module (its folder on sys.path, so spawned ranks import it too)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import fsdp2_llama
    finally:
        sys.path.remove(str(EXAMPLES))
    sys.path.append(str(EXAMPLES))  # spawned children inherit sys.path: they import fsdp2_llama by name
    yield fsdp2_llama
    sys.path.remove(str(EXAMPLES))


def _options(example, **kw):
    base = {"size": "toy", "steps": 4, "save_at": 2, "nproc": 2, "threads": 1, "timeout": TIMEOUT,
            "check_grads": True, "dtype": "fp32"}
    return example.Options(**{**base, **kw})


def _check_exact(example, opts, run, resume):
    """The resume equals the run bit for bit on every rank: losses, final shards, next RNG draws."""
    verdict = example.compare(run, resume, opts.save_at)
    assert verdict["exact"], verdict
    for a, b in zip(run, resume):
        assert b["start"] == opts.save_at and len(b["losses"]) == opts.steps - opts.save_at
        assert a["losses"][opts.save_at:] == b["losses"]  # float.hex strings: bit for bit
        assert len(b["rng_next"]) == 3  # Python, NumPy, torch CPU (the CPU has no device generator of its own)
    # each rank drew its own batches (its own streams), so the streams restored were per rank
    assert run[0]["losses"] != run[1]["losses"]
    assert run[0]["rng_next"] != run[1]["rng_next"]


def _check_sharded(run):
    for r in run:
        assert r["backend"] == "gloo" and r["device"] == "cpu" and r["dtype"] == "float32"
        assert r["dtensor_parameters"] == r["parameters"] > 0  # every parameter is a DTensor shard
    assert run[0]["grad_max_abs"] > 1e-4  # the gradients compared are not all zero
    assert run[0]["grad_max_abs_diff"] <= 1e-5 * max(1.0, run[0]["grad_max_abs"])


def test_plain_torch_fsdp2_matches_one_process_and_resumes_exactly_in_new_processes(example, tmp_path):
    """nn.RMSNorm + SwiGLU + dropout + linear_cross_entropy, fully_shard per block and root; the resume runs
    in new processes (a new process group) from another init and scrambled RNG streams."""
    opts = _options(example, model="torch", mode="eager")
    run = example.spawn_phases(opts, ("run",), tmp_path)["run"]
    resume = example.spawn_phases(opts, ("resume",), tmp_path)["resume"]
    _check_sharded(run)
    _check_exact(example, opts, run, resume)
    assert sorted(p.name for p in tmp_path.glob("rng-rank*.pt")) == ["rng-rank0.pt", "rng-rank1.pt"]
    assert (tmp_path / "dcp" / ".metadata").is_file()


@needs_transformers
def test_patched_llama_on_dtensor_parameters_matches_one_process_and_resumes_exactly(example, tmp_path):
    """accel.integrations.transformers.patch'd HF Llama under fully_shard: the accel ops run inside the sharded
    step, gradients equal the unsharded model's, and the resume (new process group, same processes) is exact."""
    opts = _options(example, model="llama", mode="accel", fresh="group", cpu_kernels=True)
    done = example.spawn_phases(opts, ("run", "resume"), tmp_path)
    run, resume = done["run"], done["resume"]
    _check_sharded(run)
    replaced = run[0]["patch"]["replaced"]
    assert {"LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "LlamaForCausalLM"} <= set(replaced), replaced
    ops = run[0]["accel_ops"]
    layers = example.SIZES["toy"]["num_hidden_layers"]
    # two norms per layer and the final one, and (patch's norm_recompute default) each layer's two norm outputs
    # recomputed in backward, for the attention's projections and the MLP
    assert ops.get("accel::rms_norm_hf") == 2 * layers + 1 + 2 * layers, ops
    # swiglu twice per layer: the forward, and the down projection's backward recomputing the product
    # (patch's mlp_recompute default) under the sharded parameters
    assert ops.get("accel::swiglu") == 2 * layers and ops.get("accel::rope") == layers, ops
    _check_exact(example, opts, run, resume)


def test_resume_refuses_another_world_size(example, tmp_path):
    """A per-rank snapshot saved by rank 1 of 2 is not silently used by rank 1 of 3 (no spawn needed)."""
    import torch

    torch.save({"snapshot": {}, "step": 2, "rank": 1, "world_size": 2}, tmp_path / "rng-rank1.pt")
    with pytest.raises(example.ExampleError, match="saved by rank 1 of 2, this is rank 1 of 3"):
        example.load_checkpoint(tmp_path, None, None, 1, 3)
    with pytest.raises(example.ExampleError, match="rng-rank2.pt is missing"):
        example.load_checkpoint(tmp_path, None, None, 2, 3)


def test_options_are_checked(example):
    with pytest.raises(example.ExampleError, match="0 < save_at < steps"):
        example.parse_args(["--steps", "3", "--save-at", "3"])
    with pytest.raises(example.ExampleError, match="Liger-Kernel patches Hugging Face classes only"):
        example.parse_args(["--model", "torch", "--mode", "liger"])
    opts = example.parse_args([])
    assert (opts.model, opts.mode, opts.size, opts.steps, opts.save_at, opts.nproc) == ("llama", "accel", "toy", 6, 3, 2)


def test_compute_dtype_is_bf16_only_off_the_cpu(example):
    import torch

    from accel.testing import fake_backend

    opts = example.Options()
    assert example.compute_dtype(opts, torch.device("cpu")) == torch.float32
    with fake_backend("cuda", device_count=2):
        assert example.compute_dtype(opts, torch.device("cuda", 1)) == torch.bfloat16
    opts.dtype = "bf16"
    assert example.compute_dtype(opts, torch.device("cpu")) == torch.bfloat16
