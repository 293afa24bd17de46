"""The portable training demo behind ``accel demo``: a small transformer on real digits.

Data: scikit-learn's ``load_digits`` (1,797 real 8x8 handwritten digits, shipped
inside scikit-learn: no download). Each image is 8 tokens (its rows) of 8 pixels.
The model uses ``torch.nn.RMSNorm``, softmax attention and ``torch.nn.LayerNorm``,
so accel's kernel overrides route into it on GPUs.

The run trains once without interruption, then checks exact resume: it reloads the
checkpoint taken halfway (model + optimizer + :func:`accel.random.snapshot`, through
``torch.save``/``torch.load(weights_only=True)``) into fresh objects, trains the
second half again, and compares every loss bit for bit.
"""

from __future__ import annotations

import io
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import accel
from accel.errors import AccelError

__all__ = ["BATCH", "CPU_THREADS", "MIN_EPOCHS", "SHORT_BATCH", "SHORT_EPOCHS", "DigitsTransformer", "DemoError",
           "DemoArgumentError", "default_batch", "load_data", "resume_seed", "run"]


class DemoError(AccelError, RuntimeError):
    """The demo could not run (missing optional dependency, bad arguments)."""


class DemoArgumentError(DemoError, ValueError):
    """Bad ``epochs``, ``batch`` or ``seed`` (the CLI answers it as bad input: exit code 2)."""


