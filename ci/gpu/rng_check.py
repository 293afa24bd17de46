"""One-screen check of accel.random on a real GPU (CUDA or ROCm): prints a PASS/FAIL table.

Usage (repository root, accel installed): ``python ci/gpu/rng_check.py [--device cuda]``.
Exit status 0 when every check passes, 1 otherwise, 2 when no accelerator is active.

Checks: get/set_rng_state around ``torch.rand(4, device=...)`` reproduce the draws;
the ``_all`` pair round-trips; snapshot -> torch.save -> torch.load(weights_only=True)
-> restore reproduces Python, NumPy, CPU and device draws; fork_rng restores the
device; Philox seed/offset round-trip; manual_seed reproduces draws; bad states are
refused with the generator unchanged; manual_seed does not initialise the runtime.
"""

from __future__ import annotations

import argparse
import io
import platform
import random
import subprocess
import sys
import warnings

import torch

import accel
import accel._compat
import accel.random as ar
from accel.errors import RngRestoreWarning, RngStateError

try:
    import numpy as np
except ImportError:  # then NumPy's stream is not part of the snapshot, and its row says SKIP
    np = None


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="accel device spec (default: best available)")
    args = parser.parse_args(argv)
    backend = accel.backend(args.device)
    if backend.torch_device_type == "cpu":
        print(f"rng_check: no accelerator active ({accel.selection(args.device).reason}); nothing to check.")
        return 2
    dev = torch.device(backend.torch_device_type, 0)
    n_dev = backend.device_count()
    results: list[tuple[str, bool | None, str]] = []  # ok None: skipped

    def check(name: str):
        def deco(fn):
            try:
                ok, detail = fn()
            except Exception as exc:  # noqa: BLE001 - a check that raises is reported as FAIL, the rest still run
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:110]
            results.append((name, ok, detail))
            return fn

        return deco

    @check("get/set_rng_state around torch.rand(4)")
    def _():
        state = ar.get_rng_state()
        a = torch.rand(4, device=dev)
        ar.set_rng_state(state)
        b = torch.rand(4, device=dev)
        return torch.equal(a, b), f"{state.numel()} B state; {_fmt(a.tolist())} == {_fmt(b.tolist())}"

    @check("get/set_rng_state(\"<type>:0\") explicit index")
    def _():
        state = ar.get_rng_state(f"{dev.type}:0")
        a = torch.rand(4, device=dev)
        ar.set_rng_state(state, f"{dev.type}:0")
        return torch.equal(a, torch.rand(4, device=dev)), "device given as a string"

    @check("get_rng_state_all / set_rng_state_all")
    def _():
        states = ar.get_rng_state_all()
        a = [torch.rand(4, device=torch.device(dev.type, i)) for i in range(len(states))]
        ar.set_rng_state_all(states)
        b = [torch.rand(4, device=torch.device(dev.type, i)) for i in range(len(states))]
        return len(states) == n_dev and all(map(torch.equal, a, b)), f"{len(states)} device(s), draws reproduced"

    def draws() -> dict[str, list[float]]:
        out = {"python": [random.random()], "cpu": torch.rand(2).tolist(), dev.type: torch.rand(4, device=dev).tolist()}
        if np is not None:
            out["numpy"] = [float(np.random.rand())]
        return out

    snap_holder: dict[str, object] = {}

    @check("snapshot -> save/load(weights_only) -> restore")
    def _():
        torch.rand(8, device=dev)
        buf = io.BytesIO()
        torch.save(ar.snapshot(), buf)
        snap_holder["bytes"] = buf.tell()
        expected = draws()
        buf.seek(0)
        loaded = torch.load(buf, weights_only=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RngRestoreWarning)
            report = ar.restore(loaded, strict=True)
        got = draws()
        snap_holder["got"], snap_holder["expected"] = got, expected
        return got == expected, f"{snap_holder['bytes']} B; restored {', '.join(report['restored'])}"

    for stream in ("python", "numpy", "cpu", dev.type):
        @check(f"  snapshot/restore reproduces {stream} draws")
        def _(stream=stream):
            if stream == "numpy" and np is None:
                return None, "NumPy is not installed here"
            got, exp = snap_holder.get("got", {}), snap_holder.get("expected", {})
            return stream in got and got[stream] == exp[stream], _fmt(got.get(stream, []))

    @check("fork_rng restores CPU + device generators")
    def _():
        before = ar.get_rng_state(), torch.get_rng_state()
        with ar.fork_rng():
            torch.rand(100, device=dev), torch.rand(100)
        return torch.equal(before[0], ar.get_rng_state()) and torch.equal(before[1], torch.get_rng_state()), "ok"

    @check("Philox seed/offset round trip")
    def _():
        ar.manual_seed(7)
        torch.rand(4, device=dev)
        st = ar.get_philox_state()
        a = torch.rand(4, device=dev)
        ar.set_philox_state(st)
        return torch.equal(a, torch.rand(4, device=dev)) and st.seed == 7, f"seed={st.seed} offset={st.offset}"

    @check("manual_seed reproduces CPU + device draws")
    def _():
        ar.manual_seed(1234)
        a = torch.rand(4, device=dev), torch.rand(4)
        ar.manual_seed(1234)
        ok = torch.equal(a[0], torch.rand(4, device=dev)) and torch.equal(a[1], torch.rand(4))
        return ok and ar.initial_seed() == 1234, f"initial_seed={ar.initial_seed()}"

    @check("bad states refused, generator unchanged")
    def _():
        before = ar.get_rng_state()
        bad_offset = before.clone()
        bad_offset[8] = 2
        refused = []
        for label, bad in (("cpu state", torch.get_rng_state()), ("on device", before.to(dev)),
                           ("int64", before.to(torch.int64)), ("offset 2", bad_offset)):
            try:
                ar.set_rng_state(bad)
            except RngStateError:
                refused.append(label)
        return len(refused) == 4 and torch.equal(before, ar.get_rng_state()), f"refused: {', '.join(refused)}"

    @check("manual_seed/seed leave the runtime uninitialised")
    def _():
        code = ("import torch, accel.random; accel.random.manual_seed(0); accel.random.seed(); "
                "print(torch.cuda.is_initialized())")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
        return out.stdout.strip() == "False", f"is_initialized() -> {out.stdout.strip() or out.stderr.strip()[-80:]}"

    path = ("torch.accelerator.random" if accel._compat.has_accelerator_random()
            else f"torch.{dev.type} (no torch.accelerator.random)")
    name = backend.device_name(0) if hasattr(backend, "device_name") else backend.name
    np_version = np.__version__ if np is not None else "not installed"
    print(f"accel.random GPU check: torch {torch.__version__}, Python {platform.python_version()}, numpy {np_version}")
    print(f"backend {backend.name} ({name}, {backend.arch(0)}), {n_dev} device(s); read path: {path}")
    width = max(len(r[0]) for r in results)
    for label, ok, detail in results:
        print(f"  {'SKIP' if ok is None else 'PASS' if ok else 'FAIL'}  {label:<{width}}  {detail}")
    failed = sum(ok is False for _, ok, _ in results)
    skipped = sum(ok is None for _, ok, _ in results)
    print(f"{len(results) - failed - skipped}/{len(results)} checks passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
