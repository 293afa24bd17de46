"""Ranks of tests/distributed/test_sharding_rules.py: ``python _sharding_ranks.py OUT_DIR WORLD [WORLD ...]``
spawns WORLD gloo CPU ranks (``torch.multiprocessing.spawn``) for each WORLD in turn; each rank runs accel's
custom ops on DTensors and on the plain tensors they hold, and writes ``OUT_DIR/world<w>-rank<r>.json``: per
case, the output placements and the largest difference of every output and gradient from the plain
computation (an exception is recorded as the case's ``error``)."""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

CASES: dict = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _leaves(*ts):
    return [t.detach().clone().requires_grad_(t.is_floating_point()) for t in ts]


def _compare(run, plain_args, placements, mesh, grad_idx):
    """``run(*args)`` on plain tensors and on DTensors of them (``placements`` per argument, ``None``: not a
    tensor); forward outputs and the gradients of ``grad_idx`` compared after a sum of squares backward."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    ref_args = [a.detach().clone().requires_grad_(i in grad_idx) if isinstance(a, torch.Tensor) else a
                for i, a in enumerate(plain_args)]
    d_args = [distribute_tensor(a.detach().clone(), mesh, p).requires_grad_(i in grad_idx) if p is not None else a
              for i, (a, p) in enumerate(zip(plain_args, placements))]
    ref = run(*ref_args)
    got = run(*d_args)
    ref, got = (ref,) if isinstance(ref, torch.Tensor) else ref, (got,) if isinstance(got, torch.Tensor) else got
    out = {"placements": [str(g.placements) if isinstance(g, DTensor) else type(g).__name__ for g in got], "diff": []}
    for r, g in zip(ref, got):
        if r.numel():
            out["diff"].append((g.full_tensor() - r).abs().max().item())
    loss_ref = sum((r.float() ** 2).sum() for r in ref if r.requires_grad)
    loss_got = sum((g.float() ** 2).sum() for g in got if g.requires_grad)
    loss_ref.backward()
    loss_got.full_tensor().backward() if isinstance(loss_got, DTensor) else loss_got.backward()
    for i in sorted(grad_idx):
        out["diff"].append((d_args[i].grad.full_tensor() - ref_args[i].grad).abs().max().item())
        out.setdefault("grad_placements", []).append(str(d_args[i].grad.placements))
    return out


@case
def swiglu_rows(mesh):
    from torch.distributed.tensor import Shard

    a, b = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    return _compare(torch.ops.accel.swiglu, [a, b], [[Shard(1)]] * 2, mesh, {0, 1})


@case
def swiglu_last_dim(mesh):  # elementwise: the ColwiseParallel gate/up output (sharded on the features) stays local
    from torch.distributed.tensor import Shard

    a, b = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    return _compare(torch.ops.accel.swiglu, [a, b], [[Shard(2)]] * 2, mesh, {0, 1})


@case
def geglu_last_dim(mesh):  # Gemma's gated MLP: elementwise, sharded on the features as SwiGLU is
    from torch.distributed.tensor import Shard

    a, b = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    return _compare(torch.ops.accel.geglu, [a, b], [[Shard(2)]] * 2, mesh, {0, 1})


@case
def rms_norm_sequence(mesh):  # SequenceParallel: rows sharded on the sequence, the weight replicated
    from accel.kernels.ops.rms_norm_hf.op import rms_norm
    from torch.distributed.tensor import Replicate, Shard

    x, w = torch.randn(2, 6, 8), torch.randn(8)
    return _compare(lambda x, w: rms_norm(x, w, 1e-6), [x, w], [[Shard(1)], [Replicate()]], mesh, {0, 1})


@case
def rms_norm_gradient_flags(mesh):
    """accel::rms_norm_hf_backward on the same shapes, asked for one gradient and then the other: its flags key
    DTensor's propagation cache (else the second call gets the first's output placements and shapes)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    g, x, w = torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(8)
    rstd = torch.ops.accel.rms_norm_hf(x, w, 1e-6)[1]
    places = [[Shard(1)], [Shard(1)], [Replicate()], [Shard(1)]]
    d_args = [distribute_tensor(t, mesh, p) for t, p in zip((g, x, w, rstd), places)]
    out = {"placements": [], "diff": []}
    for flags in ((True, False), (False, True), (True, True)):
        ref = torch.ops.accel.rms_norm_hf_backward(g, x, w, rstd, False, *flags)
        got = torch.ops.accel.rms_norm_hf_backward(*d_args, False, *flags)
        for r, t in zip(ref, got):
            out["placements"].append(str(t.placements))
            full = t.full_tensor()
            same = full.shape == r.shape
            out["diff"].append(float("inf") if not same else (full - r).abs().max().item() if r.numel() else 0.0)
    return out


