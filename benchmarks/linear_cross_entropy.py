"""Linear cross-entropy (LM head + loss), forward + backward: accel's chunked op beside Liger-Kernel's
``LigerFusedLinearCrossEntropyLoss`` and the unfused ``linear`` + ``F.cross_entropy`` (fp32 logits, as Hugging
Face computes them), in one run on one GPU.

Per row (bf16, tokens 8192, d 2048/4096, vocab 32000/128256) and candidate:

- time: median ms of ``reps`` forward+backward calls (each candidate timed once per round, candidates in
  turn, the order shuffled each round, so drift and a neighbour's heat hit all alike), gradients w.r.t. the hidden states and the head's weight;
- peak memory: ``max_memory_allocated`` during one call minus ``memory_allocated`` before it (inputs and
  weights excluded; the gradients the call creates included, for every candidate alike);
- accuracy against the fp32 reference (``linear`` + ``cross_entropy`` on fp32 copies of the same bf16
  inputs): the loss's relative error, and the gradients' max abs error beside the unfused path's.

Candidates: ``unfused``; the peers of :mod:`lce_peers` where they import and their gates hold (``liger``,
Liger's Triton kernel; ``liger sm90``, its Hopper CuTeDSL kernel; ``quack``, QuACK's CuTeDSL chunked loss);
``accel`` (the op
``torch.ops.accel.linear_cross_entropy`` with accel's Triton kernel installed: ``accel.kernels.install``;
acc_policy ``compact``, the default on GPUs); ``accel nn`` (the public
``accel.nn.functional.linear_cross_entropy`` with default options, its host check of the target range
included: what a user's call costs); ``accel accurate`` (fp32 logits and weight-gradient
accumulator); ``accel eager`` (the same chunk loop with the kernels disabled: what the fused row step buys);
``accel rows`` / ``accel tiles`` (GPU only: the Triton impl called directly with its row-chunked or its
vocabulary-tiled schedule forced, so both are timed whichever the default picks).
The accel loss is read as the op returns it (fp32; ``accel.nn.functional`` casts it to the input dtype, as
torch does). Torch 2.15's own CuTeDSL override of its chunked op needs torch 2.15 with CuTeDSL on the GPU;
where the running torch lacks it (the H200 image has torch 2.11) it is not measured, and the report says so.

Per row, the bf16 GEMM rate of the logits matmul alone (``[tokens, d] @ [d, vocab]``, median of ``reps``) is
measured in the same run: each candidate's effective TFLOP/s (``6 * tokens * d * vocab / time``: the three
GEMMs) is reported beside it as ``pct_gemm``. ``--softcap CAP`` and ``--z-loss W`` time the loss with Gemma 2's
final-logit softcapping and PaLM's z-loss in every candidate that has them (the peers without them are skipped
with their reason); the fp32 reference then includes both.

Usage::

    python benchmarks/linear_cross_entropy.py --out benchmarks/results/h100 --jsonl benchmarks/results/h100/lce.jsonl
    python benchmarks/linear_cross_entropy.py --rows 8192x2048x256000,16384x4096x128256 --softcap 30 --out ...
    python benchmarks/linear_cross_entropy.py --quick --out /tmp/lce      # tiny shapes, any device (smoke test)

Writes ``linear_cross_entropy.md`` (the table) and ``linear_cross_entropy.json`` (every number) in ``--out``, and
with ``--jsonl`` appends one line per (candidate, row): ``impl, d, vocab, n, ms, peak_mib, tflops, pct_gemm,
loss_rel_err, gpu`` (plus the dtype, softcap, z-loss, torch and triton versions).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROWS = [(8192, 2048, 32000), (8192, 2048, 128256), (8192, 4096, 32000), (8192, 4096, 128256)]
#: ``--grid full``: tokens {8192, 16384} x d {2048, 4096} x vocab {32000, 128256, 256000} (Llama 2, Llama 3, Gemma).
FULL_ROWS = [(n, d, v) for n in (8192, 16384) for d in (2048, 4096) for v in (32000, 128256, 256000)]
QUICK_ROWS = [(64, 32, 500), (48, 16, 300)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peers():
    """:mod:`lce_peers`, loaded from this file's folder (this module is also loaded by path, by the tests)."""
    spec = importlib.util.spec_from_file_location("lce_peers", Path(__file__).with_name("lce_peers.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _written_out(z: torch.Tensor, t: torch.Tensor, softcap: float | None, z_loss: float) -> torch.Tensor:
    """The loss on materialised logits ``z`` (fp32): the cap, ``cross_entropy``, the z-loss over counted tokens."""
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    loss = F.cross_entropy(z, t)
    if z_loss:
        kept = (t != -100).to(z.dtype)
        loss = loss + z_loss * (torch.logsumexp(z, -1) ** 2 * kept).sum() / kept.sum()
    return loss


def _candidates(device: torch.device, dtype: torch.dtype, n: int, d: int, c: int, skipped: list[str],
                softcap: float | None = None, z_loss: float = 0.0):
    """``name -> (step(x, w, t) -> loss, note)``: each step runs the forward and backward of one candidate."""
    lce_peers = _peers()
    import accel.kernels as ak
    from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions

    out = {}

    def unfused(x, w, t):
        loss = _written_out(F.linear(x, w).float(), t, softcap, z_loss)
        loss.backward()
        return loss

    out["unfused"] = (unfused, "linear in the input dtype, logits .float(), F.cross_entropy"
                      + (f", softcap {softcap}" if softcap is not None else "") + (f", z-loss {z_loss}" if z_loss else ""))
    for name, (step, note) in (("liger", lce_peers.liger(device, softcap, z_loss)),
                               ("liger sm90", lce_peers.liger_sm90(device, dtype, n, c, softcap, z_loss)),
                               ("quack", lce_peers.quack(device, n, d, c, softcap, z_loss))):
        if step is None:
            skipped.append(note)
        else:
            out[name] = (step, note)
    resolved = LinearCrossEntropyOptions().resolve(n, d, c, dtype, device)
    cap = float(softcap or 0.0)

    def accel_step(policy: str, acc: torch.dtype):
        def step(x, w, t):
            loss = torch.ops.accel.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0,
                                                        resolved.batch_chunk_size, policy, acc, False, True, True,
                                                        False, cap, z_loss)[0]
            loss.backward()
            return loss
        return step

    acc = resolved.acc_dtype
    note = (f"accel::linear_cross_entropy, {resolved.acc_policy}, chunk {resolved.batch_chunk_size}, "
            f"acc {str(acc).removeprefix('torch.')}")
    out["accel"] = (accel_step(resolved.acc_policy, acc), note)
    import accel.nn
    from accel.nn import functional as accel_f

    options = accel.nn.LinearCrossEntropyOptions()  # torch's own class where accel.nn hands out torch's function

    if softcap is None and not z_loss:
        def accel_nn(x, w, t):
            loss = accel_f.linear_cross_entropy(x, w, t, options=options)
            loss.backward()
            return loss

        out["accel nn"] = (accel_nn, "accel.nn.functional.linear_cross_entropy(options=accel.nn."
                                     "LinearCrossEntropyOptions()): the public function, its target range check "
                                     "included")
    else:
        def accel_nn(x, w, t):
            loss = accel_f.lm_head_loss(x, w, t, softcap=softcap, z_loss=z_loss, options=options)
            loss.backward()
            return loss

        out["accel nn"] = (accel_nn, "accel.nn.functional.lm_head_loss(softcap=..., z_loss=..., options=accel.nn."
                                     "LinearCrossEntropyOptions()): the public function, its range check included")
    if acc != dtype:
        out["accel accurate"] = (accel_step("accurate", acc), "acc_policy accurate: fp32 logits and grad_W scratch")
    eager = accel_step(resolved.acc_policy, acc)

    def accel_eager(x, w, t):
        with ak.disabled():
            return eager(x, w, t)

    out["accel eager"] = (accel_eager, "the same chunk loop, accel's kernels disabled (eager row step)")
    if device.type != "cpu":
        from accel.kernels.ops.linear_cross_entropy import triton_impl

        for schedule in ("rows", "tiles"):
            out[f"accel {schedule}"] = (_forced(triton_impl, schedule, resolved, cap, z_loss),
                                        f"accel's Triton impl called with schedule={schedule!r} (not routed)")
    return out


def _forced(triton_impl, schedule: str, resolved, softcap: float = 0.0, z_loss: float = 0.0):
    """A step calling accel's Triton impl with one schedule forced, its gradients set as backward would (the
    loss's gradient is 1), so the two schedules are timed side by side whatever the default picks."""
    def step(x, w, t):
        loss, gx, gw, _ = triton_impl.linear_cross_entropy(
            x.detach(), w.detach(), t, None, None, "mean", -100, 0.0, resolved.batch_chunk_size,
            resolved.acc_policy, resolved.acc_dtype, False, True, True, False, softcap, z_loss, schedule=schedule)
        x.grad, w.grad = gx, gw
        return loss
    return step


def _fp32_reference(x, w, t, softcap=None, z_loss=0.0):
    xs, ws = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    loss = _written_out(F.linear(xs, ws), t, softcap, z_loss)
    gx, gw = torch.autograd.grad(loss, (xs, ws))
    return float(loss.detach()), gx, gw


def _time_rows(candidates, args, device, reps: int, warmup: int) -> dict[str, list[float]]:
    x, w, t = args
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(warmup):
        for step, _note in candidates.values():
            x.grad = w.grad = None
            step(x, w, t)
    _sync(device)
    names = list(candidates)
    for rep in range(reps):
        # a new order each round (seeded): no candidate always runs after the same one (a light, host-bound
        # candidate before a matmul-bound one leaves the GPU cooler and its clocks higher; a rotation of one
        # cycle would keep every candidate's predecessor)
        order = names[:]
        random.Random(rep).shuffle(order)
        for name in order:
            step = candidates[name][0]
            x.grad = w.grad = None
            _sync(device)
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step(x, w, t)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                step(x, w, t)
                times[name].append((time.perf_counter() - began) * 1e3)
    return times


def _peak(step, args, device) -> int | None:
    """Bytes allocated at the peak of one call beyond what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    x, w, t = args
    x.grad = w.grad = None
    _sync(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    loss = step(x, w, t)
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del loss
    x.grad = w.grad = None
    return int(peak)


def _routed(name_prefix: str = "linear_cross_entropy") -> dict[str, int]:
    import accel.kernels as ak

    return {o.name: o.routed for o in ak.overrides() if o.name.startswith(name_prefix)}


@contextlib.contextmanager
def _lce_kernels(device: torch.device):
    """accel's linear cross-entropy kernels installed for the block (none on the CPU): yields their names, and
    unregisters them after the block, however it ends."""
    import accel.kernels as ak

    installed = ak.install(kernels=["linear_cross_entropy"]) if device.type != "cpu" else []
    try:
        yield installed
    finally:
        for name in installed:
            ak.unregister(name)


def _inputs(device: torch.device, dtype: torch.dtype, n: int, d: int, c: int):
    """One row's inputs, seeded (0): hidden states ``[n, d]`` and head weight ``[c, d]`` in ``dtype``, both
    requiring grad, and int64 targets ``[n]`` in ``[0, c)``."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, d, device=device, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(c, d, device=device, generator=g) / d**0.5).to(dtype).requires_grad_()
    t = torch.randint(0, c, (n,), device=device, generator=g)
    return x, w, t


def _gemm_tflops(x: torch.Tensor, w: torch.Tensor, device: torch.device, reps: int, warmup: int) -> float:
    """The logits GEMM alone (``x @ w.T`` into a preallocated output), median TFLOP/s over ``reps`` calls: the
    rate the loss's three GEMMs could reach on this device, measured beside the candidates."""
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=device)
    xs, wt = x.detach(), w.detach().t()
    times = _time_rows({"gemm": (lambda *_: torch.mm(xs, wt, out=out), "")}, (x, w, None), device, reps, warmup)
    return 2 * x.shape[0] * x.shape[1] * w.shape[0] / (statistics.median(times["gemm"]) * 1e-3) / 1e12


