"""Device selection: order, caching, errors, ROCm-as-cuda, fork safety."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import accel
from accel.errors import BackendUnavailableError, DeviceIndexError, InvalidDeviceError, UnknownBackendError
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu


def test_best_available_on_cpu_only_torch():
    with fake_backend("cpu"):
        assert accel.device() == torch.device("cpu")
        assert accel.backend().name == "cpu"
        assert accel.selection().source == "best available"


@pytest.mark.parametrize("vendor,device_type", [("cuda", "cuda"), ("rocm", "cuda"), ("xpu", "xpu"), ("mps", "mps")])
def test_best_available_prefers_accelerator(vendor, device_type):
    with fake_backend(vendor, device_count=2 if vendor != "mps" else 1):
        assert accel.backend().name == vendor
        assert accel.device() == torch.device(device_type)


def test_env_var_and_explicit_argument_order(monkeypatch):
    with fake_backend("cuda", device_count=2):
        monkeypatch.setenv("ACCEL_DEVICE", "cpu")
        assert accel.device() == torch.device("cpu")
        assert accel.selection().source == "ACCEL_DEVICE"
        # an explicit argument beats ACCEL_DEVICE
        assert accel.device("cuda:1") == torch.device("cuda", 1)
        assert accel.selection("cuda:1").source == "argument"
        monkeypatch.setenv("ACCEL_DEVICE", "")  # empty means unset
        assert accel.device() == torch.device("cuda")


def test_env_cpu_on_gpu_machine_does_not_touch_cuda(monkeypatch):
    monkeypatch.setenv("ACCEL_DEVICE", "cpu")
    with fake_backend("cuda", device_count=1):
        assert accel.device() == torch.device("cpu")
    # in a fresh process (earlier tests in this one may have used a real GPU):
    r = _run("import torch, accel; print(accel.device(), torch.cuda.is_initialized())", ACCEL_DEVICE="cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cpu", "False"]


def test_rocm_is_selected_from_torch_version_hip_not_the_device_string():
    with fake_backend("rocm", arch="gfx942:sramecc+:xnack-", device_count=8):
        b = accel.backend("cuda")  # torch calls AMD GPUs "cuda"
        assert b.name == "rocm" and b.vendor == "AMD"
        assert accel.backend(torch.device("cuda", 3)).name == "rocm"
        assert accel.device("rocm:7") == torch.device("cuda", 7)
        assert b.arch() == "gfx942"  # not "sm_94" although the capability tuple is (9, 4)


def test_index_out_of_range_names_device_count():
    with fake_backend("cuda", device_count=1):
        with pytest.raises(DeviceIndexError, match=r"has 1 visible device\(s\), so valid indices are 0..0"):
            accel.device("cuda:1")
        with pytest.raises(ValueError):  # DeviceIndexError is a ValueError
            accel.device(torch.device("cuda", 5))
    with pytest.raises(DeviceIndexError, match="Indices count from 0: pass 0 or leave the index out"):
        accel.device(-1)  # a negative index is not "too large": no advice to pick a smaller one


def test_bad_index_text():
    with pytest.raises(DeviceIndexError, match="not a non-negative integer"):
        accel.device("cpu:x")


def test_unknown_name_lists_valid_names(monkeypatch):
    with pytest.raises(UnknownBackendError, match="Valid names: cuda, rocm, xpu, mps, cpu"):
        accel.device("cdua")
    monkeypatch.setenv("ACCEL_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"ACCEL_DEVICE='tpu': unknown backend 'tpu'"):
        accel.device()
    monkeypatch.delenv("ACCEL_DEVICE")
    for word, meant in (("hip", "'rocm'"), ("nvidia", "'cuda'"), ("Intel", "'xpu'"), ("metal", "'mps'")):
        with pytest.raises(UnknownBackendError, match=f"Did you mean {meant}\\?"):
            accel.device(word)
    with pytest.raises(UnknownBackendError) as info:
        accel.device("cdua")
    assert "Did you mean" not in str(info.value)  # a typo gets the list, not a guess


def test_unavailable_lists_every_probe_and_what_to_do():
    with fake_backend("cpu"):
        with pytest.raises(BackendUnavailableError) as info:
            accel.device("cuda")
    msg = str(info.value)
    for name in ("cuda", "rocm", "xpu", "mps", "cpu"):
        assert f"\n  {name}: " in msg
    assert "(e.g. 'cpu')" in msg and "ACCEL_DEVICE" not in msg  # the argument was wrong: fix the argument


def test_unavailable_from_the_environment_says_which_variable(monkeypatch):
    monkeypatch.setenv("ACCEL_DEVICE", "cuda")
    with fake_backend("cpu"):
        with pytest.raises(BackendUnavailableError, match=r"(?s)ACCEL_DEVICE='cuda'.*e.g. ACCEL_DEVICE=cpu"):
            accel.device()


def test_unknown_backend_advice_follows_where_the_spec_came_from(monkeypatch):
    with pytest.raises(accel.errors.UnknownBackendError, match="pass no device to pick the best available"):
        accel.device("foo")
    monkeypatch.setenv("ACCEL_DEVICE", "foo")
    accel.clear_cache()
    with pytest.raises(accel.errors.UnknownBackendError, match="unset ACCEL_DEVICE to pick the best available"):
        accel.device()


@pytest.mark.parametrize("bad", [3.5, object(), [0], True])
def test_non_device_object_is_a_type_error(bad):
    with pytest.raises(InvalidDeviceError, match="A device spec is None, a str"):
        accel.device(bad)


def test_int_index_uses_best_backend(monkeypatch):
    with fake_backend("xpu", device_count=2):
        assert accel.device(1) == torch.device("xpu", 1)
        with pytest.raises(DeviceIndexError):
            accel.device(2)
        monkeypatch.setenv("ACCEL_DEVICE", "cpu")  # an int index applies to the ACCEL_DEVICE backend
        assert accel.device(0) == torch.device("cpu", 0)
        with pytest.raises(DeviceIndexError, match="backend 'cpu' has 1 visible"):
            accel.device(1)


def test_selection_is_cached_and_clear_cache_reprobes(monkeypatch):
    calls = []
    real = accel.backends.cpu.CpuBackend.probe.__func__

    def counting(cls):
        calls.append(1)
        return real(cls)

    monkeypatch.setattr(accel.backends.cpu.CpuBackend, "probe", classmethod(counting))
    accel.clear_cache()
    accel.device("cpu")
    accel.device("cpu")
    accel.device()
    assert len(calls) == 1
    accel.clear_cache()
    accel.device("cpu")
    assert len(calls) == 2


def test_cached_device_returns_same_object():
    assert accel.device("cpu") is accel.device("cpu")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                          timeout=120, check=False)


def test_import_and_device_do_not_initialise_cuda_or_import_dsls():
    r = _run("""
        import sys, torch, accel
        accel.device(); accel.backend(); accel.probes()
        print(torch.cuda.is_initialized(), 'triton' in sys.modules, 'helion' in sys.modules)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False"]


@pytest.mark.cuda
def test_real_fork_after_selection_can_use_cuda_in_child():
    """A process that selected its device can still fork workers that use CUDA."""
    r = _run("""
        import os, torch, accel
        dev = accel.device()
        assert dev.type == 'cuda', dev
        assert not torch.cuda.is_initialized()
        pid = os.fork()
        if pid == 0:
            x = torch.ones(4, device=dev) * 2
            os._exit(0 if float(x.sum()) == 8.0 else 3)
        _, status = os.waitpid(pid, 0)
        print('child exit', os.waitstatus_to_exitcode(status))
        y = torch.arange(3, device=dev).sum().item()
        print('parent sum', y)
    """)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout and "parent sum 3" in r.stdout
