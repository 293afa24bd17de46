"""Issue 24 item 9: an accelerator build whose devices the visible-devices variables all hide is not silently
a CPU machine: the default selection falls back to CPU with one warning naming the variables and their
values, ``accel info`` shows it and ``accel doctor`` fails that check with the fix."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import accel
from accel.cli import main
from accel.errors import HiddenDevicesWarning
from accel.testing import fake_backend

VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
CASES = [("cuda", "CUDA_VISIBLE_DEVICES", ""), ("cuda", "CUDA_VISIBLE_DEVICES", "-1"),
         ("rocm", "HIP_VISIBLE_DEVICES", "-1"), ("rocm", "ROCR_VISIBLE_DEVICES", ""),
         ("rocm", "CUDA_VISIBLE_DEVICES", "-1"), ("xpu", "ZE_AFFINITY_MASK", ""), ("xpu", "ZE_AFFINITY_MASK", "-1")]


@pytest.fixture(autouse=True)
def _no_visible_variables(monkeypatch):
    for k in VARIABLES:
        monkeypatch.delenv(k, raising=False)


def _hidden(monkeypatch, vendor, var, value):
    monkeypatch.setenv(var, value)
    return fake_backend(vendor, device_count=0)


@pytest.mark.parametrize(("vendor", "var", "value"), CASES)
def test_default_selection_falls_back_with_one_warning(monkeypatch, vendor, var, value):
    with _hidden(monkeypatch, vendor, var, value), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert accel.device() == torch.device("cpu")
        assert accel.device() == torch.device("cpu")  # cached: no second warning
        assert accel.backend().name == "cpu"
        reason = accel.selection().reason
    hidden = [w for w in said if issubclass(w.category, HiddenDevicesWarning)]
    assert len(hidden) == 1, [str(w.message) for w in said]
    message = str(hidden[0].message)
    assert f"{var}={value!r}" in message and f"the {vendor} devices" in message and "falls back to cpu" in message
    assert f"{var}={value!r}" in reason
    assert hidden[0].filename == __file__  # points at the caller


@pytest.mark.parametrize("explicit", ["argument", "env"])
def test_an_explicit_cpu_choice_does_not_warn(monkeypatch, explicit):
    with _hidden(monkeypatch, "cuda", "CUDA_VISIBLE_DEVICES", ""), warnings.catch_warnings():
        warnings.simplefilter("error", HiddenDevicesWarning)
        if explicit == "env":
            monkeypatch.setenv("ACCEL_DEVICE", "cpu")
            accel.clear_cache()
            assert accel.device() == torch.device("cpu")
        else:
            assert accel.device("cpu") == torch.device("cpu")


def test_no_warning_without_a_variable_or_with_visible_devices(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error", HiddenDevicesWarning)
        with fake_backend("cuda", device_count=0):  # a CUDA build on a machine without GPUs: CPU, quietly
            assert accel.device() == torch.device("cpu")
            assert accel.selection().reason.startswith("best available: cpu")
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        with fake_backend("cuda", device_count=1):
            assert accel.device() == torch.device("cuda")
        with fake_backend("cpu"):  # a CPU build: the variable hides nothing torch could use
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
            accel.clear_cache()
            assert accel.device() == torch.device("cpu")


def test_probe_records_the_hiding_variables(monkeypatch):
    with _hidden(monkeypatch, "rocm", "HIP_VISIBLE_DEVICES", "-1"):
        monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
        accel.clear_cache()
        p = accel.probes()["rocm"]
        assert not p.available
        assert p.hidden_by == (("HIP_VISIBLE_DEVICES", "-1"), ("ROCR_VISIBLE_DEVICES", ""))
        assert accel.probes()["cuda"].hidden_by == ()  # a ROCm build does not serve the cuda backend


def test_info_shows_it(monkeypatch, capsys):
    with _hidden(monkeypatch, "cuda", "CUDA_VISIBLE_DEVICES", "-1"), warnings.catch_warnings():
        warnings.simplefilter("error", HiddenDevicesWarning)  # info reports it as a fact, not a warning
        assert main(["info", "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert info["hidden_devices"] == {"cuda": {"CUDA_VISIBLE_DEVICES": "-1"}}
        assert "CUDA_VISIBLE_DEVICES='-1'" in info["selection"]["reason"]
        assert main(["info"]) == 0
        assert "hidden: every cuda device of this torch build, by CUDA_VISIBLE_DEVICES='-1'" in capsys.readouterr().out


def test_doctor_fails_the_check_with_the_fix(monkeypatch, capsys):
    with _hidden(monkeypatch, "xpu", "ZE_AFFINITY_MASK", ""):
        assert main(["doctor", "--json"]) == 1
        report = json.loads(capsys.readouterr().out)
    check = next(c for c in report["checks"] if c["name"] == "visible devices")
    assert not check["ok"] and "ZE_AFFINITY_MASK=''" in check["detail"] and "fell back to cpu" in check["detail"]
    assert "unset ZE_AFFINITY_MASK" in check["fix"] and "ACCEL_DEVICE=cpu" in check["fix"]


def test_doctor_passes_the_check_when_cpu_is_chosen_on_purpose(monkeypatch, capsys):
    with _hidden(monkeypatch, "cuda", "CUDA_VISIBLE_DEVICES", ""):
        monkeypatch.setenv("ACCEL_DEVICE", "cpu")
        accel.clear_cache()
        main(["doctor", "--json"])
        report = json.loads(capsys.readouterr().out)
    check = next(c for c in report["checks"] if c["name"] == "visible devices")
    assert check["ok"] and "explicit" in check["detail"]


def test_doctor_passes_when_nothing_is_hidden(capsys):
    main(["doctor", "--json"])
    check = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "visible devices")
    assert check["ok"]