def run(device: torch.device, dtype: torch.dtype, rows, reps: int, warmup: int, softcap: float | None = None,
        z_loss: float = 0.0) -> dict:
    from accel import _compat
    from accel._compat import nn as compat_nn

    with _lce_kernels(device) as installed:
        report = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "reps": reps,
            "installed": installed, "triton": _compat.module_version("triton"), "rows": [], "skipped": [],
            "notes": [], "softcap": softcap, "z_loss": z_loss,
        }
        if not any(op.startswith("torch_nn") for op in compat_nn.torch_nn_chunked_ops()) or \
                "_linear_cross_entropy_batch_chunked" not in compat_nn.upstream_overrides():
            report["notes"].append(
                f"torch {torch.__version__} here has no CuTeDSL override of "
                f"torch_nn::_linear_cross_entropy_batch_chunked (torch 2.15 with CuTeDSL installed); upstream's "
                f"kernel is not measured.")
        if device.type == "cpu":
            report["notes"].append("CPU run: accel's kernels are not installed here (accel rows run the eager chunk "
                                   "loop); no peak memory (CUDA statistics only). A smoke test, not a measurement.")
        for n, d, c in rows:
            x, w, t = _inputs(device, dtype, n, d, c)
            t[:: 17] = -100  # some ignored rows, as a padded batch has
            skipped = report["skipped"]
            candidates = _candidates(device, dtype, n, d, c, skipped, softcap, z_loss)
            ref_loss, ref_gx, ref_gw = _fp32_reference(x, w, t, softcap, z_loss)
            before = _routed()
            results = {}
            for name, (step, note) in candidates.items():
                x.grad = w.grad = None
                loss = step(x, w, t)
                gx, gw = x.grad.float(), w.grad.float()
                results[name] = {
                    "note": note,
                    "loss_rel_err": abs(float(loss.detach()) - ref_loss) / abs(ref_loss),
                    "grad_input_err": float((gx - ref_gx).abs().max()),
                    "grad_weight_err": float((gw - ref_gw).abs().max()),
                }
                del loss, gx, gw
            report.setdefault("routed", {}).update({k: v - before.get(k, 0) for k, v in _routed().items()})
            del ref_gx, ref_gw
            x.grad = w.grad = None
            for name, (step, _note) in candidates.items():
                results[name]["peak_bytes"] = _peak(step, (x, w, t), device)
            times = _time_rows(candidates, (x, w, t), device, reps, warmup)
            gemm = _gemm_tflops(x, w, device, reps, warmup)
            for name in candidates:
                ms = statistics.median(times[name])
                tflops = 6 * n * d * c / (ms * 1e-3) / 1e12
                results[name].update(ms=ms, ms_all=times[name], tflops=tflops, pct_gemm=100 * tflops / gemm)
            report["rows"].append({"tokens": n, "d": d, "vocab": c, "gemm_tflops": gemm, "results": results,
                                   "targets": _targets(results, c)})
            del x, w, t
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return report


