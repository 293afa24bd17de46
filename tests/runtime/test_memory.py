"""accel.memory: allocator counters, caches, memory info, telemetry — CPU, faked vendors, real CUDA."""

from __future__ import annotations

import pytest
import torch
from _runtime_fakes import fake_runtime

import accel
from accel import _compat
from accel.errors import DeviceIndexError, DeviceMismatchError, InvalidDeviceError

GETTERS = ["allocated", "reserved", "max_allocated", "max_reserved"]
TAKES_DEVICE = GETTERS + ["reset_peak", "reset_accumulated", "get_memory_info", "stats", "telemetry"]




# -- CPU: not tracked, nothing raises -----------------------------------------------------------------------

@pytest.mark.parametrize("name", GETTERS)
@pytest.mark.parametrize("device", [None, 0, "cpu", torch.device("cpu")])
def test_cpu_getters_are_zero(cpu, name, device):
    assert getattr(accel.memory, name)(device) == 0


def test_cpu_rest(cpu):
    m = accel.memory
    assert m.get_memory_info() == (0, 0)
    assert m.stats() == {} and m.stats(0) == {}
    assert m.telemetry() == m.Telemetry()
    assert all(v is None for v in vars(m.telemetry()).values())
    for fn in (m.reset_peak, m.reset_accumulated):
        assert fn() is None and fn(0) is None
    assert m.empty_cache() is None and m.empty_host_cache() is None


@pytest.mark.parametrize("name", TAKES_DEVICE)
@pytest.mark.parametrize("value, error", [("cuda:0", DeviceMismatchError), (1, DeviceIndexError),
                                          ("x", DeviceMismatchError), (1.0, InvalidDeviceError)])
def test_cpu_bad_device(cpu, name, value, error):
    with pytest.raises(error, match=f"accel.memory.{name}: "):
        getattr(accel.memory, name)(value)


# -- faked CUDA: the raw allocator statistics ------------------------------------------------------------------

def test_fake_cuda_before_init_reads_nothing(fake_cuda):
    m = accel.memory
    assert [getattr(m, n)() for n in GETTERS] == [0, 0, 0, 0]
    assert m.allocated(1) == 0 and m.stats() == {} and m.stats("cuda:1") == {}
    m.reset_peak()
    m.reset_accumulated(1)
    assert fake_cuda.calls == [] and fake_cuda.initialized is False


def test_fake_cuda_getters_read_one_value(fake_cuda):
    fake_cuda.initialized = True
    fake_cuda.counters[0]["allocated_bytes"].update(current=4096, peak=8192)
    fake_cuda.counters[1]["reserved_bytes"].update(current=2 << 20, peak=3 << 20)
    m = accel.memory
    assert (m.allocated(), m.max_allocated(), m.reserved(), m.max_reserved()) == (4096, 8192, 0, 0)
    assert (m.reserved("cuda:1"), m.max_reserved(torch.device("cuda", 1))) == (2 << 20, 3 << 20)
    accel.set_device_index(1)
    assert m.reserved() == 2 << 20
    assert [c for c in fake_cuda.calls if c[0] == "stats"][-1] == ("stats", 1)


def test_fake_cuda_stats_flat_and_sorted_like_torch(fake_cuda):
    fake_cuda.initialized = True
    fake_cuda.counters[0]["allocated_bytes"].update(current=5, peak=6)
    got = accel.memory.stats()
    assert list(got) == sorted(got)
    assert got == {
        "allocated_bytes.all.allocated": 7, "allocated_bytes.all.current": 5, "allocated_bytes.all.freed": 3,
        "allocated_bytes.all.peak": 6, "allocated_bytes.large_pool.current": 1, "num_ooms": 0,
        "reserved_bytes.all.allocated": 9, "reserved_bytes.all.current": 0, "reserved_bytes.all.freed": 1,
        "reserved_bytes.all.peak": 0,
    }


def test_fake_cuda_missing_statistic_reads_zero(fake_cuda):
    fake_cuda.initialized = True
    for path in _compat.RUNTIME_SOURCES["cuda"]["memory_stats_raw"]:
        parent, _, attr = path.rpartition(".")
        fake_cuda.patch.setattr(_compat._lookup(parent), attr, lambda i: {"allocated_bytes": {}})
    assert accel.memory.allocated() == 0 and accel.memory.max_reserved(1) == 0


def test_fake_cuda_resets_and_caches(fake_cuda):
    m = accel.memory
    fake_cuda.initialized = True
    m.reset_peak()
    m.reset_peak("cuda:1")
    m.reset_accumulated(0)
    m.empty_cache()
    m.empty_host_cache()
    assert fake_cuda.calls == [("reset_peak", 0), ("reset_peak", 1), ("reset_accumulated", 0), ("empty_cache",),
                               ("empty_host_cache",)]


