"""benchmarks/routed_host_cpu.py runs on a CPU-only machine and reports every op (its numbers are recorded, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accel.testing.pytest_plugin import require_dsl

require_dsl("triton")  # a skip naming the error also when triton is installed but does not import

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "routed_host_cpu.py"


@pytest.mark.once
def test_routed_host_benchmark_reports_each_op():
    code = (f"import runpy, sys, json; sys.argv = ['x', '--json', '--calls', '20']; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert [r["op"] for r in report["rows"]] == ["rms_norm", "layer_norm", "softmax"]
    for row in report["rows"]:
        assert all(row[k] > 0 for k in ("aten_us", "bare_router_us", "routed_us", "routed_memo_off_us")), row


def test_routed_host_benchmark_refuses_a_bad_call_count():
    out = subprocess.run([sys.executable, str(SCRIPT), "--calls", "0"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and "--calls 0: need at least 1" in out.stderr


EAGER = SCRIPT.with_name("eager_autograd_host.py")


@pytest.mark.once
def test_eager_autograd_host_benchmark_times_the_three_paths(tmp_path):
    out = subprocess.run([sys.executable, str(EAGER), "--calls", "20", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln.split("|")[1:3] for ln in (tmp_path / "eager_autograd_host_cpu.md").read_text().splitlines()
            if ln.startswith("| ") and not ln.startswith("| path")]
    assert [name.strip() for name, _ in rows] == ["custom op", "eager_autograd", "bare Function"]
    assert all(float(us) > 0 for _, us in rows)
    bad = subprocess.run([sys.executable, str(EAGER), "--calls", "0"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert bad.returncode == 2 and "--calls 0: need at least 1" in bad.stderr


MODEL = SCRIPT.with_name("model_host_cpu.py")


@pytest.mark.once
def test_model_host_benchmark_times_both_modes_with_accel_s_ops_routed(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed: the benchmark builds an HF Llama")
    out = subprocess.run([sys.executable, str(MODEL), "--steps", "2", "--repeat", "1", "--json", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert [r["what"] for r in report["rows"]] == ["forward", "forward + backward", "one decoder layer, forward"]
    assert all(r["eager_us"] > 0 and r["accel_us"] > 0 for r in report["rows"])
    # the accel mode ran accel's ops (each layer's fused add + norm, RoPE, SwiGLU, the loss), not the model's code
    routed = report["routed"]
    assert routed["add_rms_norm_hf_fwd.triton"] > 0 and routed["rope_fwd.triton"] > 0
    assert routed["swiglu_fwd.triton"] > 0 and routed["linear_cross_entropy_fwd.triton"] > 0
    assert (tmp_path / "model_host_cpu.md").read_text().startswith("# Patched HF Llama's host time")
    bad = subprocess.run([sys.executable, str(MODEL), "--steps", "0"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert bad.returncode == 2 and "need at least 1" in bad.stderr
