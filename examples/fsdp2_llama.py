"""FSDP2 training of a Hugging Face Llama with accel, a DCP checkpoint, and an exact multi-rank resume.

What it does, on every vendor (``nccl`` on NVIDIA/AMD, ``xccl`` on Intel, ``gloo`` on CPU, chosen by
:func:`accel.distributed.backend_name`):

1. each rank computes on :func:`accel.device` (``LOCAL_RANK`` is its index on CUDA/ROCm/XPU) and joins
   the process group through :func:`accel.distributed.init_process_group`;
2. builds a random-init ``LlamaForCausalLM`` (no download), ``accel.integrations.transformers.patch``
   (``--mode accel``: RMSNorm, SwiGLU, RoPE on accel ops, the loss from
   ``accel.nn.functional.linear_cross_entropy``; ``--mode liger``: Liger-Kernel's patch instead;
   ``--mode eager``: neither), then ``fully_shard`` per decoder layer and on the root, with bf16 mixed
   precision where the device computes bf16 (fp32 master weights and gradient reduction);
3. trains ``--steps`` steps; at ``--save-at`` it writes a DCP checkpoint (model + optimizer, sharded)
   and one ``accel.random.snapshot()`` per rank (Python, NumPy, torch CPU and device RNG streams: every
   rank's own, so it is a file per rank, not a DCP entry that DCP would de-duplicate across ranks);
4. resumes in a fresh process group from a differently initialised model with scrambled RNG streams,
   and checks that every rank's losses, final parameter shards and next RNG draws equal the
   uninterrupted run's bit for bit.

Each batch is drawn from all of a rank's RNG streams (token ids from torch's CPU generator, an offset
from Python's ``random`` and NumPy's global state) and attention dropout draws from the device's
generator, so a stream that the resume failed to restore changes the losses.

Launch::

    python examples/fsdp2_llama.py                          # spawns --nproc 2 ranks here (CPU: gloo)
    torchrun --nproc-per-node 2 examples/fsdp2_llama.py     # one process per GPU
    torchrun --nproc-per-node 2 examples/fsdp2_llama.py --size bench --mode accel --json

Without a launcher the script spawns the ranks itself twice: the uninterrupted run, then the resume
in new processes (a fresh process group by construction). Under torchrun both phases run in the
launched processes, the resume after ``destroy_process_group`` in a new group; ``--phase run`` and
``--phase resume`` split them over two torchrun launches (the second compares with what the first
wrote into ``--ckpt``).

``--model torch`` trains a plain-torch decoder (``nn.RMSNorm``, SwiGLU MLP, dropout,
``linear_cross_entropy`` loss) instead, for machines without transformers. ``--json`` prints one JSON
object (per-rank losses, ms per step, peak memory per rank, the checks) instead of the progress lines.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

MODES = ("eager", "accel", "liger")
MODELS = ("llama", "torch")
#: Model sizes: ``toy`` runs on two CPU cores in seconds; ``bench`` is benchmarks/real_models.py's HF Llama.
SIZES: dict[str, dict[str, int]] = {
    "toy": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "batch": 2, "seq": 32},
    "bench": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 8, "num_attention_heads": 16,
              "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048, "batch": 4,
              "seq": 2048},
}
SNAPSHOT_NAME = "rng-rank{rank}.pt"
RESULT_NAME = "result-{phase}-rank{rank}.json"


class ExampleError(RuntimeError):
    """A setting this example cannot run with; the message says what to change."""


@dataclass
class Options:
    """The run's settings (the command line's, see ``--help``)."""

    model: str = "llama"
    mode: str = "accel"
    size: str = "toy"
    steps: int = 6
    save_at: int = 3
    batch: int | None = None
    seq: int | None = None
    dtype: str = "auto"
    lr: float = 1e-3
    seed: int = 0
    dropout: float = 0.1
    ckpt: str | None = None
    phase: str = "both"
    nproc: int = 2
    threads: int = 1
    timeout: float = 300.0
    check_grads: bool = False
    cpu_kernels: bool = False
    fresh: str = "processes"
    json: bool = False


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="llama",
                   help="llama: HF LlamaForCausalLM (needs transformers); torch: a plain-torch decoder")
    p.add_argument("--mode", choices=MODES, default="accel",
                   help="accel: accel.integrations.transformers.patch (+ accel.kernels.install() on a GPU); "
                        "liger: Liger-Kernel's apply_liger_kernel_to_llama; eager: neither (default accel)")
    p.add_argument("--size", choices=tuple(SIZES), default="toy", help="toy (CPU, seconds) or bench (the H200 "
                                                                        "benchmark's HF Llama: 8 x d2048)")
    p.add_argument("--steps", type=int, default=6, help="optimizer steps in all (default 6)")
    p.add_argument("--save-at", type=int, default=3, help="checkpoint after this many steps (default 3)")
    p.add_argument("--batch", type=int, default=None, help="sequences per rank (default: the size's)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the size's)")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="compute dtype of FSDP's mixed precision; auto: bf16 where the device computes it "
                        "natively and is not the CPU, else fp32 (bf16 works on gloo too, slowly)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.1, help="attention dropout (draws the device RNG)")
    p.add_argument("--ckpt", default=None, help="checkpoint folder (default: a new temporary folder)")
    p.add_argument("--phase", choices=("both", "run", "resume"), default="both",
                   help="both: the run, then the resume and the comparison; run / resume: one of them "
                        "(resume compares with the run's results in --ckpt)")
    p.add_argument("--nproc", type=int, default=2, help="ranks to spawn when not launched by torchrun (2)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per rank (1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a spawned phase may take (300)")
    p.add_argument("--fresh", choices=("processes", "group"), default="processes",
                   help="without torchrun, resume in new processes (default) or in the same ones after "
                        "destroy_process_group, in a new group (faster; what torchrun's single launch does)")
    p.add_argument("--check-grads", action="store_true",
                   help="before training, compare one step's sharded gradients with a single-process run")
    p.add_argument("--cpu-kernels", action="store_true",
                   help="on the CPU, register each accel op's eager reference as its CPU kernel, so the patched "
                        "model calls accel's ops as it does on a GPU with kernels (without it a patched module "
                        "runs the model's own code where no kernel takes the call)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of progress lines")
    a = p.parse_args(argv)
    opts = Options(**{k: v for k, v in vars(a).items()})
    _check(opts)
    return opts


def _check(opts: Options) -> None:
    if opts.steps < 1 or not 0 < opts.save_at < opts.steps:
        raise ExampleError(f"--steps {opts.steps} --save-at {opts.save_at}: the checkpoint must fall inside the run "
                           "(0 < save_at < steps). Pass e.g. --steps 6 --save-at 3.")
    if opts.nproc < 1 or opts.threads < 1:
        raise ExampleError(f"--nproc {opts.nproc} --threads {opts.threads}: both must be >= 1.")
    if opts.model == "torch" and opts.mode == "liger":
        raise ExampleError("--model torch --mode liger: Liger-Kernel patches Hugging Face classes only. Use "
                           "--model llama, or --mode eager/accel.")


# ------------------------------------------------------------------------------------------------ the model
class _Block(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.drop(self.down(nn.functional.silu(self.gate(h)) * self.up(h)))


class TinyDecoder(nn.Module):
    """A plain-torch decoder (no attention): embedding, SwiGLU blocks, ``nn.RMSNorm``, and the loss from
    ``accel.nn.functional.linear_cross_entropy`` on the head's weight (the logits are never stored)."""

    def __init__(self, vocab: int, dim: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Block(dim, hidden, dropout) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        from accel.nn.functional import linear_cross_entropy

        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        target = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]  # next-token targets, as HF shifts them
        return linear_cross_entropy(h.reshape(-1, h.shape[-1]), self.head.weight.to(h.dtype), target.reshape(-1),
                                    ignore_index=-100).float()


