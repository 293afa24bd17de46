"""The patched loss with ``lm_head`` in an FSDP2 group of its own: its weight is a sharded ``DTensor`` when
the fused loss reads it (the group gathers only when ``lm_head``'s forward runs), so the patched model runs
its own logits and loss, says so once (``IntegrationWarning``), and gives the unpatched model's loss.
One gloo rank in a subprocess (a process group must not outlive the test)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                                  reason="transformers is not installed (pip install "
                                                         "'transformers>=5.17'); the integration needs it")]

SCRIPT = textwrap.dedent("""
    import json, warnings
    import torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM
    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy
    from accel.errors import IntegrationWarning
    from accel.integrations import transformers as accel_hf
    from accel.kernels.ops.linear_cross_entropy import reference as lce

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    ak.register("accel::linear_cross_entropy", impl=lce.forward, backends=["cpu"], dsl="triton", name="lce.cpu")
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 16))
    out = {}
    for own_group in (False, True):
        torch.manual_seed(1)
        model = LlamaForCausalLM(cfg)
        ref = model(input_ids=ids, labels=ids).loss.item()
        accel_hf.patch(model)
        if own_group:
            fully_shard(model.lm_head)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            r = model(input_ids=ids, labels=ids)
            r.loss.backward()
            model(input_ids=ids, labels=ids)  # said once, not per step
        said = [str(w.message) for w in seen if issubclass(w.category, IntegrationWarning)]
        out[str(own_group)] = {"ref": ref, "loss": r.loss.item(), "said": said,
                               "logits": r.logits is not None,
                               "routed": sum(o.routed for o in ak.overrides() if o.name == "lce.cpu")}
    dist.destroy_process_group()
    print(json.dumps(out))
""")


def test_lm_head_in_its_own_fsdp_group_runs_the_models_loss_and_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # run outside the checkout: "python -c" puts the working directory first on sys.path, where the repository's
    # kernels/ folder would shadow the kernels distribution transformers 5.25 imports
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env,
                       cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    root, own = out["False"], out["True"]
    # lm_head in the root's group: gathered with the root, the fused loss reads a plain tensor and routes
    assert root["said"] == [] and root["routed"] >= 1 and not root["logits"]
    assert abs(root["loss"] - root["ref"]) <= 1e-5 * abs(root["ref"])
    # its own group: the model's own loss, once said, with the remedy
    assert own["routed"] == root["routed"] and own["logits"]
    assert len(own["said"]) == 1 and "fully_shard(model.lm_head)" in own["said"][0]
    assert abs(own["loss"] - own["ref"]) <= 1e-5 * abs(own["ref"])