def test_fake_cuda_memory_info(fake_cuda):
    assert accel.memory.get_memory_info() == (1000, 8000)
    assert accel.memory.get_memory_info(1) == (1001, 8000)


@pytest.mark.parametrize("name", TAKES_DEVICE)
def test_fake_cuda_bad_device_changes_no_state(fake_cuda, name):
    with pytest.raises(DeviceMismatchError, match=r"'xpu:0'.*0\.\.1"):
        getattr(accel.memory, name)("xpu:0")
    with pytest.raises(DeviceIndexError, match=r"device index 2 is out of range.*0\.\.1"):
        getattr(accel.memory, name)(2)
    assert fake_cuda.calls == [] and fake_cuda.initialized is False


@pytest.mark.parametrize("vendor, power, watts", [("cuda", 250_000, 250.0), ("rocm", 300, 300.0)])
def test_fake_telemetry_units(vendor, power, watts):
    with fake_runtime(vendor, 1) as fake:
        fake.telemetry.update(device_memory_used=123, utilization=50, power_draw=power, clock_rate=1980,
                              temperature=40)
        t = accel.memory.telemetry()
    assert t == accel.memory.Telemetry(123, 50, watts, 1980, 40)


def test_fake_telemetry_none_where_unavailable():
    with fake_runtime("cuda", 1) as fake:
        fake.telemetry.update(device_memory_used=ModuleNotFoundError("pynvml does not seem to be installed"),
                              utilization=RuntimeError("NVML_ERROR_NOT_SUPPORTED"), clock_rate=1500)
        fake.patch.delattr(torch.cuda, "temperature")
        t = accel.memory.telemetry()
    assert t == accel.memory.Telemetry(None, None, None, 1500, None)


def test_fake_xpu_uses_xpu_statistics():
    with fake_runtime("xpu", 2) as fake:
        fake.initialized = True
        fake.counters[1]["allocated_bytes"]["current"] = 77
        fake.telemetry.update(power_draw=55.5)
        assert accel.memory.allocated("xpu:1") == 77
        assert accel.memory.telemetry().power_draw == 55.5
        assert accel.memory.get_memory_info(1) == (1001, 8000)


def test_fake_mps_maps_to_its_own_counters():
    with fake_runtime("mps", 1) as fake:
        m = accel.memory
        assert (m.allocated(), m.reserved(), m.max_allocated(), m.max_reserved("mps:0")) == (111, 222, 0, 0)
        assert m.get_memory_info() == (1000 - 222, 1000)
        assert m.stats() == {"allocated_bytes.all.current": 111, "reserved_bytes.all.current": 222}
        assert m.telemetry() == m.Telemetry()
        m.empty_cache()
        m.reset_peak()
        m.empty_host_cache()
        assert fake.calls == [("empty_cache",)]
        with pytest.raises(DeviceIndexError, match=r"0\.\.0"):
            m.allocated(1)
        fake.patch.setattr(torch.mps, "driver_allocated_memory", lambda: 5000)
        fake.patch.setattr(torch._C, "_mps_driverAllocatedMemory", lambda: 5000)
        accel.clear_cache()
        assert m.get_memory_info() == (0, 1000)  # clamped at 0


# -- real CUDA -------------------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_counters_match_torch():
    x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    m = accel.memory
    assert m.allocated() == torch.cuda.memory_allocated() > 0
    assert m.allocated(0) == torch.cuda.memory_allocated(0)
    assert m.reserved() == torch.cuda.memory_reserved()
    assert m.max_allocated() == torch.cuda.max_memory_allocated()
    assert m.max_reserved() == torch.cuda.max_memory_reserved()
    assert m.stats() == dict(torch.cuda.memory_stats())
    del x
    m.reset_peak()
    assert m.max_allocated() == torch.cuda.max_memory_allocated() == m.allocated()
    m.reset_accumulated()
    assert m.stats()["allocated_bytes.all.allocated"] == 0
    m.empty_cache()
    m.empty_host_cache()
    assert m.reserved() == torch.cuda.memory_reserved()
    free, total = m.get_memory_info()
    assert 0 < free <= total == torch.cuda.mem_get_info()[1]


@pytest.mark.cuda
def test_cuda_telemetry_types():
    t = accel.memory.telemetry()
    for name in ("device_memory_used", "clock_rate"):
        value = getattr(t, name)
        assert value is None or value > 0
    assert t.power_draw is None or 10 < t.power_draw < 2000  # watts, not milliwatts