def _needs(package: str, why: str) -> Any:
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ExampleError(f"{why} needs {package}, which does not import here ({exc}). Install it, or pass "
                           f"--model torch (plain torch).") from exc


def build_model(opts: Options) -> tuple[nn.Module, list[nn.Module], dict[str, Any]]:
    """The unsharded model on the CPU (random init from the current torch RNG), its blocks to shard one by
    one, and what was patched. ``--mode liger`` patches Hugging Face's classes globally (Liger's way), so
    that mode belongs in its own process."""
    size = SIZES[opts.size]
    info: dict[str, Any] = {}
    if opts.model == "torch":
        model = TinyDecoder(size["vocab_size"], size["hidden_size"], size["intermediate_size"],
                            size["num_hidden_layers"], opts.dropout)
        return model, list(model.layers), info
    transformers = _needs("transformers", "--model llama")
    if opts.mode == "liger":
        liger = _needs("liger_kernel.transformers", "--mode liger")
        liger.apply_liger_kernel_to_llama()  # before the model is built: it rebinds the modeling classes
    config = transformers.LlamaConfig(**{k: v for k, v in size.items() if k not in ("batch", "seq")},
                                      attention_dropout=opts.dropout, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config)
    if opts.mode == "accel":
        from accel.integrations import transformers as accel_hf

        accel_hf.patch(model)
        info["patch"] = accel_hf.report(model).as_dict()
    return model, list(model.model.layers), info