#: CuTeDSL peers: accel's time must be at most the best of these (where they run).
CUTE_PEERS = ("liger sm90", "quack")


def _targets(results: dict, vocab: int) -> dict:
    """The loss issue's targets for one row: time <= 0.9x Liger's Triton path and <= 1.0x the best CuTeDSL peer's;
    >= 75 % of the GEMM rate at vocabularies >= 128256; peak at most the best peer's, or up to 1.1x where that
    buys >= 10 % time against it (the chunk rule's allowance); loss within 1e-5 relative of fp32; gradients
    within the unfused path's error."""
    a, u, lg = results.get("accel"), results.get("unfused"), results.get("liger")
    pub = results.get("accel nn")
    out = {"loss_within_1e-5": a["loss_rel_err"] <= 1e-5,
           "grads_within_unfused_error": (a["grad_input_err"] <= u["grad_input_err"] * 1.0001 + 1e-12
                                          and a["grad_weight_err"] <= u["grad_weight_err"] * 1.0001 + 1e-12),
           "pct_gemm": a["pct_gemm"]}
    if vocab >= 128256:
        out["pct_gemm_at_least_75"] = a["pct_gemm"] >= 75
    if lg is not None:
        out["time_vs_liger"] = a["ms"] / lg["ms"]
        out["time_at_most_0.9_liger"] = out["time_vs_liger"] <= 0.9
        if pub is not None:
            out["public_time_vs_liger"] = pub["ms"] / lg["ms"]
    cute = [results[k] for k in CUTE_PEERS if k in results]
    if cute:
        best = min(cute, key=lambda r: r["ms"])
        out["time_vs_best_cutedsl"] = a["ms"] / best["ms"]
        out["time_at_most_best_cutedsl"] = out["time_vs_best_cutedsl"] <= 1.0
    peers = [r for k, r in results.items() if k in ("liger", *CUTE_PEERS) and r.get("peak_bytes")]
    if a["peak_bytes"] is not None and peers:
        best = min(peers, key=lambda r: r["peak_bytes"])
        ratio = a["peak_bytes"] / best["peak_bytes"]
        out["peak_vs_best_peer"] = ratio
        out["peak_within_rule"] = ratio <= 1.0 or (ratio <= 1.1 and a["ms"] <= 0.9 * best["ms"])
    if a["peak_bytes"] and u["peak_bytes"]:
        out["unfused_peak_over_accel"] = u["peak_bytes"] / a["peak_bytes"]
    return out


