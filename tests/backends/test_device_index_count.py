"""Issue 24 item 4: every device-index error names the device count (``cuda:-1`` said only "not a
non-negative integer", not how many devices there are)."""

from __future__ import annotations

import pytest
import torch

import accel
import accel.memory
import accel.random
from accel.errors import DeviceIndexError
from accel.testing import fake_backend

SPECS = ["cuda:-1", "cuda:x", "cuda:01", "cuda:2", "cuda:99", "CUDA:-3"]


@pytest.mark.parametrize("spec", SPECS)
def test_argument_index_error_names_the_count(spec):
    with fake_backend("cuda", device_count=2), pytest.raises(DeviceIndexError, match=r"2 visible device\(s\)") as info:
        accel.device(spec)
    assert "0..1" in str(info.value)


@pytest.mark.parametrize("spec", SPECS)
def test_env_index_error_names_the_count(monkeypatch, spec):
    with fake_backend("cuda", device_count=2):
        monkeypatch.setenv("ACCEL_DEVICE", spec)
        accel.clear_cache()
        with pytest.raises(DeviceIndexError, match=r"2 visible device\(s\)") as info:
            accel.device()
    assert str(info.value).startswith("ACCEL_DEVICE=")


@pytest.mark.parametrize("bad", [-1, 2, torch.device("cuda", 5)])
def test_int_and_torch_device_index_errors_name_the_count(bad):
    with fake_backend("cuda", device_count=2), pytest.raises(DeviceIndexError, match=r"2 visible device\(s\)"):
        accel.device(bad)


def test_cpu_index_error_names_its_one_device():
    with pytest.raises(DeviceIndexError, match=r"Backend 'cpu' has 1 visible device\(s\), so valid indices are 0\.\.0"):
        accel.device("cpu:-1")


@pytest.mark.parametrize("call", ["synchronize", "memory.allocated", "random.get_rng_state", "device_index"])
@pytest.mark.parametrize("spec", ["cuda:-1", -1, "cuda:7", 7])
def test_runtime_and_random_index_errors_name_the_count(fake_cuda, call, spec):
    fn = accel
    for part in call.split("."):  # looked up inside the fake: accel's runtime functions resolve per backend
        fn = getattr(fn, part)
    with pytest.raises(DeviceIndexError, match=r"2 (visible )?device\(s\)"):
        fn(spec)