def register_cpu_references() -> list[str]:
    """Register each accel op's eager reference at the CPU key (``--cpu-kernels``): accel's registry then
    takes the patched modules' calls on the CPU as it takes a GPU kernel's. Returns the registration names
    (registering each once per process)."""
    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy (the loss's op on torch 2.9-2.12)
    from accel.kernels.ops.linear_cross_entropy import reference as lce
    from accel.kernels.ops.rms_norm_hf import op as _rn_op  # noqa: F401 - each op module defines its op
    from accel.kernels.ops.rms_norm_hf import reference as rn
    from accel.kernels.ops.rope import op as _rp_op  # noqa: F401
    from accel.kernels.ops.rope import reference as rp
    from accel.kernels.ops.swiglu import op as _sw_op  # noqa: F401
    from accel.kernels.ops.swiglu import reference as sw

    refs = {"accel::swiglu": sw.swiglu, "accel::rope": rp.rope, "accel::rms_norm_hf": rn.rms_norm_hf,
            "accel::linear_cross_entropy": lce.forward}
    have = {o.name for o in ak.overrides()}  # a second phase in the same process: registered already
    names = [f"fsdp2_example_{op[7:]}.cpu" for op in refs]
    for (op, fn), name in zip(refs.items(), names):
        if name not in have:
            ak.register(op, impl=fn, backends=["cpu"], dsl="triton", name=name)
    return names


def compute_dtype(opts: Options, device: torch.device) -> torch.dtype:
    """bf16 where the device computes it natively (and is not the CPU), else fp32; ``--dtype`` overrides."""
    import accel

    if opts.dtype != "auto":
        return torch.bfloat16 if opts.dtype == "bf16" else torch.float32
    native = "bfloat16" in accel.backend(device).capabilities().dtypes
    return torch.bfloat16 if native and device.type != "cpu" else torch.float32


def fully_shard_api() -> tuple[Any, Any]:
    """``torch.distributed.fsdp.fully_shard`` and ``MixedPrecisionPolicy`` (public there since torch 2.6;
    accel's floor, 2.9, through 2.15 have both)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError as exc:
        raise ExampleError(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard ({exc}): FSDP2 is "
                           "public there from torch 2.6. Install torch >= 2.9 (accel's floor).") from exc
    return fully_shard, MixedPrecisionPolicy


def shard(model: nn.Module, blocks: list[nn.Module], device: torch.device, dtype: torch.dtype) -> nn.Module:
    """``fully_shard`` each block, then the root (embedding, final norm, head: one group, so the loss reads
    an unsharded head weight inside the root's forward); parameters become ``DTensor`` shards on ``device``."""
    import accel.distributed as ad

    fully_shard, MixedPrecisionPolicy = fully_shard_api()
    model.to(device)
    ad.check_backend(model)  # nccl with CPU parameters fails here, with the fix, not in FSDP's first all-gather
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


# --------------------------------------------------------------------------------------------- one rank
def draw_batch(opts: Options, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, labels)`` of shape ``[batch, seq]`` (int64), drawn from this rank's Python, NumPy and
    torch CPU RNG streams."""
    import numpy as np

    size = SIZES[opts.size]
    vocab, batch, seq = size["vocab_size"], opts.batch or size["batch"], opts.seq or size["seq"]
    offset = random.randrange(vocab) + int(np.random.randint(vocab))
    ids = (torch.randint(0, vocab, (batch, seq)) + offset) % vocab
    ids = ids.to(device)
    return ids, ids


def loss_of(model: nn.Module, opts: Options, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if opts.model == "torch":
        return model(ids, labels)
    return model(input_ids=ids, labels=labels).loss


def _sync(device: torch.device) -> None:
    import accel

    if device.type != "cpu":
        accel.synchronize(device)


def _peak(device: torch.device) -> float | None:
    """Peak allocated GiB on ``device`` since the last reset (``None`` on the CPU: no allocator telemetry)."""
    import accel.memory

    return None if device.type == "cpu" else round(accel.memory.max_allocated(device) / 2**30, 3)


def _shards_sha256(model: nn.Module) -> str:
    """A digest of this rank's local parameter shards, bytes as stored (fp32 master weights)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        h.update(name.encode())
        h.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _rng_probe(device: torch.device) -> list[str]:
    """The next draw of each RNG stream (consumes them): Python, NumPy, torch CPU, the device's."""
    import numpy as np

    out = [float(random.random()).hex(), float(np.random.random()).hex(), float(torch.rand(()).item()).hex()]
    if device.type != "cpu":
        out.append(float(torch.rand((), device=device).item()).hex())
    return out


def seed_streams(seed: int) -> None:
    """Seed every RNG stream of this process: Python, NumPy, torch CPU and every device."""
    import numpy as np

    import accel.random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    accel.random.manual_seed(seed)


def save_checkpoint(ckpt: Path, model: nn.Module, optim: torch.optim.Optimizer, step: int, rank: int,
                    world: int) -> None:
    """DCP (model + optimizer, each rank its shards) and this rank's ``accel.random.snapshot()``."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import accel.random

    msd, osd = get_state_dict(model, optim)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(ckpt / "dcp"))
    torch.save({"snapshot": accel.random.snapshot(), "step": step, "rank": rank, "world_size": world},
               ckpt / SNAPSHOT_NAME.format(rank=rank))
    dist.barrier()


def load_checkpoint(ckpt: Path, model: nn.Module, optim: torch.optim.Optimizer, rank: int, world: int) -> int:
    """Load the DCP state into the sharded model and optimizer, then restore this rank's RNG streams
    (strictly: a stream that cannot apply is an error). Returns the step to continue from."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import accel.random

    path = ckpt / SNAPSHOT_NAME.format(rank=rank)
    if not path.is_file():
        raise ExampleError(f"resume: {path} is missing: the checkpoint in {ckpt} was not written by rank {rank} of "
                           f"{world} ranks. Resume with the world size that saved it.")
    saved = torch.load(path, weights_only=True)
    if saved["world_size"] != world or saved["rank"] != rank:
        raise ExampleError(f"resume: {path} was saved by rank {saved['rank']} of {saved['world_size']}, this is rank "
                           f"{rank} of {world}. Each rank's RNG streams are its own: resume with the same ranks.")
    msd, osd = get_state_dict(model, optim)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=str(ckpt / "dcp"))
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    accel.random.restore(saved["snapshot"], strict=True)
    return int(saved["step"])


class _AccelOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the calls of accel's ops (``accel::<name>``) dispatched inside it, backward included."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if name.startswith("accel::"):
            self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def check_gradients(opts: Options, reference: nn.Module, model: nn.Module, device: torch.device, rank: int,
                    world: int, ops_seen: dict[str, int]) -> tuple[float, float]:
    """One forward/backward of every rank's fixed batch on the sharded model against the unsharded
    ``reference`` on the concatenated batches (dropout off): the largest absolute difference of the
    gradients (FSDP averages over ranks, the reference averages the per-rank losses) and the largest
    absolute reference gradient, over all ranks. Leaves no gradient; adds the accel ops the sharded step
    ran (``accel::rms_norm_hf``: calls, counted by a dispatch mode) to ``ops_seen``."""
    import torch.distributed as dist

    size = SIZES[opts.size]
    vocab, batch, seq = size["vocab_size"], opts.batch or size["batch"], opts.seq or size["seq"]
    batches = [torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(10_000 + r))
               for r in range(world)]
    model.eval()
    reference.eval().to(device)
    ids = batches[rank].to(device)
    # counted by a dispatch mode, not torch.profiler: kineto's teardown in a CUDA build without a device
    # aborted the rank now and then (torch 2.14.1: "terminate called without an active exception")
    with _AccelOps() as seen:
        loss_of(model, opts, ids, ids).backward()
    ops_seen.update(seen.calls)
    ref_loss = sum(loss_of(reference, opts, b.to(device), b.to(device)) for b in batches) / world
    ref_loss.backward()
    worst = largest = 0.0
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        full = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        want = grads[name].grad.float()
        worst = max(worst, (full.float() - want).abs().max().item())
        largest = max(largest, want.abs().max().item())
    model.zero_grad(set_to_none=True)
    model.train()
    reference.cpu()
    t = torch.tensor([worst, largest], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0].item()), float(t[1].item())