def json_lines(report: dict) -> list[dict]:
    """One record per (candidate, row): the fields the loss issue asks for, and what they were measured with."""
    lines = []
    for row in report["rows"]:
        for name, r in row["results"].items():
            lines.append({"impl": name, "d": row["d"], "vocab": row["vocab"], "n": row["tokens"], "ms": r["ms"],
                          "peak_mib": None if r["peak_bytes"] is None else r["peak_bytes"] / 2**20,
                          "tflops": r["tflops"], "pct_gemm": r["pct_gemm"], "loss_rel_err": r["loss_rel_err"],
                          "gpu": report["device"], "gemm_tflops": row["gemm_tflops"], "dtype": report["dtype"],
                          "softcap": report["softcap"], "z_loss": report["z_loss"], "torch": report["torch"],
                          "triton": report["triton"]})
    return lines


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.0f}"


def markdown(report: dict, command: str) -> str:
    lines = [f"# Linear cross-entropy, forward + backward ({report['dtype']})", "",
             (f"{report['device']}, torch {report['torch']}, triton {report['triton']}, median of {report['reps']} "
              f"reps. Command: `{command}`"), "",
             (f"Softcap {report['softcap']}, z-loss {report['z_loss']}. TFLOP/s: 6 N d V / time; % GEMM: of the "
              f"logits GEMM's own rate, measured in this run (in the row's header)."), "",
             "| tokens | d | vocab | candidate | ms | TFLOP/s | % GEMM | peak MiB | loss rel err | grad_input err | "
             "grad_W err |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        lines.append(f"| {row['tokens']} | {row['d']} | {row['vocab']} | *GEMM alone* | | "
                     f"{row['gemm_tflops']:.1f} | 100 | | | | |")
        for name, r in row["results"].items():
            lines.append(f"| {row['tokens']} | {row['d']} | {row['vocab']} | {name} | {r['ms']:.2f} | "
                         f"{r['tflops']:.1f} | {r['pct_gemm']:.0f} | {_mib(r['peak_bytes'])} | {r['loss_rel_err']:.1e} "
                         f"| {r['grad_input_err']:.1e} | {r['grad_weight_err']:.1e} |")
    lines += ["", "Targets per row (accel against Liger, the CuTeDSL peers and the unfused path):", ""]
    for row in report["rows"]:
        shown = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row["targets"].items())
        lines.append(f"- {row['tokens']}x{row['d']}, vocab {row['vocab']}: {shown}")
    if report.get("routed"):
        lines += ["", "Routed calls: " + ", ".join(f"{k} {v}" for k, v in report["routed"].items())]
    for note in report["notes"] + [f"skipped: {s}" for s in dict.fromkeys(report["skipped"])]:
        lines += ["", note]
    return "\n".join(lines) + "\n"