@case
def rms_norm_gemma_batch(mesh):
    from accel.kernels.ops.rms_norm_hf.op import rms_norm
    from torch.distributed.tensor import Replicate, Shard

    x, w = torch.randn(4, 3, 8).bfloat16(), torch.randn(8)
    return _compare(lambda x, w: rms_norm(x, w, 1e-6, True), [x, w], [[Shard(0)], [Replicate()]], mesh, {0, 1})


@case
def rms_norm_features(mesh):  # sharded over the normalised dim: not local, redistributed (the result still exact)
    from accel.kernels.ops.rms_norm_hf.op import rms_norm
    from torch.distributed.tensor import Shard

    x, w = torch.randn(2, 6, 8), torch.randn(8)
    return _compare(lambda x, w: rms_norm(x, w, 1e-6), [x, w], [[Shard(2)], [Shard(0)]], mesh, {0, 1})


@case
def add_rms_norm_sequence(mesh):
    from accel.kernels.ops.add_rms_norm_hf.op import add_rms_norm
    from torch.distributed.tensor import Replicate, Shard

    x, r, w = torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(8)
    return _compare(lambda x, r, w: add_rms_norm(x, r, w, 1e-6), [x, r, w], [[Shard(1)], [Shard(1)], [Replicate()]],
                    mesh, {0, 1, 2})


def _rope(q_dim, cos_p, unsqueeze_dim, mesh, batch_of_cos=2):
    from torch.distributed.tensor import Shard

    from accel.kernels.ops.rope.op import apply_rope

    b, s, d = 2, 6, 8
    q, k = ((torch.randn(b, h, s, d) if unsqueeze_dim == 1 else torch.randn(b, s, h, d)) for h in (4, 2))
    cos, sin = torch.randn(batch_of_cos, s, d), torch.randn(batch_of_cos, s, d)
    return _compare(lambda q, k, c, s_: apply_rope(q, k, c, s_, unsqueeze_dim), [q, k, cos, sin],
                    [[Shard(q_dim)], [Shard(q_dim)], [cos_p], [cos_p]], mesh, {0, 1})


@case
def rope_heads(mesh):
    from torch.distributed.tensor import Replicate

    return _rope(1, Replicate(), 1, mesh)


@case
def rope_batch(mesh):
    from torch.distributed.tensor import Shard

    return _rope(0, Shard(0), 1, mesh)


@case
def rope_sequence_bshd(mesh):
    from torch.distributed.tensor import Shard

    return _rope(1, Shard(1), 2, mesh, batch_of_cos=1)


def _lce(reduction, weight_p, mesh):
    from torch.distributed.tensor import Replicate, Shard

    n, d, c = 8, 16, 12
    x, w, t, bias = torch.randn(n, d), torch.randn(c, d), torch.randint(0, c, (n,)), torch.randn(c)

    def run(x, w, t, bias):
        out = torch.ops.accel.linear_cross_entropy(x, w, t, bias, None, reduction, -100, 0.1, 4, "accurate",
                                                    torch.float32, False, True, True, True)
        return out[0]

    return _compare(run, [x, w, t, bias], [[Shard(0)], [weight_p], [Shard(0)], [Replicate()]], mesh, {0, 1, 3})


