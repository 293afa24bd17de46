"""benchmarks/graphs.py runs end to end (CPU smoke run: tiny models, eager fallback) and writes its report."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "graphs.py"


@pytest.mark.slow
def test_benchmark_smoke_run_writes_json_and_markdown(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_graphs", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mod.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--json"]) == 0
    report = json.loads((tmp_path / "graphs.json").read_text())
    assert json.loads(capsys.readouterr().out) == report
    names = [r["workload"] for r in report["results"]]
    assert names == ["mlp4x256_b8", "transformer_b64"]
    for r in report["results"]:
        assert set(r["ms_per_step"]) == {"eager", "accel"}  # hand-written CUDA graphs need CUDA
        assert not r["captured"] and "CPU has no graph capture" in r["accel_reason"]
        assert all(v > 0 for v in r["ms_per_step"].values())
        # eager and eager-fallback run the same math from the same init
        assert r["numerics_max_abs_loss_diff"]["accel_vs_eager"] < 1e-5
    md = (tmp_path / "graphs.md").read_text()
    assert "| mlp4x256_b8 |" in md and "accel ran eagerly" in md