#: ``--chunk-sweep``'s shapes (tokens, hidden, vocab): Qwen3-style, HF Llama (d 2048), GPT-2 (d 1536) as the
#: real-model benchmark runs them; and the rows per chunk tried (the rule's choice is marked in the table).
SWEEP_SHAPES = [(8192, 1024, 151936), (8192, 2048, 32000), (8192, 1536, 50257)]
SWEEP_CHUNKS = [64, 256, 512, 1024, 2048, 4096]


def chunk_sweep(device: torch.device, dtype: torch.dtype, shapes, chunks, reps: int, warmup: int) -> dict:
    """accel's chunked loss (forward + backward, ``acc_policy="auto"``) per rows-per-chunk at each shape: ms,
    peak memory over the inputs, and which size :func:`accel.nn.linear_cross_entropy.model_chunk_rows` picks (the
    rule the transformers integration uses; what this sweep is to confirm or correct on the GPU)."""
    from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions, model_chunk_rows

    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "reps": reps, "rows": []}
    with _lce_kernels(device):
        for n, d, c in shapes:
            x, w, t = _inputs(device, dtype, n, d, c)
            resolved = LinearCrossEntropyOptions().resolve(n, d, c, dtype, device)
            chosen = model_chunk_rows(n, d, c, dtype, device)

            def step_of(rows):
                def step(x, w, t):
                    loss = torch.ops.accel.linear_cross_entropy(x, w, t, None, None, "mean", -100, 0.0, rows,
                                                                resolved.acc_policy, resolved.acc_dtype, False, True,
                                                                True, False)[0]
                    loss.backward()
                    return loss
                return step

            sizes = sorted({*[k for k in chunks if k <= n], chosen, resolved.batch_chunk_size})
            candidates = {f"{k}": (step_of(k), "") for k in sizes}
            peaks = {name: _peak(step, (x, w, t), device) for name, (step, _) in candidates.items()}
            times = _time_rows(candidates, (x, w, t), device, reps, warmup)
            report["rows"].append({"tokens": n, "d": d, "vocab": c, "acc_policy": resolved.acc_policy,
                                   "model_chunk_rows": chosen, "aspect_ratio_rows": resolved.batch_chunk_size,
                                   "results": {k: {"ms": statistics.median(times[k]), "peak_bytes": peaks[k]}
                                               for k in candidates}})
            del x, w, t
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return report


