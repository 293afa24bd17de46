"""benchmarks/decode_host_cpu.py runs on a CPU-only machine: every mode is timed, every call declined (its numbers are
recorded in benchmarks/results/cpu/, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers is not installed (the benchmark patches an HF Llama)")
from accel.testing.pytest_plugin import require_dsl  # noqa: E402

require_dsl("triton")  # the benchmark imports accel's Triton impls (never launches them)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_host_cpu.py"


@pytest.mark.once
def test_decode_host_benchmark_times_every_mode_and_routes_nothing():
    out = subprocess.run([sys.executable, str(SCRIPT), "--json", "--steps", "3", "--repeat", "1"], capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert [r["mode"] for r in report["rows"]] == ["eager", "accel", "accel, no memo", "norms", "mlp", "rope", "loss"]
    assert all(r["us_per_step"] > 0 for r in report["rows"])
    assert sum(report["routed"].values()) == 0 and sum(report["declined"].values()) > 0


def test_decode_host_benchmark_refuses_bad_counts():
    out = subprocess.run([sys.executable, str(SCRIPT), "--steps", "0"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and "need at least 1" in out.stderr
