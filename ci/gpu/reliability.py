"""Issue 24 on a real GPU (CUDA or ROCm): the reliability fixes that need the hardware, as one JSON summary.

Usage, from the repository root: ``ACCEL_TUNING_DIR=/tmp/tuning PYTHONPATH=. python3 ci/gpu/reliability.py
[--device cuda] [--json FILE]`` (``ACCEL_TUNING_DIR``: no platformdirs needed on the GPU image), or with accel
installed: ``python ci/gpu/reliability.py``.
Prints the JSON summary on stdout; exit status 0 when every check passes, 1 otherwise, 2 when no
accelerator is active.

Checks:

- ``stream_reentry``: one ``accel.stream(s)`` object entered twice, nested: the inner exit leaves ``s``
  current, the outer exit restores the stream before (item 5). ``torch_stream_reentry`` reports what
  torch's own ``torch.cuda.stream(s)`` does in the same case (information, never a failure).
- ``device_index_reentry``: the same for ``accel.device_index(i)`` (needs 2 devices, else skipped).
- ``graph_abort_h2d``, ``graph_abort_private_generator``: ``accel.graphs.graphed(..., fallback=True)`` of a
  function that copies from pageable host memory / draws from a private generator inside the capture:
  exactly one warning in total, a ``GraphFallbackWarning`` (item 7); every warning is listed.
  ``torch_graph_abort_*`` report the warnings torch's own ``torch.cuda.graph`` gives for the same function.
- ``graph_abort_strict``: ``accel.graphs.Graph`` capturing ``.item()`` raises ``GraphCaptureError`` with no
  warning, and the device is usable afterwards (a capture and replay give the right answer).
- ``quant_nonfinite``: ``accel.quant.quantize`` of a device tensor holding inf/NaN raises
  ``NonFiniteInputError`` in every format; ``nonfinite="saturate"`` gives finite values (item 6).
- ``hidden_devices``: in a child process with ``CUDA_VISIBLE_DEVICES`` set to ``""`` / ``"-1"``
  (``HIP_VISIBLE_DEVICES`` on ROCm), ``accel.device()`` is the CPU with one ``HiddenDevicesWarning``
  naming the variable, and ``accel doctor`` fails its "visible devices" check (item 9).
- ``index_error_count``: ``accel.device("cuda:-1")`` names the device count (item 4).
- ``kernels_arch_cache``: ``accel.kernels.dsl.launch.arch`` answers the device's real arch and is emptied
  by ``accel.clear_cache()`` (item 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

import accel
import accel.graphs as ag
import accel.quant as q
from accel.errors import DeviceIndexError, GraphCaptureError, GraphFallbackWarning, NonFiniteInputError

Result = dict[str, Any]


def _warnings_of(fn: Callable[[], Any]) -> tuple[Any, list[dict[str, str]]]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        out = fn()
    return out, [{"category": w.category.__name__, "message": str(w.message)[:200]} for w in said]


def _same(a: torch.Stream, b: torch.Stream) -> bool:
    # by identity, not ==: torch.cuda.Stream.__eq__ answers False for a plain torch.Stream of the same stream
    return (a.device, a.stream_id) == (b.device, b.stream_id)


def stream_reentry(dev: torch.device) -> Result:
    before = accel.current_stream(dev.index)
    side = torch.cuda.Stream(device=dev)
    ctx = accel.stream(side)
    with ctx:
        with ctx:
            inner = _same(accel.current_stream(dev.index), side)
        after_inner = _same(accel.current_stream(dev.index), side)
    after_outer = _same(accel.current_stream(dev.index), before)
    return {"ok": inner and after_inner and after_outer, "inner_current_is_side": inner,
            "after_inner_exit_side_current": after_inner, "after_outer_exit_restored": after_outer}


def torch_stream_reentry(dev: torch.device) -> Result:
    before = torch.cuda.current_stream(dev)
    side = torch.cuda.Stream(device=dev)
    ctx = torch.cuda.stream(side)
    with ctx, ctx:
        pass
    restored = _same(torch.cuda.current_stream(dev), before)
    torch.cuda.set_stream(before)  # leave the process as it was, whatever torch did
    return {"ok": None, "info": "torch's own StreamContext, for comparison", "after_outer_exit_restored": restored}


def device_index_reentry(dev: torch.device) -> Result:
    if torch.cuda.device_count() < 2:
        return {"ok": None, "skipped": "needs 2 devices"}
    start = accel.current_device_index()
    other = 1 - start if start in (0, 1) else 0
    ctx = accel.device_index(other)
    with ctx:
        with ctx:
            pass
        inner = accel.current_device_index() == other
    outer = accel.current_device_index() == start
    return {"ok": inner and outer, "after_inner_exit": inner, "after_outer_exit_restored": outer}


def _h2d(x: torch.Tensor) -> torch.Tensor:
    return x + torch.ones(x.shape).to(x.device)  # pageable host memory -> device, inside the capture


def _private_generator(x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator(device=x.device)
    g.manual_seed(0)
    return x + torch.rand(x.shape, device=x.device, generator=g)


def graph_abort(dev: torch.device, fn: Callable[[torch.Tensor], torch.Tensor]) -> Result:
    x = torch.zeros(8, device=dev)
    g, said = _warnings_of(lambda: ag.graphed(fn, (x,), warmup=1, fallback=True))
    out = g(torch.ones(8, device=dev))
    torch.cuda.synchronize(dev)
    ours = [w for w in said if w["category"] == GraphFallbackWarning.__name__]
    return {"ok": not g.captured and len(said) == 1 and len(ours) == 1 and bool(torch.isfinite(out).all()),
            "captured": g.captured, "warnings": said, "reason": g.reason[:200]}


def torch_graph_abort(dev: torch.device, fn: Callable[[torch.Tensor], torch.Tensor]) -> Result:
    x = torch.zeros(8, device=dev)
    fn(x)  # warm-up, as graphed does
    torch.cuda.synchronize(dev)

    def capture():
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                fn(x)
        except Exception as exc:  # noqa: BLE001 - what torch raises is the information
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return "captured"

    outcome, said = _warnings_of(capture)
    torch.cuda.synchronize(dev)
    return {"ok": None, "info": "torch.cuda.graph alone, for comparison", "outcome": outcome, "warnings": said}


def graph_abort_strict(dev: torch.device) -> Result:
    x = torch.zeros(8, device=dev)

    def abort():
        graph = ag.Graph(dev)
        try:
            with graph:
                _ = (x + 1).sum().item()
        except GraphCaptureError as exc:
            return str(exc).splitlines()[0][:160]
        return None

    raised, said = _warnings_of(abort)
    ok_after = ag.graphed(lambda t: t * 2, (x,), warmup=1)
    got = ok_after(torch.full((8,), 3.0, device=dev)).clone()
    torch.cuda.synchronize(dev)
    usable = ok_after.captured and torch.equal(got.cpu(), torch.full((8,), 6.0))
    return {"ok": raised is not None and not said and usable, "raised": raised, "warnings": said,
            "usable_after": usable}


FORMATS = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz,
           "fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp4", "nvfp4"]


def quant_nonfinite(dev: torch.device) -> Result:
    rows = {}
    for fmt in FORMATS:
        name = str(fmt).removeprefix("torch.")
        x = torch.linspace(-3, 3, 64, device=dev).reshape(2, 32)
        row: dict[str, Any] = {}
        for bad in (math.inf, math.nan):
            y = x.clone()
            y[1, 7] = bad
            try:
                q.quantize(y, fmt)
                row[f"{bad}"] = "accepted"
            except NonFiniteInputError:
                row[f"{bad}"] = "refused"
            except Exception as exc:  # noqa: BLE001 - a format this torch/device lacks is reported
                row[f"{bad}"] = f"{type(exc).__name__}: {str(exc)[:80]}"
        y = x.clone()
        y[1, 7] = math.inf
        try:
            row["saturate_finite"] = bool(torch.isfinite(q.quantize(y, fmt, nonfinite="saturate").dequantize()).all())
        except Exception as exc:  # noqa: BLE001
            row["saturate_finite"] = f"{type(exc).__name__}: {str(exc)[:80]}"
        rows[name] = row
    ok = all(r["inf"] == "refused" and r["nan"] == "refused" and r["saturate_finite"] is True for r in rows.values())
    return {"ok": ok, "formats": rows}


def hidden_devices(backend_name: str) -> Result:
    var = "HIP_VISIBLE_DEVICES" if backend_name == "rocm" else "CUDA_VISIBLE_DEVICES"
    code = (
        "import json, warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import accel\n"
        "    d = str(accel.device()); d2 = str(accel.device())\n"
        "print(json.dumps({'device': d, 'again': d2, 'warnings': [(x.category.__name__, str(x.message)[:160]) "
        "for x in w if 'accel' in x.category.__module__]}))\n"
    )
    out: dict[str, Any] = {}
    ok = True
    for value in ("", "-1"):
        env = {**os.environ, var: value}
        env.pop("ACCEL_DEVICE", None)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        try:
            seen = json.loads(got.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            seen = {"error": (got.stderr or got.stdout)[-300:]}
        doctor = subprocess.run([sys.executable, "-m", "accel.cli", "doctor", "--json"], env=env,
                                capture_output=True, text=True, timeout=300)
        try:
            check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "visible devices")
        except (ValueError, StopIteration, KeyError):
            check = {"ok": None, "error": (doctor.stderr or doctor.stdout)[-300:]}
        hidden = [w for w in seen.get("warnings", []) if w[0] == "HiddenDevicesWarning"]
        this_ok = (seen.get("device") == "cpu" and len(hidden) == 1 and f"{var}={value!r}" in hidden[0][1]
                   and check.get("ok") is False and doctor.returncode == 1)
        ok = ok and this_ok
        out[f"{var}={value!r}"] = {"ok": this_ok, **seen, "doctor_exit": doctor.returncode, "doctor_check": check}
    return {"ok": ok, **out}


def index_error_count(backend_name: str) -> Result:
    n = accel.device_count()
    try:
        accel.device(f"{backend_name}:-1")
    except DeviceIndexError as exc:
        msg = str(exc)
        return {"ok": f"has {n} visible device(s)" in msg, "message": msg[:240]}
    return {"ok": False, "message": "no error"}


def kernels_arch_cache(dev: torch.device) -> Result:
    from accel.kernels.dsl import launch

    first = launch.arch(dev)
    filled = launch.arch.cache_info().currsize
    accel.clear_cache()
    emptied = launch.arch.cache_info().currsize == 0
    real = accel.backend().arch(dev.index or 0)
    return {"ok": first == real and filled > 0 and emptied, "arch": first, "backend_arch": real,
            "emptied_by_clear_cache": emptied}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="accel device spec (default: best available)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the summary to FILE")
    args = parser.parse_args(argv)
    backend = accel.backend(args.device)
    if backend.torch_device_type == "cpu":
        print(json.dumps({"error": f"no accelerator active ({accel.selection(args.device).reason})"}))
        return 2
    dev = torch.device(backend.torch_device_type, 0)
    checks: dict[str, Callable[[], Result]] = {
        "stream_reentry": lambda: stream_reentry(dev),
        "device_index_reentry": lambda: device_index_reentry(dev),
        "graph_abort_h2d": lambda: graph_abort(dev, _h2d),
        "graph_abort_private_generator": lambda: graph_abort(dev, _private_generator),
        "graph_abort_strict": lambda: graph_abort_strict(dev),
        "quant_nonfinite": lambda: quant_nonfinite(dev),
        "index_error_count": lambda: index_error_count(backend.name),
        "kernels_arch_cache": lambda: kernels_arch_cache(dev),
        "hidden_devices": lambda: hidden_devices(backend.name),
        # torch alone, for comparison, last: an abort through torch.cuda.graph may leave its pool behind
        "torch_stream_reentry": lambda: torch_stream_reentry(dev),
        "torch_graph_abort_h2d": lambda: torch_graph_abort(dev, _h2d),
        "torch_graph_abort_private_generator": lambda: torch_graph_abort(dev, _private_generator),
    }
    results: dict[str, Result] = {}
    for name, run in checks.items():
        try:
            results[name] = run()
        except Exception as exc:  # noqa: BLE001 - a check that raises is a failure; the others still run
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    failed = [n for n, r in results.items() if r.get("ok") is False]
    summary = {
        "accel": accel.__version__, "torch": torch.__version__, "python": platform.python_version(),
        "device": torch.cuda.get_device_name(dev), "backend": backend.name, "arch": backend.arch(0),
        "ok": not failed, "failed": failed, "checks": results,
    }
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
