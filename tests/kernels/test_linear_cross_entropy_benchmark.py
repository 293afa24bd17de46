"""``benchmarks/linear_cross_entropy.py --quick`` on CPU: the H200 benchmark's code runs end to end at tiny
shapes and writes its table and JSON (a smoke test; the measurement itself needs the GPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "linear_cross_entropy.py"


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout")
def test_quick_run_writes_the_table_and_json(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("lce_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--device", "cpu", "--reps", "1", "--warmup", "0", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "linear_cross_entropy.json").read_text())
    assert report["command"] == f"python benchmarks/linear_cross_entropy.py --quick --device cpu --reps 1 --warmup 0 " \
                                f"--out {tmp_path}"
    assert [(r["tokens"], r["d"], r["vocab"]) for r in report["rows"]] == module.QUICK_ROWS
    for row in report["rows"]:
        assert {"unfused", "accel", "accel accurate", "accel eager"} <= set(row["results"])
        assert row["targets"]["loss_within_1e-5"] and row["targets"]["grads_within_unfused_error"]
    table = (tmp_path / "linear_cross_entropy.md").read_text()
    assert "| candidate |" in table and "accel eager" in table and "not measured" in table
    assert module.ROWS == [(8192, 2048, 32000), (8192, 2048, 128256), (8192, 4096, 32000), (8192, 4096, 128256)]
    with pytest.raises(SystemExit):
        module.main(["--out", str(tmp_path), "--device", "cpu"])  # the real rows need a GPU
    assert "needs a GPU" in capsys.readouterr().err


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout")
def test_softcap_z_loss_rows_and_json_lines(tmp_path):
    """``--rows``, ``--softcap`` and ``--z-loss`` reach every candidate and the fp32 reference (accel's loss
    within 1e-5 of it), the GEMM rate is measured per row, and ``--jsonl`` appends the loss issue's fields per
    (candidate, row); the CPU skips the GPU peers with their reasons."""
    spec = importlib.util.spec_from_file_location("lce_benchmark_capped", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = tmp_path / "lce.jsonl"
    lines.write_text('{"impl": "earlier run"}\n')
    assert module.main(["--quick", "--device", "cpu", "--reps", "1", "--warmup", "0", "--rows", "40x16x300",
                        "--softcap", "3", "--z-loss", "0.001", "--jsonl", str(lines), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "linear_cross_entropy.json").read_text())
    assert report["softcap"] == 3.0 and report["z_loss"] == 0.001
    (row,) = report["rows"]
    assert (row["tokens"], row["d"], row["vocab"]) == (40, 16, 300) and row["gemm_tflops"] > 0
    assert row["targets"]["loss_within_1e-5"] and row["results"]["accel"]["pct_gemm"] > 0
    assert "lm_head_loss" in row["results"]["accel nn"]["note"] and "softcap 3.0" in row["results"]["unfused"]["note"]
    assert any(s.startswith("quack:") for s in report["skipped"])
    records = [json.loads(x) for x in lines.read_text().splitlines()]
    assert records[0] == {"impl": "earlier run"} and len(records) == 1 + len(row["results"])
    fields = {"impl", "d", "vocab", "n", "ms", "peak_mib", "tflops", "pct_gemm", "loss_rel_err", "gpu"}
    assert all(fields <= set(r) and r["softcap"] == 3.0 for r in records[1:])
    assert module.FULL_ROWS[0] == (8192, 2048, 32000) and len(module.FULL_ROWS) == 12
    for bad in (["--softcap", "0"], ["--z-loss", "-1"]):
        with pytest.raises(SystemExit):
            module.main(["--quick", "--device", "cpu", "--out", str(tmp_path), *bad])


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout")
def test_chunk_sweep_times_each_rows_per_chunk_and_marks_the_rule(tmp_path):
    spec = importlib.util.spec_from_file_location("lce_benchmark_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--chunk-sweep", "--quick", "--device", "cpu", "--reps", "1", "--warmup", "0",
                        "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "linear_cross_entropy-chunks.json").read_text())
    assert report["command"].startswith("python benchmarks/linear_cross_entropy.py --chunk-sweep --quick ")
    for row in report["rows"]:
        assert str(row["model_chunk_rows"]) in row["results"] and str(row["aspect_ratio_rows"]) in row["results"]
        assert all(r["ms"] > 0 for r in row["results"].values())
    assert "| rule |" in (tmp_path / "linear_cross_entropy-chunks.md").read_text()
    assert module.SWEEP_SHAPES[0] == (8192, 1024, 151936)  # Qwen3-style: the 64-row case


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout")
def test_both_runs_unregister_the_kernels_they_installed_however_they_end(monkeypatch):
    """``run`` and ``chunk_sweep`` share one install/unregister (``_lce_kernels``): on a GPU device the kernels
    they install are unregistered after the run, also when it raises (faked here: no GPU is touched)."""
    import torch

    import accel.kernels as ak

    spec = importlib.util.spec_from_file_location("lce_benchmark_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gone: list[str] = []
    monkeypatch.setattr(ak, "install", lambda kernels: [f"{k}.fake" for k in kernels])
    monkeypatch.setattr(ak, "unregister", gone.append)
    with pytest.raises(RuntimeError, match="row failed"), module._lce_kernels(torch.device("cuda")) as installed:
        assert installed == ["linear_cross_entropy.fake"] and gone == []
        raise RuntimeError("row failed")
    assert gone == ["linear_cross_entropy.fake"]
    with module._lce_kernels(torch.device("cpu")) as installed:  # the CPU runs the eager chunk loop
        assert installed == []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "a faked GPU")
    monkeypatch.setattr(module, "_inputs", lambda *a: (_ for _ in ()).throw(RuntimeError("row failed")))
    for run in (lambda: module.run(torch.device("cuda"), torch.bfloat16, [(8, 4, 16)], 1, 0),
                lambda: module.chunk_sweep(torch.device("cuda"), torch.bfloat16, [(8, 4, 16)], [4], 1, 0)):
        gone.clear()
        with pytest.raises(RuntimeError, match="row failed"):
            run()
        assert gone == ["linear_cross_entropy.fake"]
