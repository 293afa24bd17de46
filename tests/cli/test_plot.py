"""``accel bench --plot`` (issue 25): the picture of a bench report, drawn from rows shaped as
:func:`accel.kernels.bench.run` makes them; matplotlib stays out of ``import accel``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accel.cli.plot import ORDER, check_plot, plot_bench
from accel.errors import BenchArgumentError, FeatureUnavailableError

pytestmark = pytest.mark.cpu


def _impl(gbs, aten_gbs):
    return {"us": 1e3 / gbs, "gbs": gbs, "pct_ceiling": 100 * gbs / 4240.0, "vs_aten": gbs / aten_gbs,
            "vs_best_peer": None}


def fabricated_report():
    """A report as accel.kernels.bench.run returns it (runner.py's row shape), with made-up GB/s."""
    rows = []
    for op, directions in (("rms_norm", ("fwd", "bwd")), ("softmax", ("fwd",))):
        for direction in directions:
            for m, n in ((4096, 4096), (32768, 4096), (65536, 1024)):
                aten = 2400.0 + m / 100
                impls = {"aten": _impl(aten, aten), "triton": _impl(3900.0, aten), "helion": _impl(3800.0, aten),
                         "routed": _impl(3850.0, aten), "liger": _impl(3700.0, aten)}
                errors = {"quack": "ModuleNotFoundError: No module named 'quack'"}
                rows.append({"op": op, "dtype": "bf16", "shape": [m, n], "direction": direction,
                             "bytes": 2 * m * n * 2, "routed_to": "triton", "errors": errors, "impls": impls})
    return {"schema": "accel.bench", "schema_version": 1, "device": "NVIDIA H200", "arch": "sm_90",
            "backend": "cuda", "torch": "2.11.0+cu130", "versions": {"triton": "3.6.0"}, "copy_ceiling_gbs": 4240.0,
            "installed": ["triton:rms_norm"], "rounds": 1, "peers": {}, "rows": rows, "aten_faster": [],
            "skipped": [], "router_overhead": {}, "routed_counts": {}, "elapsed_s": 12.0}


def test_the_picture_is_a_png_with_one_panel_per_op_direction_and_dtype(tmp_path):
    pytest.importorskip("matplotlib", reason="the optional extra '.[plot]' (tox env cpu installs it)")
    from matplotlib.figure import Figure

    report = fabricated_report()
    drawn: list[Figure] = []
    real_savefig = Figure.savefig

    def savefig(self, *args, **kwargs):
        drawn.append(self)
        return real_savefig(self, *args, **kwargs)

    Figure.savefig = savefig
    try:
        out = plot_bench(report, tmp_path / "bench.png")
    finally:
        Figure.savefig = real_savefig
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    (fig,) = drawn
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["rms_norm fwd, bf16", "rms_norm bwd, bf16", "softmax fwd, bf16"]
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4096x4096", "32768x4096", "65536x1024"]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        # ATen, each DSL, routed, the peers, in that order; quack errored everywhere: no bar, no legend entry
        assert "copy ceiling 4240 GB/s" in labels
        assert [n for n in labels if not n.startswith("copy")] == [
            n for n in ORDER if n in ("aten", "triton", "helion", "routed", "liger")]
        heights = sorted({round(p.get_height(), 3) for p in ax.patches})
        assert 3900.0 in heights and 3850.0 in heights
        ceiling = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(ceiling) == 1 and set(ceiling[0].get_ydata()) == {4240.0}


def test_a_report_without_rows_or_a_bad_path_is_refused(tmp_path):
    report = fabricated_report()
    with pytest.raises(BenchArgumentError, match="measured no row"):
        plot_bench(dict(report, rows=[]), tmp_path / "x.png")
    with pytest.raises(BenchArgumentError, match="ending in .png"):
        check_plot(tmp_path / "x.jpg")
    with pytest.raises(BenchArgumentError, match="does not exist"):
        check_plot(tmp_path / "nowhere" / "x.png")
    assert not list(tmp_path.iterdir())


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(FeatureUnavailableError, match=r"pip install '\.\[plot\]'"):
        check_plot(tmp_path / "x.png")


def test_import_accel_and_the_cli_never_import_matplotlib():
    code = ("import sys, accel, accel.kernels, accel.cli, accel.cli.bench, accel.cli.plot; from accel.cli import "
            "build_parser; build_parser(); import json; print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
