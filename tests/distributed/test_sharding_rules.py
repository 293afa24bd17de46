"""accel's custom ops with DTensor activations and weights (accel.kernels.ops.sharding): on gloo CPU ranks (one,
then two, spawned by ``_sharding_ranks.py``), every op's forward and backward through DTensors equal the plain
tensors' results, and where the op is local per shard (the rules' placements) no redistribution happens; the
rules are registered only once ``torch.distributed.tensor`` is imported, and a torch without the registration
accel knows says so instead of failing a step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

RANKS = Path(__file__).with_name("_sharding_ranks.py")
#: fp32 inputs of unit scale; the sums of Partial gradients are added in another order than the plain sum's
TOL = 1e-4
#: case -> the output placements (then the gradients') that show the op ran on each rank's shard
LOCAL = {
    "swiglu_rows": ["(Shard(dim=1),)"],
    "swiglu_last_dim": ["(Shard(dim=2),)"],
    "geglu_last_dim": ["(Shard(dim=2),)"],
    "rms_norm_sequence": ["(Shard(dim=1),)"],
    "rms_norm_gemma_batch": ["(Shard(dim=0),)"],
    "add_rms_norm_sequence": ["(Shard(dim=1),)"] * 2,
    "rope_heads": ["(Shard(dim=1),)"] * 2,
    "rope_batch": ["(Shard(dim=0),)"] * 2,
    "rope_sequence_bshd": ["(Shard(dim=1),)"] * 2,
    "lce_sum_rows": ["(Partial(sum),)"],
    "lce_none_rows": ["(Shard(dim=0),)"],
    "rms_norm_gradient_flags": ["(Shard(dim=1),)", "(Replicate(),)", "(Replicate(),)", "(Partial(sum),)",
                                "(Shard(dim=1),)", "(Partial(sum),)"],
    "tensor_parallel_block": ["(Shard(dim=1),)"],
}
#: cases that are not local per shard: DTensor gathers to the all-Replicate rule, still the plain result
REPLICATED = {"rms_norm_features": ["(Replicate(),)"], "lce_mean_rows": ["(Replicate(),)"]}
GRADS = {"rms_norm_sequence": ["(Shard(dim=1),)", "(Partial(sum),)"],
         "lce_sum_rows": ["(Shard(dim=0),)", "(Partial(sum),)", "(Partial(sum),)"]}
OPS = ["accel::swiglu", "accel::swiglu_backward", "accel::geglu", "accel::geglu_backward", "accel::rms_norm_hf", "accel::rms_norm_hf_backward",
       "accel::add_rms_norm_hf", "accel::add_rms_norm_hf_backward", "accel::rope", "accel::rope_backward",
       "accel::linear_cross_entropy", "accel::linear_cross_entropy_backward"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharding")
    r = subprocess.run([sys.executable, str(RANKS), str(out), "1", "2"], capture_output=True, text=True,
                       timeout=240, env=_env(), check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    return {(w, rank): json.loads((out / f"world{w}-rank{rank}.json").read_text())
            for w in (1, 2) for rank in range(w)}


def test_every_op_through_dtensors_equals_the_plain_tensors(ranks):
    for (world, rank), res in ranks.items():
        assert res["registered"] == OPS
        for name, case in res.items():
            if not isinstance(case, dict):
                continue
            assert "error" not in case, (world, rank, name, case["error"])
            assert max(case["diff"]) <= TOL, (world, rank, name, case["diff"])
        assert set(LOCAL) | set(REPLICATED) <= set(res), sorted(res)


def test_ops_local_per_shard_keep_the_shards(ranks):
    for (world, rank), res in ranks.items():
        for name, placements in {**LOCAL, **REPLICATED}.items():
            assert res[name]["placements"] == placements, (world, rank, name, res[name])
        for name, placements in GRADS.items():
            assert res[name]["grad_placements"] == placements, (world, rank, name, res[name])


def test_rules_wait_for_torch_distributed_tensor_and_leave_its_import_as_it_was():
    code = textwrap.dedent("""
        import importlib.util, json, sys
        import accel.kernels
        from accel.kernels.ops import sharding
        before = sharding.registered()
        dtensor_before = "torch.distributed.tensor" in sys.modules
        importlib.util.find_spec("torch.distributed.tensor")  # a spec asked for without an import keeps the hook
        import torch.distributed.tensor as T
        print(json.dumps({"before": before, "dtensor_before": dtensor_before, "after": sharding.registered(),
                          "loader": type(T.__loader__).__name__, "spec_loader": type(T.__spec__.loader).__name__,
                          "finders": [type(f).__name__ for f in sys.meta_path]}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env(),
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] == [] and not out["dtensor_before"]
    assert out["after"] == OPS
    assert out["loader"] == out["spec_loader"] == "SourceFileLoader"
    assert "_AfterDTensorImport" not in out["finders"]


def test_a_torch_without_the_registration_accel_knows_says_so(monkeypatch):
    import torch.distributed.tensor  # noqa: F401 - registers the real rules here first (the hook), then the fakes

    from accel import _compat
    from accel._compat import distributed as compat_distributed
    from accel.errors import FeatureUnavailableError, KernelRegistrationWarning
    from accel.kernels.ops import sharding

    monkeypatch.setattr(compat_distributed, "dtensor_class", lambda: type("DTensor", (), {}))
    with pytest.raises(FeatureUnavailableError, match="DTensor sharding rule for .*no custom-op sharding "
                                                      "registration accel knows"):
        _compat.register_dtensor_sharding(object(), lambda *a: [], 1)

    def broken():
        raise FeatureUnavailableError("no registration here")

    monkeypatch.setattr(sharding, "register", broken)
    with pytest.warns(KernelRegistrationWarning, match=r"DTensor sharding rules of accel's ops not registered "
                                                       r"\(FeatureUnavailableError: no registration here\)"):
        sharding.install()
