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


GENERATE = SCRIPT.with_name("generate.py")


@pytest.mark.once
def test_generate_benchmark_writes_one_line_per_mode_and_batch(tmp_path):
    """benchmarks/generate.py --quick on CPU: eager and accel each in its own process, every field of the line, the
    patched model's tokens equal to eager's (no kernel on CPU: the model's own code)."""
    out = tmp_path / "generate.jsonl"
    proc = subprocess.run([sys.executable, str(GENERATE), "--quick", "--modes", "eager,accel", "--batches", "1,2",
                           "--repeat", "1", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["mode"], r["batch"]) for r in rows] == [("eager", 1), ("accel", 1), ("eager", 2), ("accel", 2)]
    fields = {"model", "mode", "batch", "prompt_len", "new_tokens", "ms", "ms_per_token", "prefill_ms", "peak_gib",
              "tokens_equal_to_eager", "transformers", "gpu"}
    assert all(fields <= set(r) and "error" not in r for r in rows)
    assert all(r["tokens_equal_to_eager"] for r in rows)
    bad = subprocess.run([sys.executable, str(GENERATE), "--modes", "eagr", "--out", str(out)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "unknown modes" in bad.stderr
