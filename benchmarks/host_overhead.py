"""Host cost per call of accel's runtime and memory functions next to the torch calls they wrap.

One run times every accel function and its torch counterparts on the active backend
(``ACCEL_DEVICE`` picks it; default: the best available), interleaving the candidates
so drift hits all of them alike, and prints a table: ns per call (minimum over
repeats; median in the JSON), the fastest torch call that gives the same answer,
the ratio, the ns added, and whether the issue's target is met:

- every wrapper within 1.1x of the fastest torch call, or at most 100 ns added
  where that call costs under 1 us;
- ``accel.synchronize()`` no slower than ``torch.accelerator.synchronize()``;
- ``accel.memory.allocated()`` at least 5x cheaper than ``torch.cuda.memory_allocated()``;
- a cached ``accel.device()`` under 1 us.

Rows marked "info" time raw candidates (``torch._C`` bindings) for reference.

Usage::

    python benchmarks/host_overhead.py                 # table on stdout
    python benchmarks/host_overhead.py --json          # JSON on stdout
    python benchmarks/host_overhead.py --out benchmarks/results   # + host_overhead-<backend>.{md,json}

Runs in well under 2 minutes (``--budget`` seconds of timing per candidate and repeat).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import accel


@dataclass
class Row:
    name: str
    accel: Callable[[], object] | None
    torch_calls: dict[str, Callable[[], object]] = field(default_factory=dict)
    target: str = "wrapper"  # "wrapper", "sync", "allocated", "device", "info"
    result: dict = field(default_factory=dict)


def _time(fn: Callable[[], object], budget: float) -> float:
    """ns per call of ``fn``: calls in a loop sized to take about ``budget`` seconds."""
    fn()
    n, elapsed = 1, 0.0
    while True:  # calibrate
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        if elapsed >= budget / 10 or n >= 1 << 22:
            break
        n *= 4
    n = max(1, int(n * budget / max(elapsed, 1e-9)))
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def _ctx(cm_factory: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        with cm_factory():
            pass

    return run


def _rows(b: accel.Backend) -> list[Row]:
    m, acc = accel.memory, torch.accelerator
    t = b.torch_device_type
    mod = getattr(torch, t)  # torch.cuda / torch.xpu / torch.mps / torch.cpu
    rows = [Row("accel.device() (cached)", lambda: accel.device(), target="device")]
    if t == "cpu":
        s = accel.current_stream()
        rows += [
            Row("synchronize()", accel.synchronize, {"torch.cpu.synchronize()": torch.cpu.synchronize}),
            Row("device_count()", accel.device_count, {"torch.cpu.device_count()": torch.cpu.device_count}),
            Row("current_device_index()", accel.current_device_index),
            Row("set_device_index(0)", lambda: accel.set_device_index(0)),
            Row("current_stream()", accel.current_stream),
            Row("set_stream(s)", lambda: accel.set_stream(s)),
            Row("with device_index(0)", _ctx(lambda: accel.device_index(0))),
            Row("with stream(s)", _ctx(lambda: accel.stream(s)), {"with torch.cpu.stream(s)": _ctx(
                lambda: torch.cpu.stream(s))}),
        ]
        rows += [Row(f"memory.{n}()", getattr(m, n)) for n in
                 ("allocated", "reserved", "max_allocated", "max_reserved", "stats", "get_memory_info", "empty_cache")]
        return rows

    torch.empty(1 << 20, device=accel.device())  # initialise the runtime and the allocator
    idx = accel.current_device_index()
    s = accel.current_stream()
    rows += [
        Row("synchronize()", accel.synchronize, {"torch.accelerator.synchronize()": acc.synchronize,
                                                 f"torch.{t}.synchronize()": mod.synchronize}, target="sync"),
        Row("synchronize(0)", lambda: accel.synchronize(0), {"torch.accelerator.synchronize(0)":
                                                             lambda: acc.synchronize(0)}),
        Row("device_count()", accel.device_count, {"torch.accelerator.device_count()": acc.device_count,
                                                   f"torch.{t}.device_count()": mod.device_count}),
        Row("current_device_index()", accel.current_device_index, {
            "torch.accelerator.current_device_index()": acc.current_device_index,
            f"torch.{t}.current_device()": getattr(mod, "current_device", acc.current_device_index)}),
        Row("set_device_index(i)", lambda: accel.set_device_index(idx), {
            "torch.accelerator.set_device_index(i)": lambda: acc.set_device_index(idx)}),
        Row("current_stream()", accel.current_stream, {"torch.accelerator.current_stream()": acc.current_stream}),
        Row("set_stream(s)", lambda: accel.set_stream(s), {"torch.accelerator.set_stream(s)": lambda: acc.set_stream(s)}),
    ]
    if hasattr(acc, "device_index"):
        rows.append(Row("with device_index(i)", _ctx(lambda: accel.device_index(idx)), {
            "with torch.accelerator.device_index(i)": _ctx(lambda: acc.device_index(idx))}))
    if hasattr(mod, "stream"):
        rows.append(Row("with stream(s)", _ctx(lambda: accel.stream(s)), {f"with torch.{t}.stream(s)": _ctx(
            lambda: mod.stream(s))}))
    mem = [("allocated", "memory_allocated"), ("reserved", "memory_reserved"),
           ("max_allocated", "max_memory_allocated"), ("max_reserved", "max_memory_reserved")]
    for ours, theirs in mem:
        calls = {f"torch.accelerator.{theirs}()": getattr(acc, theirs)} if hasattr(acc, theirs) else {}
        if hasattr(mod, theirs):
            calls[f"torch.{t}.{theirs}()"] = getattr(mod, theirs)
        rows.append(Row(f"memory.{ours}()", getattr(m, ours), calls, target="allocated" if ours == "allocated"
                        else "wrapper"))
    rows += [
        Row("memory.stats()", m.stats, {"torch.accelerator.memory_stats()": acc.memory_stats}),
        Row("memory.reset_peak()", m.reset_peak, {"torch.accelerator.reset_peak_memory_stats()":
                                                  acc.reset_peak_memory_stats}),
        Row("memory.empty_cache()", m.empty_cache, {"torch.accelerator.empty_cache()": acc.empty_cache}),
    ]
    if hasattr(acc, "get_memory_info"):
        rows.append(Row("memory.get_memory_info()", m.get_memory_info, {
            "torch.accelerator.get_memory_info()": acc.get_memory_info}))
    for raw in ("_cuda_memoryStats", "_accelerator_getDeviceStats", "_xpu_memoryStats"):
        fn = getattr(torch._C, raw, None)
        if fn is not None and (t in raw or "accelerator" in raw):
            rows.append(Row(f"raw torch._C.{raw}(i)", None, {f"torch._C.{raw}(i)": lambda fn=fn: fn(idx)},
                            target="info"))
    return rows


def _verdict(row: Row) -> tuple[str, float | None, float | None, str | None]:
    """``(verdict, ratio, added_ns, reference name)`` for a measured row."""
    ours = row.result.get("accel_ns")
    theirs = {k: v["min_ns"] for k, v in row.result.get("torch", {}).items()}
    if row.target == "info":
        return "info", None, None, None
    if row.target == "device":
        return ("ok" if ours < 1000 else "MISSED") + " (< 1 us)", None, None, None
    if not theirs:
        return "no torch equivalent", None, None, None
    ref = min(theirs, key=theirs.get)
    if row.target == "sync":
        ref = next(k for k in theirs if k.startswith("torch.accelerator"))
        ok = ours <= theirs[ref] * 1.02  # 2% timing noise
        return ("ok" if ok else "MISSED") + " (<= torch.accelerator)", ours / theirs[ref], ours - theirs[ref], ref
    if row.target == "allocated":
        ref = next((k for k in theirs if not k.startswith("torch.accelerator")), ref)
        speedup = theirs[ref] / ours
        return ("ok" if speedup >= 5 else "MISSED") + f" ({speedup:.1f}x cheaper, >= 5x)", ours / theirs[ref], \
            ours - theirs[ref], ref
    ratio, added = ours / theirs[ref], ours - theirs[ref]
    ok = ratio <= 1.1 or (theirs[ref] < 1000 and added <= 100)
    return ("ok" if ok else "MISSED") + " (<= 1.1x or +100 ns)", ratio, added, ref


def run(budget: float, repeats: int) -> dict:
    b = accel.backend()
    rows = _rows(b)
    for row in rows:
        cands = ([("accel", row.accel)] if row.accel else []) + list(row.torch_calls.items())
        samples: dict[str, list[float]] = {k: [] for k, _ in cands}
        for _ in range(repeats):
            for k, fn in cands:  # interleaved: drift hits every candidate alike
                samples[k].append(_time(fn, budget))
        if row.accel:
            row.result["accel_ns"] = min(samples["accel"])
            row.result["accel_median_ns"] = statistics.median(samples["accel"])
        row.result["torch"] = {k: {"min_ns": min(v), "median_ns": statistics.median(v)}
                               for k, v in samples.items() if k != "accel"}
        verdict, ratio, added, ref = _verdict(row)
        row.result.update(verdict=verdict, ratio=ratio, added_ns=added, reference=ref)
    dev_name = b.device_name() if b.name != "cpu" else (platform.processor() or platform.machine())
    return {
        "backend": b.name, "device": dev_name, "torch": torch.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "budget_s": budget, "repeats": repeats,
        "rows": [{"name": r.name, "target": r.target, **r.result} for r in rows],
    }


def markdown(report: dict) -> str:
    lines = [
        f"# Host overhead per call: backend `{report['backend']}` ({report['device']}), torch {report['torch']}, "
        f"Python {report['python']}",
        "",
        f"Minimum over {report['repeats']} interleaved repeats of ~{report['budget_s']} s each (ns per call).",
        "",
        "| accel call | accel ns | fastest torch call (same answer) | torch ns | ratio | added ns | target |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        ours = f"{r['accel_ns']:.0f}" if "accel_ns" in r else "—"
        ref = r.get("reference") or (next(iter(r["torch"]), None) if r["torch"] else None)
        theirs = f"{r['torch'][ref]['min_ns']:.0f}" if ref else "—"
        others = [f"{k}: {v['min_ns']:.0f}" for k, v in r["torch"].items() if k != ref]
        ref_text = f"`{ref}`" if ref else "—"
        if others:
            ref_text += " (also " + "; ".join(f"`{o.split(':')[0]}` {o.split(': ')[1]}" for o in others) + ")"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "—"
        added = f"{r['added_ns']:+.0f}" if r.get("added_ns") is not None else "—"
        lines.append(f"| `{r['name']}` | {ours} | {ref_text} | {theirs} | {ratio} | {added} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--out", type=Path, help="also write host_overhead-<backend>.md and .json into this directory")
    p.add_argument("--budget", type=float, default=0.05, help="seconds of timing per candidate and repeat")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats per row (the minimum is reported)")
    args = p.parse_args(argv)
    report = run(args.budget, args.repeats)
    md = markdown(report)
    print(json.dumps(report, indent=2) if args.json else md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"host_overhead-{report['backend']}"
        stem.with_suffix(".md").write_text(md)
        stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {stem}.md and {stem}.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