def train_rank(opts: Options, phase: str, ckpt: Path, rank: int, world: int, init_method: str | None,
               scramble: int = 12345) -> dict[str, Any]:
    """One phase on this rank inside its own process group: ``"run"`` (steps ``0 .. steps``, the
    checkpoint at ``save_at``) or ``"resume"`` (from the checkpoint, a model built from another seed and
    RNG streams seeded with ``scramble`` before the restore). Returns the rank's results."""
    import torch.distributed as dist

    import accel.distributed as ad

    torch.set_num_threads(opts.threads)
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=max(60, int(opts.timeout)))}
    if init_method is not None:
        kwargs.update(init_method=init_method, rank=rank, world_size=world)
    else:  # torchrun: its store, under a prefix of this phase's own (a second group in the same processes
        # must not read the first one's keys: the ranks then wait on each other's stale addresses)
        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world))
        kwargs.update(store=dist.PrefixStore(f"fsdp2_llama/{phase}/", store), rank=rank, world_size=world)
    device = ad.init_process_group(**kwargs)  # accel.device(): LOCAL_RANK's index on CUDA/ROCm/XPU
    result: dict[str, Any] = {"rank": rank, "world_size": world, "phase": phase, "device": str(device),
                              "backend": dist.get_backend(), "torch": torch.__version__}
    try:
        if opts.mode == "accel" and device.type != "cpu":
            import accel.kernels

            result["kernels_installed"] = accel.kernels.install()
        elif opts.cpu_kernels and device.type == "cpu":
            result["kernels_installed"] = register_cpu_references()
        dtype = compute_dtype(opts, device)
        result["dtype"] = str(dtype).removeprefix("torch.")
        seed_streams(opts.seed if phase == "run" else opts.seed + 777)  # the resume starts from other weights
        model, blocks, info = build_model(opts)
        result.update(info)
        reference = copy.deepcopy(model) if opts.check_grads and phase == "run" else None
        model = shard(model, blocks, device, dtype)
        params = list(model.parameters())
        result["dtensor_parameters"] = sum(type(p).__name__ == "DTensor" for p in params)
        result["parameters"] = len(params)
        optim = torch.optim.AdamW(model.parameters(), lr=opts.lr)
        if reference is not None:
            ops: dict[str, int] = {}
            diff, largest = check_gradients(opts, reference, model, device, rank, world, ops)
            result.update(grad_max_abs_diff=diff, grad_max_abs=largest, accel_ops=ops)
            del reference
        if phase == "run":
            seed_streams(opts.seed * 1000 + 1 + rank)  # each rank's own data and dropout streams
            start = 0
        else:
            seed_streams(scramble + rank)  # whatever these streams would draw, the restore must replace them
            start = load_checkpoint(ckpt, model, optim, rank, world)
        model.train()
        losses: list[str] = []
        times: list[float] = []
        if device.type != "cpu":
            import accel.memory

            accel.memory.reset_peak(device)
        for step in range(start, opts.steps):
            _sync(device)
            t0 = time.perf_counter()
            ids, labels = draw_batch(opts, device)
            loss = loss_of(model, opts, ids, labels)
            loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            value = float(loss.detach().float().item())
            _sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(value.hex())
            if rank == 0 and not opts.json:
                print(f"[{phase}] step {step + 1}/{opts.steps} loss {value:.6f} ({times[-1]:.1f} ms/step)",
                      flush=True)
            if phase == "run" and step + 1 == opts.save_at:
                save_checkpoint(ckpt, model, optim, step + 1, rank, world)
                if rank == 0 and not opts.json:
                    print(f"[{phase}] checkpoint after step {step + 1}: {ckpt}", flush=True)
        result.update(start=start, losses=losses, ms_per_step=times,
                      ms_median=round(statistics.median(times[1:] or times), 3), peak_gib=_peak(device),
                      params_sha256=_shards_sha256(model), rng_next=_rng_probe(device))
    finally:
        dist.destroy_process_group()
    return result