@case
def lce_sum_rows(mesh):
    from torch.distributed.tensor import Replicate

    return _lce("sum", Replicate(), mesh)


@case
def lce_none_rows(mesh):
    from torch.distributed.tensor import Replicate

    return _lce("none", Replicate(), mesh)


@case
def lce_mean_rows(mesh):  # the mean divides by every rank's count: runs replicated
    from torch.distributed.tensor import Replicate

    return _lce("mean", Replicate(), mesh)


@case
def lce_sum_vocab_parallel(mesh):  # a class-sharded weight (ColwiseParallel lm_head): runs replicated
    from torch.distributed.tensor import Shard

    return _lce("sum", Shard(0), mesh)


@case
def tensor_parallel_block(mesh):
    """norm (SequenceParallel) -> gate/up (ColwiseParallel, DTensor outputs) -> accel::swiglu -> down
    (RowwiseParallel, back to the sequence shards); against the same block unparallelized."""
    from torch import nn
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    from accel.kernels.ops.rms_norm_hf.op import rms_norm

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8))

        def forward(self, x):
            return rms_norm(x, self.weight, 1e-6)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.gate, self.up, self.down = Norm(), nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            h = self.norm(x)
            return self.down(torch.ops.accel.swiglu(self.gate(h), self.up(h)))

    ref = Block()
    tp = Block()
    tp.load_state_dict(ref.state_dict())
    colwise = ColwiseParallel(input_layouts=Shard(1), use_local_output=False)
    parallelize_module(tp, mesh, {"norm": SequenceParallel(), "gate": colwise, "up": colwise,
                                  "down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)})
    world, rank = mesh.size(), mesh.get_local_rank()
    x = torch.randn(2, 6, 8)
    seq = x.shape[1] // world
    x_ref, x_tp = x.clone().requires_grad_(), x[:, rank * seq:(rank + 1) * seq].clone().requires_grad_()
    y_ref, y_tp = ref(x_ref), tp(x_tp)
    y_ref.square().sum().backward()
    y_tp.full_tensor().square().sum().backward()
    diff = [(y_tp.full_tensor() - y_ref).abs().max().item(),
            (x_tp.grad - x_ref.grad[:, rank * seq:(rank + 1) * seq]).abs().max().item()]
    for name, p in ref.named_parameters():
        diff.append((tp.get_parameter(name).grad.full_tensor() - p.grad).abs().max().item())
    return {"placements": [str(y_tp.placements)], "diff": diff}


def rank_main(rank, world, out_dir):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import accel.kernels  # noqa: F401 - installs the rules' registration (torch.distributed.tensor not yet imported)
    from accel.kernels.ops import sharding

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store{world}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    results = {}
    start = time.perf_counter()
    try:
        for name, fn in CASES.items():
            torch.manual_seed(0)  # every rank draws the same inputs
            try:
                results[name] = fn(mesh)
            except Exception as exc:  # noqa: BLE001 - reported per case, the test names it
                results[name] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
    finally:
        dist.destroy_process_group()
    results["registered"] = sharding.registered()
    results["cases_s"] = time.perf_counter() - start
    with open(os.path.join(out_dir, f"world{world}-rank{rank}.json"), "w") as f:
        json.dump(results, f)
    # The results are written and the group destroyed: the rank ends without the interpreter's teardown, where
    # gloo ranks abort now and then ("terminate called without an active exception", a joinable C++ thread at
    # exit; seen here on torch 2.13, and by examples/fsdp2_llama.py's _rank_entry on 2.14.1).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    for world in map(int, sys.argv[2:]):
        mp.spawn(rank_main, args=(world, sys.argv[1]), nprocs=world, join=True)
