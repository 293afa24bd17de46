"""Every command x every error kind reports the same way (issue 25 item 3): ``accel CMD: error: <what failed>``
on stderr, then, for what this machine lacks, every probe one per line, and the fix; exit code 2 for bad input,
1 for what this machine cannot do; with ``--json`` the same text as ``{"error": {"type", "message", "command"}}``
on stdout. No traceback, ever."""

from __future__ import annotations

import json

import pytest

import accel
from accel import _probe
from accel.cli import main

pytestmark = pytest.mark.cpu


def _unavailable() -> str | None:
    return next((n for n, p in _probe.probes().items() if not p.available), None)


def _no_accelerator() -> bool:
    return not any(p.available for n, p in _probe.probes().items() if n != "cpu")


def _probe_block(lines: list[str]) -> list[str]:
    """The lines after ``Every probe:``: one per registered backend, ``  name: available|unavailable - reason``."""
    start = lines.index("Every probe:") + 1
    names = list(_probe.probes())
    block = lines[start:start + len(names)]
    for name, line in zip(names, block):
        assert line.startswith(f"  {name}: available - ") or line.startswith(f"  {name}: unavailable - "), line
    return block


# (argv, environment, exit code, error type, whether every probe is listed, a phrase of the fix)
USAGE = [
    ([cmd, "--bogus"], {}, 2, "UsageError", False, f"See 'accel {cmd} --help'.")
    for cmd in ("info", "doctor", "demo", "kernels", "bench")
] + [
    (["demo", "--epochs", "1"], {}, 2, "DemoArgumentError", False, "pass e.g. --epochs"),
    (["bench", "--shapes", "4096"], {}, 2, None, False, None),
]
MISSPELT = [
    (["info", "--device", "cdua"], {}, 2, "UnknownBackendError", False, "Valid names: cuda, rocm, xpu, mps, cpu"),
    (["doctor", "--device", "cdua"], {}, 2, "UnknownBackendError", False, "Valid names: cuda, rocm, xpu, mps, cpu"),
    (["demo", "--device", "cdua"], {}, 2, "UnknownBackendError", False, "Valid names: cuda, rocm, xpu, mps, cpu"),
    (["info"], {"ACCEL_DEVICE": "cdua"}, 2, "UnknownBackendError", False, "Fix the spelling, or unset ACCEL_DEVICE"),
    (["doctor"], {"ACCEL_DEVICE": "cdua"}, 2, "UnknownBackendError", False, "Fix the spelling, or unset ACCEL_DEVICE"),
    (["demo"], {"ACCEL_DEVICE": "cdua"}, 2, "UnknownBackendError", False, "Fix the spelling, or unset ACCEL_DEVICE"),
]


def _check(capsys, monkeypatch, argv, env, code, error_type, probes, fix):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    accel.clear_cache()
    assert main(argv) == code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    command = argv[0]
    head = f"accel {command} --tune" if "--tune" in argv else f"accel {command}"  # a message naming its own source
    assert lines and lines[0].startswith(f"{head}: error: "), err
    assert sum(line.startswith("accel ") and ": error: " in line for line in lines) == 1, err  # one head line
    assert "Traceback" not in err
    if probes:
        _probe_block(lines)
    else:
        assert "Every probe:" not in lines, err
    if fix:
        assert fix in err, err
    # the same error as JSON on stdout; the message is the text after the head, probes and fix included
    assert main([*argv, "--json"]) == code
    out, err = capsys.readouterr()
    report = json.loads(out)
    error = report["error"]
    assert error["command"] == command
    if error_type:
        assert error["type"] == error_type, error
    assert err.startswith(f"{head}: error: {error['message']}"), (err, error)


@pytest.mark.parametrize("argv, env, code, error_type, probes, fix", USAGE + MISSPELT,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_input_is_one_error_with_its_fix(capsys, monkeypatch, argv, env, code, error_type, probes, fix):
    _check(capsys, monkeypatch, argv, env, code, error_type, probes, fix)


@pytest.mark.parametrize("command", ["info", "doctor", "demo"])
@pytest.mark.parametrize("where", ["--device", "ACCEL_DEVICE"])
def test_an_unavailable_backend_lists_every_probe_and_the_fix(capsys, monkeypatch, command, where):
    """``ACCEL_DEVICE=cuda accel info`` on a CPU machine: exit 1, every probe, the fix; the same for doctor
    (which still prints its checks) and demo (which stops before training)."""
    missing = _unavailable()
    if missing is None:
        pytest.skip("every backend is available here: no unavailable backend to ask for")
    argv, env = ([command, "--device", missing], {}) if where == "--device" else ([command], {"ACCEL_DEVICE": missing})
    fix = "ACCEL_DEVICE" if where == "ACCEL_DEVICE" else "cpu"
    _check(capsys, monkeypatch, argv, env, 1, "BackendUnavailableError", True, fix)


@pytest.mark.parametrize("argv, fix", [
    (["bench"], "needs an NVIDIA, AMD or Intel GPU"),
    (["bench", "--tune", "--ops", "rms_norm"], "run it there"),
    (["kernels", "--install"], "the built-in table says why"),
])
def test_no_accelerator_lists_every_probe_and_the_fix(capsys, monkeypatch, argv, fix):
    if not _no_accelerator():
        pytest.skip("an accelerator is available here")
    _check(capsys, monkeypatch, argv, {}, 1, "KernelUnavailableError", True, fix)


def test_a_missing_optional_dependency_names_the_install_command(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    _check(capsys, monkeypatch, ["demo", "--device", "cpu"], {}, 1, "DemoError", False, "pip install scikit-learn")


def test_a_failed_doctor_check_is_reported_on_stderr_with_its_fix(capsys, monkeypatch):
    """A failing check other than selection (here: a bad ACCEL_KERNELS_VERIFY): exit 1, an error line naming the
    check, its detail and fix (stderr was empty before issue 25)."""
    _check(capsys, monkeypatch, ["doctor"], {"ACCEL_KERNELS_VERIFY": "yes"}, 1, "CheckFailed", False,
           "set each to one of its valid values")
    monkeypatch.setenv("ACCEL_KERNELS_VERIFY", "yes")
    main(["doctor"])
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "accel doctor: error: 1 check(s) failed: accel environment variables."
    assert "ACCEL_KERNELS_VERIFY='yes' (valid: 0, 1)" in err