def _rank_entry(rank: int, opts: Options, phases: tuple[str, ...], ckpt: str, init_file: str, world: int) -> None:
    """``torch.multiprocessing`` entry of one spawned rank: its ``LOCAL_RANK``, then :func:`train_rank` per
    phase, each phase in a new process group (its own ``file://`` rendezvous)."""
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun would: accel.device() takes it as the index
    os.environ.setdefault("OMP_NUM_THREADS", str(opts.threads))
    for phase in phases:
        result = train_rank(opts, phase, Path(ckpt), rank, world, f"file://{init_file}-{phase}")
        Path(ckpt, RESULT_NAME.format(phase=phase, rank=rank)).write_text(json.dumps(result))
    # Every result is written and the process groups are destroyed: the rank ends here, without the
    # interpreter's teardown, where torch 2.14.1's CUDA build on a host without a GPU aborted about one
    # rank in five ("terminate called without an active exception", a joinable C++ thread at exit) and so
    # failed a finished run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_phases(opts: Options, phases: tuple[str, ...], ckpt: Path) -> dict[str, list[dict[str, Any]]]:
    """Run ``phases`` (in order, in the same processes) in ``opts.nproc`` new processes
    (``torch.multiprocessing``, spawn), each phase in a new process group; kill every rank past
    ``opts.timeout`` seconds. Returns each phase's per-rank results.

    Raises:
        ExampleError: a rank failed (its traceback is in the message) or the phases timed out.
    """
    import torch.multiprocessing as mp

    init_file = Path(tempfile.mkdtemp(prefix="fsdp2-init-")) / "rendezvous"
    ctx = mp.start_processes(_rank_entry, args=(opts, phases, str(ckpt), str(init_file), opts.nproc),
                             nprocs=opts.nproc, join=False, start_method="spawn")
    deadline = time.monotonic() + opts.timeout
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise ExampleError(f"{'+'.join(phases)}: {opts.nproc} ranks did not finish within "
                                   f"{opts.timeout:.0f} s (--timeout). They were killed.")
    except mp.ProcessRaisedException as exc:
        raise ExampleError(f"{'+'.join(phases)}: a rank failed:\n{exc}") from None
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return {phase: _gather(ckpt, phase, opts.nproc) for phase in phases}