class Attention(nn.Module):
    """Multi-head self-attention written out, so ``aten::_softmax`` is what runs.

    Shapes: ``x`` ``[B, T, D]`` -> ``[B, T, D]``.
    """

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        attn = self.drop(torch.softmax(scores, dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: RMSNorm -> attention, RMSNorm -> MLP, both residual."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DigitsTransformer(nn.Module):
    """A 2-block transformer over the 8 rows of an 8x8 digit.

    Shapes: input ``[B, 8, 8]`` float32 pixels in [0, 1]; output ``[B, 10]`` logits.
    """

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.pos = nn.Parameter(torch.zeros(1, 8, dim))
        self.blocks = nn.Sequential(*(Block(dim, heads, dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.embed(x) + self.pos)
        return self.head(self.norm(h).mean(dim=1))


@dataclass
class Data:
    """The digits split: ``x_*`` ``[N, 8, 8]`` float32 in [0, 1], ``y_*`` ``[N]`` int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_data(device: torch.device) -> Data:
    """Load scikit-learn's digits, split 80/20 (stratified, fixed), and move them to ``device``.

    Raises:
        DemoError: scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:
        raise DemoError(
            f"accel demo needs scikit-learn for its data set (load_digits): {exc}. "
            "Install it with: pip install scikit-learn (or, in your accel clone: pip install '.[demo]')"
        ) from None
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    idx_train, idx_test = train_test_split(list(range(len(y))), test_size=0.2, random_state=0, stratify=digits.target)
    it, iv = torch.tensor(idx_train), torch.tensor(idx_test)
    return Data(x[it].to(device), y[it].to(device), x[iv].to(device), y[iv].to(device))


def _new_run(device: torch.device, lr: float, total_steps: int
             ) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Model, AdamW and a one-cycle schedule (warm-up then cosine decay over ``total_steps``)."""
    model = DigitsTransformer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps, pct_start=0.15)
    return model, opt, sched


def _train_epoch(model: nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler,
                 data: Data, batch: int, device: torch.device, step_ms: list[float] | None,
                 advance: Callable[[], None]) -> list[float]:
    """One epoch in a freshly shuffled order (from the CPU generator). Returns the float losses."""
    model.train()
    n = data.x_train.shape[0]
    order = torch.randperm(n).to(device)
    losses = []
    for start in range(0, n, batch):
        idx = order[start:start + batch]
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        value = loss.item()  # synchronises the device, so the step time below is complete
        if step_ms is not None:
            step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(value)
        advance()
    return losses


@torch.no_grad()
def _accuracy(model: nn.Module, data: Data) -> float:
    model.eval()
    pred = model(data.x_test).argmax(dim=1)
    return float((pred == data.y_test).float().mean().item())


def _install_kernels(backend_name: str) -> list[str]:
    """Register accel's built-in kernels (RMSNorm, softmax, LayerNorm) on accelerators; ``[]`` on CPU."""
    if backend_name == "cpu":
        return []
    import accel.kernels as ak

    names = ak.install()
    ak.reset_counters()
    return names


def _why_no_kernels(asked: bool, backend_name: str) -> str | None:
    """Why the demo runs without kernel overrides (``None`` when some are installed)."""
    if not asked:
        return "off (--kernels off)"
    if backend_name == "cpu":
        return ("the demo runs on cpu; accel's built-in kernels serve GPUs (NVIDIA, AMD and Intel; `accel kernels` "
                "says which run here)")
    import accel.kernels as ak

    reasons = sorted({f"{a.dsl}: {a.reason}" for a in ak.availability() if not a.available})
    return "none usable here: " + "; ".join(reasons) if reasons else "none usable here"


def _kernel_report(names: list[str]) -> dict[str, dict[str, int]]:
    import accel.kernels as ak

    return {o.name: {"routed": o.routed, "declined": o.declined, "failed": o.failed}
            for o in ak.overrides() if o.name in names}


def _step_ms_without_kernels(dev: torch.device, data: Data, batch: int, lr: float, steps: int) -> float:
    """Median step time (ms) of a fresh model with accel's overrides switched off."""
    import accel.kernels as ak

    model, opt, sched = _new_run(dev, lr, steps + 1)
    times: list[float] = []
    with ak.disabled():
        _train_epoch(model, opt, sched, data, batch, dev, times, lambda: None)
    return statistics.median(times[len(times) // 4:] or times)


#: The model of the overrides-on/off step-time comparison on accelerators: the demo's architecture at a
#: width and batch where each norm moves a ``[65536, 1024]`` bf16 tensor (8192 digits x 8 tokens, dim 1024:
#: a shape of the kernel benchmark, so the shipped tuning table routes it to accel's kernels). The
#: digits-sized training model is far below every kernel's size floor: its calls all go to ATen.
WIDE = {"dim": 1024, "heads": 8, "depth": 2, "batch": 8192, "dtype": "bfloat16"}


def wide_step_times(dev: torch.device, data: Data, *, config: dict[str, Any] | None = None, rounds: int = 4,
                    steps: int = 5, lr: float = 1e-3) -> dict[str, Any]:
    """Training-step time of the :data:`WIDE` model with accel's overrides on and off, interleaved.

    ``rounds`` times: ``steps`` steps with the overrides on, then ``steps`` under
    :func:`accel.kernels.disabled` (after one warm-up step each, which compiles the kernels);
    a block's time is wall time to :func:`accel.synchronize`, divided by ``steps``. Interleaving
    cancels clock and thermal drift between the two. Uses its own CPU generator for the batch
    and forks the RNG for the model's initialisation: the caller's random streams are untouched.

    Args:
        dev: the device (the overrides installed for it decide what routes).
        data: the digits (the batch is drawn from ``data.x_train`` with replacement).
        config: ``dim``, ``heads``, ``depth``, ``batch``, ``dtype`` (default :data:`WIDE`).

    Returns:
        ``{"config", "step_ms_on", "step_ms_off", "speedup" (off / on), "counts": {name: {routed,
        declined, failed}} during the "on" blocks}``; times are medians over the rounds, in ms.
    """
    import accel.kernels as ak

    cfg = {**WIDE, **(config or {})}
    dtype = getattr(torch, cfg["dtype"])
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, data.x_train.shape[0], (cfg["batch"],), generator=g).to(dev)
    x, y = data.x_train[idx].to(dtype), data.y_train[idx]
    with accel.random.fork_rng():
        torch.manual_seed(0)
        model = DigitsTransformer(cfg["dim"], cfg["heads"], cfg["depth"], dropout=0.0).to(dev, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def block(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x).float(), y).backward()
            opt.step()
        accel.synchronize(dev)
        return (time.perf_counter() - t0) * 1e3 / n

    on: list[float] = []
    off: list[float] = []
    block(1)
    with ak.disabled():
        block(1)
    ak.reset_counters()
    for _ in range(rounds):
        on.append(block(steps))
        with ak.disabled():
            off.append(block(steps))
    counts = {o.name: {"routed": o.routed, "declined": o.declined, "failed": o.failed} for o in ak.overrides()}
    t_on, t_off = statistics.median(on), statistics.median(off)
    return {"config": cfg, "step_ms_on": t_on, "step_ms_off": t_off, "speedup": t_off / t_on, "counts": counts}


def _wide_or_why(dev: torch.device, data: Data) -> dict[str, Any]:
    """:func:`wide_step_times`, or ``{"skipped": reason}`` where the device lacks the memory for it."""
    try:
        return wide_step_times(dev, data)
    except torch.OutOfMemoryError as exc:
        import accel.memory

        accel.memory.empty_cache()
        return {"skipped": f"out of device memory for the wide model ({str(exc).splitlines()[0][:160]}); "
                           f"the on/off comparison needs a few GB"}


def _graph_step_times(dev: torch.device, data: Data, batch: int, lr: float) -> dict[str, Any] | None:
    """Whole training step (forward, backward, AdamW) eager vs captured with :func:`accel.graphs.graphed`.

    ``None`` where the device has no graph capture (CPU, MPS): nothing is timed there.
    AdamW runs with ``capturable=True`` (on accelerators) in both variants so they do the same work.
    """
    supported = accel.graphs.is_supported(dev)
    if not supported:
        return None
    model = DigitsTransformer().to(dev)
    # capturable keeps the step count on the device, which a graph needs; torch allows it on accelerators only
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, capturable=dev.type != "cpu")

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    t = accel.graphs.compare_step_time(step, (data.x_train[:batch].clone(), data.y_train[:batch].clone()), iters=50)
    return {"captured": t.captured, "eager_ms": t.eager_ms, "graphed_ms": t.graphed_ms,
            "speedup": t.eager_ms / t.graphed_ms if t.graphed_ms > 0 else None, "reason": t.reason}


#: accel.random.manual_seed's range.
_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1


def resume_seed(seed: int) -> int:
    """The other seed the resumed run's fresh objects are built from: another seed modulo 2**64 (the checkpoint
    alone must make the runs agree), inside manual_seed's range for every valid ``seed`` (``seed + 1`` was
    not, for ``2**64 - 1``, and failed after the whole training run)."""
    return seed ^ 1


#: The fewest epochs :func:`run` takes: the smallest run that still passes the accuracy check (> 0.90) with
#: :func:`default_batch` (measured on CPU: 3 epochs at batch 16 reach 0.931-0.936 over seeds 0-2; 2 epochs reach
#: only 0.86-0.88 even at batch 10-16, 0.90-0.91 at batch 8, too close to the target to pass honestly).
MIN_EPOCHS = 3
#: Runs shorter than this many epochs train with :data:`SHORT_BATCH`, longer ones with :data:`BATCH`.
SHORT_EPOCHS = 6
BATCH, SHORT_BATCH = 64, 16


def default_batch(epochs: int) -> int:
    """The batch size of an ``epochs``-epoch run: :data:`BATCH` (64) from :data:`SHORT_EPOCHS` (6) epochs on,
    :data:`SHORT_BATCH` (16) below, so that a short run makes about as many optimizer steps as the default
    12-epoch one (3 x 90 = 270 vs 12 x 23 = 276) and passes the same accuracy check (6 epochs at 64 reach
    0.92-0.94 over seeds 0-3; 3 at 64 only about 0.80)."""
    return BATCH if epochs >= SHORT_EPOCHS else SHORT_BATCH


#: CPU threads the demo trains with when ``threads`` is not given: its tensors (``[64, 8, 64]``) are far too small
#: to gain from intra-op parallelism, and on cores that other processes also use, torch's OpenMP threads wait
#: for each other: step times of 10.7 to 443 ms between identical runs on two shared cores, 17.7 ms on one thread.
CPU_THREADS = 1


def run(device: object = None, *, epochs: int = 12, batch: int | None = None, lr: float = 3e-3, seed: int = 0,
        progress: Callable[[str, int], Callable[[], None]] | None = None, kernels: bool = True,
        threads: int | None = None) -> dict[str, Any]:
    """Train the demo model and check exact resume.

    Args:
        device: device spec for :func:`accel.device` (``None``: ACCEL_DEVICE, else best).
        epochs: training epochs (>= :data:`MIN_EPOCHS`; the checkpoint is taken after ``epochs // 2``).
        batch: batch size (>= 1; default :func:`default_batch` of ``epochs``: 64, or 16 below 6 epochs).
        lr: AdamW learning rate.
        seed: seed for :func:`accel.random.manual_seed`.
        progress: ``progress(label, total_steps)`` returns a callable advanced once per step.
        kernels: on an accelerator, install accel's kernel overrides (:func:`accel.kernels.install`;
            each op's tuning table decides per shape whether a kernel or ATen runs), report which
            ran, time one more epoch with the overrides off, and compare on/off on the :data:`WIDE`
            model. No effect on CPU.
        threads: CPU threads for torch's intra-op parallelism during the run (``torch.set_num_threads``;
            restored afterwards); default :data:`CPU_THREADS` (1) on the CPU, torch's own setting elsewhere.

    Returns:
        JSON-ready dict: ``device``, ``backend``, ``vendor``, ``arch``, ``accuracy``
        (held-out, 0..1), ``step_ms`` (median ms per training step), ``threads`` (CPU threads torch used),
        ``batch``, ``steps``,
        ``final_loss``, ``resume`` (``equal``, ``compared``, ``max_abs_diff``), ``seconds``, and
        ``kernels``: ``{"installed": [...], "counts": {name: {routed, declined, failed}},
        "step_ms_on", "step_ms_off", "wide"}`` - counts and step times of the digits model (its
        inputs are below the kernels' size floor: every call goes to ATen, so "on" pays only the
        router), and ``wide``: :func:`wide_step_times` of the :data:`WIDE` model, where the
        kernels route (``installed`` empty and times/``wide`` ``None`` where none installed; then
        ``why_none`` says why: off, a CPU run, or each DSL's reason).

    .. note:: With ``kernels`` on an accelerator, the overrides stay registered after the call.

    Raises:
        DemoArgumentError: bad ``epochs``/``batch``/``seed`` (a :class:`DemoError` and a ``ValueError``),
            before anything runs.
        DemoError: scikit-learn missing.
        accel.errors.AccelError: device selection failed.
    """
    seed_ok = isinstance(seed, int) and not isinstance(seed, bool) and _SEED_MIN <= seed <= _SEED_MAX
    threads_ok = threads is None or isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1
    if batch is None and isinstance(epochs, int):
        batch = default_batch(epochs)
    if epochs < MIN_EPOCHS or batch < 1 or not seed_ok or not threads_ok:
        problems = ([f"epochs={epochs}: need >= {MIN_EPOCHS} (the smallest run that passes the accuracy check; the "
                     f"resume check stops halfway); pass e.g. --epochs {MIN_EPOCHS} for a quick run"]
                    if epochs < MIN_EPOCHS else []) + ([f"batch={batch}: need >= 1"] if batch < 1 else []) + (
                    [f"seed={seed!r}: need an int in -2**63 .. 2**64 - 1 (accel.random.manual_seed's range); pass e.g. "
                     f"--seed 0"] if not seed_ok else []) + (
                    [f"threads={threads!r}: need an int >= 1; pass e.g. --threads 1"] if not threads_ok else [])
        raise DemoArgumentError(f"accel demo: {'; '.join(problems)}.")
    sel = accel.selection(device)
    if threads is None and sel.device.type == "cpu":
        threads = CPU_THREADS
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        result = _run(sel, epochs=epochs, batch=batch, lr=lr, seed=seed, progress=progress, kernels=kernels)
    finally:
        torch.set_num_threads(before)
    return result


def _run(sel: Any, *, epochs: int, batch: int, lr: float, seed: int,
         progress: Callable[[str, int], Callable[[], None]] | None, kernels: bool) -> dict[str, Any]:
    """:func:`run` after its checks, with torch's thread count set."""
    t_start = time.perf_counter()
    dev = sel.device
    data = load_data(dev)
    steps_per_epoch = math.ceil(data.x_train.shape[0] / batch)
    half = epochs // 2
    no_progress = lambda: None  # noqa: E731
    bar = progress("train", epochs * steps_per_epoch) if progress else no_progress

    installed = _install_kernels(sel.backend.name) if kernels else []
    accel.random.manual_seed(seed)
    total_steps = epochs * steps_per_epoch
    model, opt, sched = _new_run(dev, lr, total_steps)
    losses: list[float] = []
    step_ms: list[float] = []
    checkpoint = io.BytesIO()
    for epoch in range(epochs):
        losses += _train_epoch(model, opt, sched, data, batch, dev, step_ms, bar)
        if epoch + 1 == half:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                        "rng": accel.random.snapshot(), "epoch": epoch + 1}, checkpoint)
    accuracy = _accuracy(model, data)

    # Resume into fresh objects built from a different seed: only the checkpoint can make them agree.
    accel.random.manual_seed(resume_seed(seed))
    bar = progress("resume", (epochs - half) * steps_per_epoch) if progress else no_progress
    model_b, opt_b, sched_b = _new_run(dev, lr, total_steps)
    checkpoint.seek(0)
    state = torch.load(checkpoint, weights_only=True, map_location="cpu")
    model_b.load_state_dict(state["model"])
    opt_b.load_state_dict(state["optimizer"])
    sched_b.load_state_dict(state["scheduler"])
    accel.random.restore(state["rng"], strict=True)
    resumed: list[float] = []
    for _ in range(state["epoch"], epochs):
        resumed += _train_epoch(model_b, opt_b, sched_b, data, batch, dev, None, bar)
    counts = _kernel_report(installed) if installed else {}
    step_on = statistics.median(step_ms[steps_per_epoch:] or step_ms)
    step_off = _step_ms_without_kernels(dev, data, batch, lr, steps_per_epoch) if installed else None
    wide = _wide_or_why(dev, data) if installed else None
    graphs = _graph_step_times(dev, data, batch, lr)
    reference = losses[half * steps_per_epoch:]
    diffs = [abs(a - b) for a, b in zip(reference, resumed)]
    backend = sel.backend
    return {
        "device": str(dev),
        "backend": backend.name,
        "vendor": backend.vendor,
        "arch": backend.arch(dev.index or 0),
        "accuracy": accuracy,
        "epochs": epochs,
        "steps": len(losses),
        "step_ms": step_on,
        "threads": torch.get_num_threads(),
        "batch": batch,
        "kernels": {"installed": installed, "counts": counts, "step_ms_on": step_on if installed else None,
                    "step_ms_off": step_off, "wide": wide,
                    "why_none": None if installed else _why_no_kernels(kernels, backend.name)},
        "graphs": graphs,
        "final_loss": losses[-1],
        "resume": {
            "equal": len(resumed) == len(reference) and resumed == reference,
            "compared": len(resumed),
            "max_abs_diff": max(diffs) if diffs else 0.0,
            "checkpoint_epoch": half,
        },
        "seconds": time.perf_counter() - t_start,
    }
