"""accel.tunable over a recording stand-in for torch.cuda.tunable (CPU builds lack its bindings)."""

import pytest
import torch

import accel.tunable as tunable
from accel import _compat
from accel.errors import FeatureUnavailableError, TunableFileError
from accel.testing import fake_backend


class FakeTunable:
    """The torch.cuda.tunable functions accel calls, with state, recording every call."""

    def __init__(self, read_ok=True):
        self.state = {"enabled": False, "tuning": True, "filename": "tunableop_results.csv"}
        self.calls = []
        self.read_ok = read_ok

    def enable(self, val=True):
        self.calls.append(("enable", val))
        self.state["enabled"] = val

    def tuning_enable(self, val=True):
        self.calls.append(("tuning_enable", val))
        self.state["tuning"] = val

    def set_filename(self, name, insert_device_ordinal=False):
        self.calls.append(("set_filename", name))
        self.state["filename"] = name

    def is_enabled(self):
        return self.state["enabled"]

    def tuning_is_enabled(self):
        return self.state["tuning"]

    def get_filename(self):
        return self.state["filename"]

    def set_max_tuning_duration(self, ms):
        self.calls.append(("duration", ms))

    def set_max_tuning_iterations(self, n):
        self.calls.append(("iterations", n))

    def read_file(self, name=None):
        self.calls.append(("read_file", name))
        return self.read_ok


@pytest.fixture
def fake_tunable(monkeypatch):
    fake = FakeTunable()
    monkeypatch.setattr(torch.cuda, "tunable", fake)
    written = []
    monkeypatch.setattr(_compat, "tunable_writer", lambda: written.append)
    fake.written = written
    return fake


def test_unavailable_off_cuda_and_rocm():
    for vendor in ("cpu", "mps", "xpu"):
        with fake_backend(vendor):
            ok, why = tunable.available()
            assert not ok and vendor in why
            assert tunable.is_enabled() is False
            with pytest.raises(FeatureUnavailableError, match="TunableOp is not available"):
                tunable.enable()
            with pytest.raises(FeatureUnavailableError):
                with tunable.record("x.csv"):
                    pass


@pytest.mark.parametrize("vendor", ["cuda", "rocm"])
def test_enable_and_disable(fake_tunable, vendor):
    with fake_backend(vendor):
        assert tunable.available()[0]
        tunable.enable(tuning=False, filename="t.csv", max_tuning_duration_ms=30, max_tuning_iterations=5)
        assert fake_tunable.state == {"enabled": True, "tuning": False, "filename": "t.csv"}
        assert ("duration", 30) in fake_tunable.calls and ("iterations", 5) in fake_tunable.calls
        assert tunable.is_enabled()
        tunable.disable()
        assert not tunable.is_enabled()


def test_record_tunes_writes_and_restores(fake_tunable, tmp_path):
    path = tmp_path / "gemm.csv"
    with fake_backend("cuda"):
        with tunable.record(path, max_tuning_iterations=3):
            assert fake_tunable.state == {"enabled": True, "tuning": True, "filename": str(path)}
        assert fake_tunable.written == [str(path)]
    assert fake_tunable.state == {"enabled": False, "tuning": True, "filename": "tunableop_results.csv"}


def test_record_restores_on_error(fake_tunable):
    with fake_backend("rocm"), pytest.raises(KeyError):
        with tunable.record("r.csv"):
            raise KeyError("model failed")
    assert fake_tunable.state["enabled"] is False and fake_tunable.written == []


def test_replay_reads_without_tuning_and_restores(fake_tunable, tmp_path):
    path = tmp_path / "gemm.csv"
    path.write_text("Validator,PT_VERSION,2.13.0\n")
    with fake_backend("cuda"):
        with tunable.replay(path):
            assert fake_tunable.state == {"enabled": True, "tuning": False, "filename": str(path)}
            assert ("read_file", str(path)) in fake_tunable.calls
    assert fake_tunable.state == {"enabled": False, "tuning": True, "filename": "tunableop_results.csv"}


def test_replay_missing_or_rejected_file(fake_tunable, tmp_path):
    with fake_backend("cuda"):
        with pytest.raises(TunableFileError, match="no results file"):
            with tunable.replay(tmp_path / "none.csv"):
                pass
        assert fake_tunable.calls == []
        bad = tmp_path / "bad.csv"
        bad.write_text("junk")
        fake_tunable.read_ok = False
        with pytest.raises(FileNotFoundError, match="torch rejected"):
            with tunable.replay(bad):
                pass
    assert fake_tunable.state == {"enabled": False, "tuning": True, "filename": "tunableop_results.csv"}


def test_real_torch_has_the_functions_accel_calls():
    for name in ("enable", "tuning_enable", "set_filename", "get_filename", "is_enabled", "tuning_is_enabled",
                 "read_file", "set_max_tuning_duration", "set_max_tuning_iterations"):
        assert callable(getattr(torch.cuda.tunable, name)), name