def compare(run: list[dict[str, Any]], resume: list[dict[str, Any]], save_at: int) -> dict[str, Any]:
    """Per rank: the resume's losses, final shards and next RNG draws against the run's, bit for bit."""
    ranks = []
    for a, b in zip(run, resume):
        ranks.append({"rank": a["rank"], "losses": a["losses"][save_at:] == b["losses"],
                      "params": a["params_sha256"] == b["params_sha256"], "rng": a["rng_next"] == b["rng_next"]})
    return {"exact": all(r["losses"] and r["params"] and r["rng"] for r in ranks), "ranks": ranks}


def summary(opts: Options, run: list[dict[str, Any]], resume: list[dict[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"options": asdict(opts),
                           "world_size": len(run), "backend": run[0]["backend"], "device": [r["device"] for r in run],
                           "dtype": run[0]["dtype"], "torch": torch.__version__,
                           "losses": {r["rank"]: [float.fromhex(x) for x in r["losses"]] for r in run},
                           "ms_per_step": [r["ms_median"] for r in run], "peak_gib": [r["peak_gib"] for r in run]}
    for key in ("patch", "kernels_installed", "grad_max_abs_diff", "grad_max_abs", "accel_ops"):
        if key in run[0]:
            out[key] = run[0][key]
    if resume is not None:
        out["resume"] = compare(run, resume, opts.save_at)
    return out


def _print(opts: Options, out: dict[str, Any]) -> None:
    if opts.json:
        print(json.dumps(out))
        return
    print(f"{out['world_size']} ranks on {out['backend']} ({', '.join(out['device'])}), {out['dtype']}, "
          f"torch {out['torch']}: {out['ms_per_step']} ms/step per rank, peak {out['peak_gib']} GiB per rank")
    if "grad_max_abs_diff" in out:
        print(f"gradients vs one process: max |diff| {out['grad_max_abs_diff']:.3g} (max |grad| "
              f"{out['grad_max_abs']:.3g}); accel ops in the sharded step: {out['accel_ops'] or 'none'}")
    if "resume" in out:
        verdict = "bit for bit" if out["resume"]["exact"] else "DIFFERENT"
        print(f"resume after step {opts.save_at} in a fresh process group: {verdict} {out['resume']['ranks']}")


def main(argv: list[str] | None = None) -> int:
    import accel.distributed as ad

    opts = parse_args(argv)
    launch = ad.launch_env()
    if opts.ckpt:
        ckpt = Path(opts.ckpt)
    elif launch.launched:  # every rank must name the same folder (on one node; several nodes need --ckpt)
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        ckpt = Path(tempfile.gettempdir()) / f"fsdp2-ckpt-{run_id}-{launch.master_addr}-{launch.master_port}"
    else:
        ckpt = Path(tempfile.mkdtemp(prefix="fsdp2-ckpt-"))
    ckpt.mkdir(parents=True, exist_ok=True)
    if launch.launched:  # torchrun: this process is one rank; both phases here, each in its own process group
        for phase in ("run", "resume") if opts.phase == "both" else (opts.phase,):  # no stale results
            Path(ckpt, RESULT_NAME.format(phase=phase, rank=launch.rank)).unlink(missing_ok=True)
        results: dict[str, dict[str, Any]] = {}
        for phase in ("run", "resume") if opts.phase == "both" else (opts.phase,):
            results[phase] = train_rank(opts, phase, ckpt, launch.rank, launch.world_size, None)
            Path(ckpt, RESULT_NAME.format(phase=phase, rank=launch.rank)).write_text(json.dumps(results[phase]))
        if launch.rank != 0:
            return 0
        run, resume = _gather(ckpt, "run", launch.world_size), None
        if opts.phase != "run":
            resume = _gather(ckpt, "resume", launch.world_size, wait=opts.timeout)
    elif opts.phase == "both" and opts.fresh == "group":
        done = spawn_phases(opts, ("run", "resume"), ckpt)
        run, resume = done["run"], done["resume"]
    else:
        run = spawn_phases(opts, ("run",), ckpt)["run"] if opts.phase != "resume" else _gather(ckpt, "run", opts.nproc)
        resume = spawn_phases(opts, ("resume",), ckpt)["resume"] if opts.phase != "run" else None
    out = summary(opts, run, resume)
    _print(opts, out)
    return 0 if resume is None or out["resume"]["exact"] else 1


def _gather(ckpt: Path, phase: str, world: int, wait: float = 0.0) -> list[dict[str, Any]]:
    """Every rank's result file of ``phase`` (rank 0 waits up to ``wait`` s for the others' to appear)."""
    deadline = time.monotonic() + wait
    paths = [ckpt / RESULT_NAME.format(phase=phase, rank=r) for r in range(world)]
    while not all(p.is_file() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.2)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ExampleError(f"{phase}: no results from {len(missing)} rank(s) ({', '.join(missing)}). Run --phase run "
                           f"first with the same --ckpt and world size.")
    return [json.loads(p.read_text()) for p in paths]


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
