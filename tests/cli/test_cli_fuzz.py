"""Issue 24 fuzzing: every CLI flag with junk values (hypothesis, bounded CI profile).

Property: whatever text a flag is given, ``accel CMD`` returns exit code 0, 1 or 2 and never lets an
exception out (no traceback); exit code 2 (bad input) comes with one ``accel CMD: error: ...`` line on
stderr, and with ``--json`` the error object on stdout. Nothing heavy runs: the benchmark and the demo's
training are replaced by a stand-in that says "this machine cannot" (exit code 1), so a value that
passes every check ends there.

The findings became the regression tests at the bottom.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

import accel
from accel.cli import main
from accel.errors import KernelUnavailableError

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

#: CI profile: a few seconds. ACCEL_FUZZ_EXAMPLES=5000 for an offline run.
EXAMPLES = int(os.environ.get("ACCEL_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

SPECIAL = ["", " ", "-1", "0", "1", "00", "+1", "1_0", "0x10", "1e3", "1e400", "nan", "inf", "-inf", "\u0663", "\uff11",
           "9" * 30, "cpu", "cpu:0", "cpu:-1", "cuda:-1", "CUDA:1", "gpu", "rocm:x", ":", "cpu:", "x", "4096x4096",
           "0x4", "4x0", "3x4x5", "bf16", "bf16,", ",", "bf16,fp8", "rms_norm", "rmsnorm,softmax", "/dev/null/x",
           "\x00", "a\x00b", "\ud800", "on", "off", "maybe", "--json", "-", "--"]
junk = st.one_of(st.sampled_from(SPECIAL), st.text(max_size=12), st.integers().map(str),
                 st.floats(allow_nan=True, allow_infinity=True).map(repr))

FLAGS = {
    "info": ["--device"],
    "doctor": ["--device"],
    "bench": ["--reps", "--rounds", "--budget", "--shapes", "--dtypes", "--ops", "--out"],
    "demo": ["--device", "--epochs", "--seed", "--kernels"],
}


@pytest.fixture
def no_heavy_work(monkeypatch, tmp_path):
    """The benchmark, the tuner and the demo's training end at once with 'this machine cannot' (exit 1)."""
    from accel.kernels.bench import runner, tune

    from accel import demo

    def cannot(*a, **k):
        raise KernelUnavailableError("stand-in: no benchmark in this test")

    monkeypatch.setattr(runner, "run", cannot)
    monkeypatch.setattr(tune, "run_from_args", cannot)
    monkeypatch.setattr(demo, "load_data", lambda *a, **k: (_ for _ in ()).throw(demo.DemoError("stand-in: no data")))
    monkeypatch.chdir(tmp_path)  # a junk --out that is a valid name lands here


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's --help / --version only
            rc = exc.code
        except BaseException as exc:  # noqa: BLE001 - the property: nothing escapes main
            pytest.fail(f"accel {' '.join(map(repr, argv))}: {type(exc).__name__}: {exc}")
    return rc, out.getvalue(), err.getvalue()


def _check(argv):
    rc, out, err = _run(argv)
    assert rc in (0, 1, 2), (argv, rc, err)
    command = argv[0]
    if rc == 2:
        assert f"accel {command}: error: " in err or "accel: error: " in err, (argv, err)
        if "--json" in argv:
            assert "error" in json.loads(out), (argv, out)
    return rc, out, err


@SETTINGS
@given(command=st.sampled_from(sorted(FLAGS)), data=st.data(), as_json=st.booleans())
def test_every_flag_with_junk(no_heavy_work, command, data, as_json):
    flags = data.draw(st.lists(st.sampled_from(FLAGS[command]), min_size=1, max_size=3, unique=True))
    argv = [command]
    for flag in flags:
        argv += [f"{flag}={data.draw(junk)}"]  # '=': a value that starts with '-' stays a value
    if as_json:
        argv.append("--json")
    accel.clear_cache()
    _check(argv)


# -- findings, kept as regression tests ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["\u0663x4", "+4x4", "1_0x4", "4 x4", "4x\uff11"])
def test_finding_bench_shapes_take_ascii_digits_only(no_heavy_work, shape):
    """int() read '٣x4' as 3x4 and '1_0x4' as 10x4; device indices take ASCII digits only, so do shapes now."""
    rc, _, err = _check(["bench", f"--shapes={shape}"])
    assert rc == 2 and "is not MxN" in err


@pytest.mark.parametrize("out", ["/dev/null/x", "a\x00b"])
def test_finding_bench_out_is_checked_before_the_run(no_heavy_work, out):
    """A bad --out failed only after the whole benchmark (mkdir at the end raised OSError / ValueError)."""
    rc, _, err = _check(["bench", f"--out={out}"])
    assert rc == 2 and "--out" in err and "stand-in" not in err


def test_finding_bench_out_that_is_a_file(no_heavy_work, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("")
    rc, _, err = _check(["bench", f"--out={f}"])
    assert rc == 2 and "cannot create that directory" in err


@pytest.mark.parametrize("seed", [str(2**64), str(-(2**63) - 1), "99999999999999999999999"])
def test_finding_demo_seed_is_checked_before_training(no_heavy_work, seed):
    rc, _, err = _check(["demo", f"--seed={seed}"])
    assert rc == 2 and "seed=" in err and "stand-in" not in err


def test_finding_demo_largest_seed_resumes_inside_the_seed_range():
    """--seed 18446744073709551615 (2**64 - 1, valid) failed after the whole run: the resume seeded seed + 1."""
    from accel import demo

    for seed in (2**64 - 1, -(2**63), 0, -1, 12345):
        other = demo.resume_seed(seed)
        assert -(2**63) <= other <= 2**64 - 1 and other % 2**64 != seed % 2**64


@pytest.mark.parametrize("argv", [["bench", "--dtypes=--"], ["bench", "--shapes=--"], ["bench", "--reps=--"],
                                  ["info", "--device=--"], ["demo", "--epochs=--"]])
def test_finding_double_dash_value_is_bad_input(no_heavy_work, argv):
    """argparse (Python < 3.12.8) gave '--opt=--' an empty list whatever its type: 'list' has no 'split' escaped."""
    rc, _, err = _check(argv)
    assert rc == 2 and "'--' is not a value" in err