def sweep_markdown(report: dict, command: str) -> str:
    lines = [f"# accel linear cross-entropy: rows per chunk ({report['device']}, {report['dtype']}, fwd+bwd)", "",
             f"`{command}`; torch {report['torch']}; median of {report['reps']} calls. `rule`: the size "
             f"`model_chunk_rows` picks (the transformers integration's default); `aspect`: torch's aspect-ratio "
             f"rule's.", "", "| tokens x d x vocab | rows | ms | peak MiB over inputs | |", "|---|---:|---:|---:|---|"]
    for r in report["rows"]:
        for k, v in r["results"].items():
            tags = [t for t, size in (("rule", r["model_chunk_rows"]), ("aspect", r["aspect_ratio_rows"]))
                    if int(k) == size]
            lines.append(f"| {r['tokens']} x {r['d']} x {r['vocab']} | {k} | {v['ms']:.3f} | {_mib(v['peak_bytes'])} "
                         f"| {', '.join(tags)} |")
    return "\n".join(lines) + "\n"


def _shapes(text: str) -> list[tuple[int, int, int]]:
    """``"8192x2048x128256,..."`` as ``[(8192, 2048, 128256), ...]`` (argparse type: a bad one is a usage error)."""
    try:
        shapes = [tuple(int(v) for v in part.split("x")) for part in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 3 or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(f"{text!r}: give tokens x hidden x vocab, e.g. 8192x2048x128256")
    return shapes  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for linear_cross_entropy.{md,json}")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 reps: a smoke test (any device)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu (with --quick)")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--reps", type=int, default=None, help="timed calls per candidate (default 10; 2 with --quick)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 3; 1 with --quick)")
    parser.add_argument("--chunk-sweep", action="store_true",
                        help="time accel's loss per rows-per-chunk (SWEEP_CHUNKS) at the real models' head shapes "
                             "(SWEEP_SHAPES; --quick: QUICK_ROWS): linear_cross_entropy-chunks.{md,json}")
    parser.add_argument("--rows", type=_shapes, metavar="NxDxV,...",
                        help="tokens x hidden x vocab rows to measure (default: ROWS; --grid full: FULL_ROWS)")
    parser.add_argument("--grid", choices=("default", "full"), default="default",
                        help="full: tokens {8192, 16384} x d {2048, 4096} x vocab {32000, 128256, 256000}")
    parser.add_argument("--softcap", type=float, default=None, help="final-logit cap in every candidate that has one")
    parser.add_argument("--z-loss", type=float, default=0.0, help="z-loss weight in every candidate that has one")
    parser.add_argument("--jsonl", type=Path, default=None,
                        help="append one JSON line per (candidate, row) to this file (benchmarks/results/<gpu>/)")
    parser.add_argument("--sweep-shapes", type=_shapes, metavar="NxDxV,...",
                        help="with --chunk-sweep: these tokens x hidden x vocab shapes instead of SWEEP_SHAPES "
                             "(e.g. 8192x2048x128256)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu" and not args.quick:
        parser.error("no CUDA device: the measurement needs a GPU (pass --quick for a CPU smoke test)")
    reps = args.reps if args.reps is not None else (2 if args.quick else 10)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    if reps < 1 or warmup < 0:
        parser.error(f"--reps {reps} / --warmup {warmup}: need reps >= 1 and warmup >= 0")
    if args.softcap is not None and not args.softcap > 0:
        parser.error(f"--softcap {args.softcap}: give a cap > 0 (Gemma 2 uses 30)")
    if args.z_loss < 0:
        parser.error(f"--z-loss {args.z_loss}: give a weight >= 0 (PaLM used 1e-4)")
    command = "python benchmarks/linear_cross_entropy.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.chunk_sweep:
        report = chunk_sweep(device, DTYPES[args.dtype],
                             args.sweep_shapes or (QUICK_ROWS if args.quick else SWEEP_SHAPES),
                             [8, 16, 32] if args.quick else SWEEP_CHUNKS, reps, warmup)
        stem, to_markdown = "linear_cross_entropy-chunks", sweep_markdown
    else:
        rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS if args.grid == "full" else ROWS)
        report = run(device, DTYPES[args.dtype], rows, reps, warmup, args.softcap, args.z_loss)
        stem, to_markdown = "linear_cross_entropy", markdown
        if args.jsonl is not None:
            args.jsonl.parent.mkdir(parents=True, exist_ok=True)
            with args.jsonl.open("a") as fh:
                fh.writelines(json.dumps(line) + "\n" for line in json_lines(report))
    report["command"] = command
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    text = to_markdown(report, command)
    (args.out / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
