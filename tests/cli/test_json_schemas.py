"""``accel info|doctor|demo|kernels|bench --json`` (issue 25): each report names its schema and version, and the real
output of each command validates against the published schema (:mod:`accel.cli.schemas`), in success and in
failure; so does the error-only report."""

from __future__ import annotations

import json

import pytest

import accel
from accel import _probe
from accel.cli import main
from accel.cli.schemas import SCHEMAS, VERSIONS

jsonschema = pytest.importorskip("jsonschema")  # a test dependency ('.[test]')

pytestmark = pytest.mark.cpu


def _report(capsys, argv, code=0):
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def _valid(report):
    name = report["schema"]
    assert report["schema_version"] == VERSIONS[name]
    jsonschema.Draft202012Validator(SCHEMAS[name]).validate(report)
    return name


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])
    assert SCHEMAS[name]["properties"]["schema"] == {"const": name}


@pytest.mark.parametrize("argv, schema", [(["info", "--json"], "accel.info"), (["doctor", "--json"], "accel.doctor"),
                                          (["kernels", "--json"], "accel.kernels")])
def test_the_real_reports_validate(capsys, argv, schema):
    assert _valid(_report(capsys, argv)) == schema


def test_failure_reports_validate_and_carry_the_error(capsys, monkeypatch):
    missing = next((n for n, p in _probe.probes().items() if not p.available), None)
    if missing is None:
        pytest.skip("every backend is available here")
    monkeypatch.setenv("ACCEL_DEVICE", missing)
    accel.clear_cache()
    for command, schema in (("info", "accel.info"), ("doctor", "accel.doctor")):
        report = _report(capsys, [command, "--json"], 1)
        assert _valid(report) == schema and report["error"]["type"] == "BackendUnavailableError"
    monkeypatch.delenv("ACCEL_DEVICE")
    accel.clear_cache()
    if not any(p.available for n, p in _probe.probes().items() if n != "cpu"):
        report = _report(capsys, ["kernels", "--install", "--json"], 1)
        assert _valid(report) == "accel.kernels" and report["installed"] == []
        report = _report(capsys, ["bench", "--json"], 1)  # no GPU: the error report alone
        assert _valid(report) == "accel.error" and report["error"]["command"] == "bench"


def test_a_usage_error_is_an_error_report(capsys):
    report = _report(capsys, ["info", "--json", "--bogus"], 2)
    assert _valid(report) == "accel.error" and report["error"]["type"] == "UsageError"


def test_a_bench_report_validates():
    """The rows of a bench report as accel.kernels.bench.run builds them (tests/cli/test_plot.py's fabricated
    report, in runner.py's row shape); a report missing a row field does not validate."""
    from test_plot import fabricated_report

    report = fabricated_report()
    assert _valid(report) == "accel.bench"
    broken = json.loads(json.dumps(report))
    del broken["rows"][0]["impls"]
    with pytest.raises(jsonschema.ValidationError):
        _valid(broken)


def demo_result(**changes):
    """What :func:`accel.demo.run` returns on a CPU (its keys and types; values made up), with ``changes``."""
    result = {"device": "cpu", "backend": "cpu", "vendor": "cpu", "arch": "x86_64", "accuracy": 0.95, "epochs": 3,
              "steps": 270, "step_ms": 2.5, "threads": 2, "batch": 16,
              "kernels": {"installed": [], "counts": {}, "step_ms_on": None, "step_ms_off": None, "wide": None,
                          "why_none": "the demo runs on cpu"},
              "graphs": None, "final_loss": 0.12,
              "resume": {"equal": True, "compared": 180, "max_abs_diff": 0.0, "checkpoint_epoch": 1},
              "seconds": 30.0}
    result.update(changes)
    return result


def test_accel_demo_json_is_stamped_and_validates_in_success_and_failure(capsys, monkeypatch):
    """The command's report around :func:`accel.demo.run` (a real run: tests/cli/test_cli.py, slow); a report
    missing a field does not validate."""
    from accel import demo

    monkeypatch.setattr(demo, "run", lambda *a, **k: demo_result())
    report = _report(capsys, ["demo", "--json"])
    assert list(report)[:2] == ["schema", "schema_version"]
    assert _valid(report) == "accel.demo" and report["ok"] and report["failures"] == []
    monkeypatch.setattr(demo, "run", lambda *a, **k: demo_result(
        accuracy=0.5, graphs={"captured": False, "eager_ms": 3.0, "graphed_ms": 3.0, "speedup": 1.0,
                              "reason": "runs eagerly: faked"}))
    report = _report(capsys, ["demo", "--json"], 1)
    assert _valid(report) == "accel.demo" and not report["ok"] and "held-out accuracy" in report["failures"][0]
    del report["resume"]
    with pytest.raises(jsonschema.ValidationError):
        _valid(report)


@pytest.mark.slow
@pytest.mark.once
def test_a_real_bench_run_on_the_cpu_validates_and_plots(tmp_path):
    """The benchmark's own CPU smoke run (accel.kernels.bench.run with a CPU device), stamped as ``accel bench
    --json`` stamps it: its rows validate, and the picture draws them."""
    import torch

    from accel.cli.plot import plot_bench
    from accel.cli.schemas import stamp
    from accel.kernels import bench

    report = stamp("accel.bench", bench.run([(64, 128)], ("fp32",), reps=2, budget_s=120,
                                            device=torch.device("cpu"), ops=("rms_norm",)))
    assert report["rows"] and _valid(report) == "accel.bench"
    pytest.importorskip("matplotlib")
    assert plot_bench(report, tmp_path / "b.png").stat().st_size > 0


def test_accel_bench_prints_writes_and_plots_the_stamped_report(capsys, monkeypatch, tmp_path):
    """The command's own path after a run (the run itself needs a GPU: a fabricated report stands in for
    runner.run's): --json prints the stamped report, --out writes it, --plot draws the same report."""
    pytest.importorskip("matplotlib")
    from test_plot import fabricated_report

    from accel.kernels.bench import runner

    raw = fabricated_report()
    for key in ("schema", "schema_version"):
        raw.pop(key)
    monkeypatch.setattr(runner, "run", lambda *a, **k: json.loads(json.dumps(raw)))
    png = tmp_path / "bench.png"
    assert main(["bench", "--json", "--out", str(tmp_path / "out"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out[:out.rindex("}") + 1])
    assert _valid(printed) == "accel.bench" and printed["rows"] == raw["rows"]
    written = json.loads(next((tmp_path / "out").glob("kernels-*.json")).read_text())
    assert written == printed
    assert png.stat().st_size > 0 and f"picture: {png}" in out
