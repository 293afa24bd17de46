"""Where a training step's device sits idle, and which host op launched each kernel: one profiled step.

:func:`trace` runs ``step`` once under ``torch.profiler`` (CPU and CUDA activities), exports the Chrome trace
and reads it back:

- ``idle_ms``: the device's idle time inside the step (between its first and last kernel, all streams merged),
  and ``gaps``: the largest idle stretches, each with what the host was doing while the device waited (the
  innermost CPU op open on the launching thread when the gap began) and the op that launched the kernel after;
- ``idle_by_next_op``: the idle time summed by the top-level op that launched the kernel after each gap of
  5 us or more: ``phase: op``, the phase from a ``record_function("step.<phase>")`` label the step sets, the op
  the autograd node or else the outermost op;
- ``kernels_by_op``: per kernel name, the CPU op that launched it (innermost ``aten::`` op and the enclosing
  autograd node), with device ms: which model code a copy or a cat comes from;
- ``host_ms``: the host's wall time from the step's first CPU op to its last;
- ``lead_ms``: the host's time from the step's first CPU op to the launch of its first kernel (the device
  waits through it), and ``lead_ops``: the CPU ops finished by then, ms summed by name (a nested op counts
  in its own name and in its parents').

Used by ``benchmarks/real_models.py --trace``; CUDA only (a CPU device has no kernels to place).
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = ["trace"]

_API = ("cuda_runtime", "cuda_driver")
#: Calls that block the host until the device catches up (a name equal to one, or starting with it and "_").
_SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::item",
               "aten::_local_scalar_dense", "cudaMemcpy")


def trace(step: Callable[[], Any], device, *, top: int = 15) -> dict[str, Any]:
    """One more call of ``step`` under the profiler; the summary described in the module docstring (ms)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize(device)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    return summarise(events, top=top)


def summarise(events: list[dict[str, Any]], *, top: int = 15) -> dict[str, Any]:
    """The summary of a Chrome trace's events (``traceEvents``), as :func:`trace` returns it."""
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                  "gpu_memset")),
                     key=lambda e: e["ts"])
    # runtime and driver calls (Triton launches through the driver API) carry the kernels' correlation ids
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("ph") == "X" and e.get("cat") in _API and "correlation" in e.get("args", {})}
    ops_by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function", *_API):
            ops_by_tid.setdefault(e["tid"], []).append(e)
    for ops in ops_by_tid.values():
        ops.sort(key=lambda e: e["ts"])
    starts = {tid: [e["ts"] for e in ops] for tid, ops in ops_by_tid.items()}
    # ops open for long (a phase label, a loss op looping over chunks) start far before the window scanned
    long_ops = {tid: [e for e in ops if e["dur"] >= 500] for tid, ops in ops_by_tid.items()}

    def stack(tid, ts) -> list[str]:
        """The CPU ops open on ``tid`` at ``ts``, outermost first."""
        ops = ops_by_tid.get(tid, [])
        i = bisect.bisect_right(starts.get(tid, []), ts)
        near = ops[max(0, i - 400):i]
        open_ = {id(e): e for e in (*near, *long_ops.get(tid, ())) if e["ts"] <= ts <= e["ts"] + e["dur"]}
        return [e["name"] for e in sorted(open_.values(), key=lambda e: (e["ts"], -e["dur"]))]

    def launcher(kernel) -> tuple[list[str], Any, float | None]:
        rt = runtime.get(kernel.get("args", {}).get("correlation"))
        if rt is None:
            return [], None, None
        return stack(rt["tid"], rt["ts"]), rt["tid"], rt["ts"]

    # the caller's phase labels, from every thread: the autograd engine launches backward kernels from its
    # own device thread, while the "step.backward" label is open on the caller's
    phases = sorted(((e["ts"], e["ts"] + e["dur"], e["name"]) for ops in ops_by_tid.values() for e in ops
                     if e["name"].startswith("step.")))

    def phase_at(ts) -> str:
        return next((name for start, end, name in phases if start <= ts <= end), "")

    def top_level(names: list[str], ts=None) -> str:
        """``phase: op``: the caller's ``step.*`` label open at ``ts`` (``record_function``, any thread) and the
        autograd node or else the outermost op under it."""
        phase = next((n for n in names if n.startswith("step.")), "") or (phase_at(ts) if ts is not None else "")
        rest = [n for n in names if not n.startswith("step.")]
        node = next((n for n in rest if n.startswith("autograd::engine::evaluate_function")), None)
        op = (node.removeprefix("autograd::engine::evaluate_function: ") if node
              else rest[0] if rest else "?")
        return f"{phase}: {op}" if phase else op

    def innermost_aten(names: list[str]) -> str:
        return next((n for n in reversed(names) if n.startswith(("aten::", "accel::", "torch_nn::"))),
                    names[-1] if names else "?")

    gaps, by_next, per_kernel = [], {}, {}
    idle = 0.0
    end = kernels[0]["ts"] + kernels[0]["dur"] if kernels else 0.0
    for k in kernels:
        names, tid, launched = launcher(k)
        key = (k["name"][:90], innermost_aten(names), top_level(names, launched))
        per_kernel[key] = per_kernel.get(key, 0.0) + k["dur"]
        gap = k["ts"] - end
        if gap > 0:
            idle += gap
            if gap >= 5:
                nxt = top_level(names, launched)
                by_next[nxt] = by_next.get(nxt, 0.0) + gap
                host = stack(tid, end) if tid is not None else []
                gaps.append({"ms": gap / 1e3, "host_during": host[-1] if host else "?",
                             "sync": any(n == s or n.startswith(s + "_") for n in host for s in _SYNC_NAMES),
                             "next_kernel": k["name"][:70], "next_op": innermost_aten(names), "next_top": nxt})
        end = max(end, k["ts"] + k["dur"])
    cpu = [e for ops in ops_by_tid.values() for e in ops if e.get("cat") == "cpu_op"]
    host_ms = ((max(e["ts"] + e["dur"] for e in cpu) - min(e["ts"] for e in cpu)) / 1e3) if cpu else None
    # the lead: host time from the step's first op to the first kernel's launch (the device idles through it)
    lead_ms, lead_ops = None, {}
    if cpu and kernels:
        first_launch = launcher(kernels[0])[2]
        if first_launch is not None:
            begin = min(e["ts"] for e in cpu)
            lead_ms = round((first_launch - begin) / 1e3, 3)
            for e in cpu:
                if e["ts"] + e["dur"] <= first_launch:
                    lead_ops[e["name"]] = lead_ops.get(e["name"], 0.0) + e["dur"]
    device_ms = (end - kernels[0]["ts"]) / 1e3 if kernels else None
    gaps.sort(key=lambda g: -g["ms"])
    rows = sorted(per_kernel.items(), key=lambda kv: -kv[1])
    return {"device_span_ms": None if device_ms is None else round(device_ms, 3),
            "idle_ms": round(idle / 1e3, 3), "host_ms": None if host_ms is None else round(host_ms, 3),
            "lead_ms": lead_ms,
            "lead_ops": {k: round(v / 1e3, 3) for k, v in sorted(lead_ops.items(), key=lambda kv: -kv[1])[:12]},
            "gaps": [{**g, "ms": round(g["ms"], 3)} for g in gaps[:top]],
            "idle_by_next_op": {k: round(v / 1e3, 3) for k, v in sorted(by_next.items(), key=lambda kv: -kv[1])[:25]},
            "kernels_by_op": [[name, op, node, round(us / 1e3, 3)] for (name, op, node), us in rows[:40]]}
