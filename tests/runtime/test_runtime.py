"""accel.runtime: synchronize, device index, streams, events — CPU, faked vendors, real CUDA."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest
import torch
from _runtime_fakes import fake_runtime, make_stream

import accel
from accel import _compat
from accel.errors import (
    DeviceIndexError,
    DeviceMismatchError,
    InvalidDeviceError,
    InvalidEventError,
    InvalidStreamError,
    UnknownBackendError,
    UnsupportedOperationError,
)
from accel.testing import fake_backend




# -- CPU: documented no-ops and constants ------------------------------------------------------

@pytest.mark.parametrize("device", [None, 0, "cpu", "cpu:0", torch.device("cpu"), torch.device("cpu", 0)])
def test_cpu_synchronize_is_a_noop_for_every_valid_spelling(cpu, device):
    assert accel.synchronize(device) is None


def test_cpu_constants(cpu):
    assert accel.device_count() == 1
    assert accel.current_device_index() == 0
    assert accel.set_device_index(0) is None
    assert accel.set_device_index("cpu:0") is None


def test_cpu_streams(cpu):
    s = accel.current_stream()
    assert isinstance(s, accel.Stream) and s.device.type == "cpu"
    assert accel.current_stream(0).device.type == "cpu"
    assert accel.set_stream(s) is None
    with accel.stream(s) as inside:
        assert inside is s
    with accel.stream(None) as inside:
        assert inside is None


def test_cpu_device_index_context(cpu):
    with accel.device_index(0) as i:
        assert i == 0 and accel.current_device_index() == 0
    with accel.device_index(None) as i:
        assert i is None


def test_stream_and_event_are_torch_generic_classes():
    assert accel.Stream is torch.Stream
    # accel.Event makes torch.Events; every torch.Event counts as an accel.Event
    assert isinstance(torch.Event("cpu"), accel.Event) and issubclass(torch.Event, accel.Event)
    assert not isinstance(0, accel.Event) and not issubclass(int, accel.Event) and not issubclass(3, accel.Event)


def test_cpu_events_cannot_be_timed(cpu):
    with pytest.raises(UnsupportedOperationError, match="'cpu', which has no events.*perf_counter_ns"):
        accel.Event(enable_timing=True)
    with pytest.raises(RuntimeError):  # still a RuntimeError, as torch's own error was
        accel.Event()
    with pytest.raises(DeviceMismatchError, match="accel.Event: device 'cuda' is of type 'cuda'"):
        accel.Event("cuda")  # a device of another backend: the usual typed error, not torch's
    start, end = torch.Event("cpu", enable_timing=True), torch.Event("cpu", enable_timing=True)
    with pytest.raises(UnsupportedOperationError, match="perf_counter_ns"):
        accel.elapsed_time(start, end)
    with pytest.raises(InvalidEventError, match="start is 0 of type int"):
        accel.elapsed_time(0, end)
    with pytest.raises(InvalidEventError, match="end is 'x' of type str"):
        accel.elapsed_time(start, "x")


# -- bad input: typed errors naming the value and the valid range ---------------------------------

BAD = [
    ("xpu:0", DeviceMismatchError, r"device 'xpu:0' is of type 'xpu'.*active backend is 'cpu'.*0\.\.0"),
    (torch.device("meta"), DeviceMismatchError, r"type 'meta'.*0\.\.0"),
    (-1, DeviceIndexError, r"device index -1 is out of range.*0\.\.0"),
    (1, DeviceIndexError, r"device index 1 is out of range.*1 visible device"),
    ("cpu:7", DeviceIndexError, r"device index 7 \(from 'cpu:7'\).*0\.\.0"),
    ("cpu:x", DeviceIndexError, r"the index 'x' is not a non-negative integer.*0\.\.0"),
    (2.5, InvalidDeviceError, r"got 2\.5 of type float.*0\.\.0"),
    (True, InvalidDeviceError, r"got True of type bool"),
    ([0], InvalidDeviceError, r"got \[0\] of type list"),
]


@pytest.mark.parametrize("value, error, message", BAD)
@pytest.mark.parametrize("call", ["synchronize", "set_device_index", "current_stream", "device_index"])
def test_cpu_bad_device_raises_typed_error(cpu, call, value, error, message):
    with pytest.raises(error, match=message):
        getattr(accel, call)(value)


def test_set_device_index_needs_a_device(cpu):
    with pytest.raises(InvalidDeviceError, match="got None. Say which device"):
        accel.set_device_index(None)


@pytest.mark.parametrize("value, error, message", [
    (3, InvalidStreamError, "got 3 of type int, which is not a stream"),
    (make_stream("cuda", 0, 0), DeviceMismatchError, "is of type 'cuda', but the active backend is 'cpu'"),
])
def test_cpu_bad_stream(cpu, value, error, message):
    with pytest.raises(error, match=message):
        accel.set_stream(value)
    with pytest.raises(error, match=message):
        accel.stream(value)


# -- resolution: once per backend, torch's own function where exact ---------------------------------

def test_resolved_once_and_forgotten_by_clear_cache(cpu):
    # the public functions are fixed module-level definitions; what they call is resolved once per backend
    assert accel.synchronize is accel.runtime.synchronize is vars(accel.runtime)["synchronize"]
    first = accel.runtime.active_runtime()
    accel.synchronize()
    assert accel.runtime.active_runtime() is first  # resolved once, reused
    accel.memory.allocated()
    first_memory = vars(accel.memory._impl)["allocated"]
    accel.clear_cache()
    assert accel.runtime._RT is None and "allocated" not in vars(accel.memory._impl)
    accel.synchronize()
    accel.memory.allocated()
    assert accel.runtime.active_runtime() is not first
    assert vars(accel.memory._impl)["allocated"] is not first_memory
    assert accel.synchronize is accel.runtime.synchronize  # the public function itself never changes


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        accel.runtime.no_such_thing  # noqa: B018


def test_fake_cuda_calls_torch_functions_unchanged(fake_cuda):
    rt = accel.runtime.active_runtime()
    assert rt.current is _compat.resolve("cuda", "current_device") is fake_cuda.impl["current_device"]
    assert rt.device_count is torch.cuda.device_count
    assert accel.memory._impl.empty_cache is torch.cuda.empty_cache
    assert accel.device_count() == torch.cuda.device_count()


def test_fallback_to_public_torch_function_when_raw_binding_is_missing():
    with fake_runtime("cuda", 2) as fake:
        fake.patch.delattr(torch._C, "_cuda_getDevice", raising=False)
        marker = lambda: 1  # noqa: E731
        fake.patch.setattr(torch.cuda, "current_device", marker)
        assert accel.runtime.active_runtime().current is marker
        assert accel.current_device_index() == 1
        assert fake.initialized is False


def test_fake_runtime_leaves_torch_as_it_was():
    before = (torch.cuda.device_count, torch.cuda.is_initialized, getattr(torch._C, "_cuda_getDevice", None))
    with fake_runtime("cuda", 2):
        assert torch.cuda.device_count() == 2
    assert (torch.cuda.device_count, torch.cuda.is_initialized, getattr(torch._C, "_cuda_getDevice", None)) == before


def test_compat_resolve_unknown_is_none():
    assert _compat.resolve("cpu", "synchronize") is None
    assert _compat.resolve("cuda", "no_such_op") is None


# -- faked CUDA / ROCm / XPU / MPS ------------------------------------------------------------------

def test_fake_cuda_synchronize_never_initialises(fake_cuda):
    accel.synchronize()
    accel.synchronize(1)
    assert fake_cuda.calls == [] and fake_cuda.initialized is False


def test_fake_cuda_synchronize_after_init(fake_cuda):
    fake_cuda.initialized = True
    accel.synchronize()
    accel.synchronize(1)
    accel.synchronize("cuda:1")
    accel.synchronize(torch.device("cuda", 0))
    accel.synchronize("cuda")
    # The current device (0) syncs through the cheap current-device call, device 1 by index.
    assert fake_cuda.calls == [("synchronize", 0), ("synchronize_device", 1), ("synchronize_device", 1),
                               ("synchronize", 0), ("synchronize", 0)]
    fake_cuda.device = 1
    accel.synchronize(1)
    assert fake_cuda.calls[-1] == ("synchronize", 1)


@pytest.mark.parametrize("value, error, message", [
    ("xpu:0", DeviceMismatchError, r"'xpu:0' is of type 'xpu'.*active backend is 'cuda'.*0\.\.1 \('cuda:0'\.\.'cuda:1'\)"),
    ("rocm:0", DeviceMismatchError, r"active backend is 'cuda'"),
    (2, DeviceIndexError, r"device index 2 is out of range: backend 'cuda' has 2 visible device\(s\), so valid indices "
                          r"are 0\.\.1"),
    (-1, DeviceIndexError, r"0\.\.1"),
    ("cuda:-1", DeviceIndexError, r"'-1' is not a non-negative integer"),
    (object(), InvalidDeviceError, r"of type object, which is not a device"),
])
@pytest.mark.parametrize("call", ["synchronize", "set_device_index", "current_stream", "device_index"])
def test_fake_cuda_bad_input_changes_no_state(fake_cuda, call, value, error, message):
    with pytest.raises(error, match=message):
        getattr(accel, call)(value)
    assert fake_cuda.calls == [] and fake_cuda.initialized is False and fake_cuda.device == 0


def test_fake_rocm_accepts_its_own_name():
    with fake_runtime("rocm", 2) as fake:
        accel.set_device_index("rocm:1")
        assert fake.device == 1
        accel.set_device_index("cuda:0")
        assert fake.device == 0


def test_fake_cuda_set_device_and_context(fake_cuda):
    accel.set_device_index(1)
    assert accel.current_device_index() == 1
    with accel.device_index("cuda:0") as i:
        assert i == 0 and accel.current_device_index() == 0
    assert accel.current_device_index() == 1
    with accel.device_index(1):  # already current: no switch
        pass
    assert fake_cuda.calls == [("set_device", 1), ("set_device", 0), ("set_device", 1)]


def test_fake_cuda_device_index_bad_input_raises_before_entering(fake_cuda):
    with pytest.raises(DeviceIndexError):
        with accel.device_index(5):
            pytest.fail("entered the block")  # pragma: no cover
    assert fake_cuda.initialized is False


def test_fake_cuda_streams(fake_cuda):
    assert accel.current_stream() is fake_cuda.streams[0]
    assert accel.current_stream(1) is fake_cuda.streams[1]
    s1 = make_stream("cuda", 1, 42)
    accel.set_stream(s1)
    assert fake_cuda.device == 1 and accel.current_stream() == s1
    with pytest.raises(DeviceIndexError, match="device index 2 is out of range"):  # after the fast path saw 'cuda'
        accel.set_stream(make_stream("cuda", 2, 1))


def test_fake_cuda_stream_context_restores_stream_and_device(fake_cuda):
    before0, before1 = fake_cuda.streams[0], fake_cuda.streams[1]
    s1 = make_stream("cuda", 1, 42)
    with accel.stream(s1) as inside:
        assert inside is s1
        assert accel.current_device_index() == 1 and accel.current_stream() == s1
    assert accel.current_device_index() == 0
    assert fake_cuda.streams[0] == before0 and fake_cuda.streams[1] == before1
    same = make_stream("cuda", 0, 7)
    with accel.stream(same):
        assert accel.current_stream() == same
    assert fake_cuda.streams[0] == before0


@pytest.mark.parametrize("value, error, message", [
    (make_stream("xpu", 0, 1), DeviceMismatchError, "is of type 'xpu', but the active backend is 'cuda'"),
    (make_stream("cuda", 3, 1), DeviceIndexError, "device index 3 is out of range"),
    ("stream", InvalidStreamError, "got 'stream' of type str"),
])
def test_fake_cuda_bad_stream_changes_no_state(fake_cuda, value, error, message):
    with pytest.raises(error, match=message):
        accel.set_stream(value)
    with pytest.raises(error, match=message):
        accel.stream(value)
    assert fake_cuda.calls == [] and fake_cuda.initialized is False


def test_fake_cuda_event_is_a_torch_event_on_the_checked_device(fake_cuda, monkeypatch):
    made = []

    class Recorder(torch.Event):  # stands in for torch.Event: a CPU build cannot make CUDA events
        def __new__(cls, device, **kwargs):
            made.append((device, kwargs))
            return torch.Event.__new__(cls, "cpu")

    monkeypatch.setattr(_compat, "event_class", lambda: Recorder)
    e = accel.Event(1, enable_timing=True)
    assert type(e) is Recorder and isinstance(e, accel.Event)
    assert made == [(torch.device("cuda", 1), dict(enable_timing=True, blocking=False, interprocess=False))]
    accel.Event()  # None: the active backend's current device (index 0 in the fake), not torch's default
    assert made[-1][0] == torch.device("cuda", 0)
    with pytest.raises(DeviceIndexError):
        accel.Event(7)
    assert len(made) == 2  # a bad device makes nothing


def test_fake_cuda_elapsed_time_in_ms(fake_cuda):
    class TimedEvent(torch.Event):
        def elapsed_time(self, other):
            return 1.25

    assert accel.elapsed_time(TimedEvent("cpu"), TimedEvent("cpu")) == 1.25


def test_fake_xpu():
    with fake_runtime("xpu", 2) as fake:
        assert accel.device_count() == 2
        fake.initialized = True
        accel.synchronize("xpu:1")
        accel.set_device_index(1)
        assert fake.calls == [("synchronize_device", 1), ("set_device", 1)]
        with pytest.raises(DeviceMismatchError, match="active backend is 'xpu'"):
            accel.synchronize("cuda:0")


def test_fake_mps():
    with fake_runtime("mps", 1) as fake:
        assert accel.device_count() == 1
        assert accel.current_device_index() == 0
        accel.synchronize()  # MPS has no lazy init: always synchronises
        accel.synchronize("mps:0")
        accel.set_device_index(0)
        assert fake.calls == [("synchronize", 0), ("synchronize", 0)]
        with pytest.raises(DeviceIndexError, match=r"0\.\.0"):
            accel.set_device_index(1)


def test_fake_backend_mps_device_count_is_the_probes():
    """With only accel.testing.fake_backend (no runtime fakes), the count agrees with the probe (1)."""
    with fake_backend("mps"):
        assert accel.device_count() == accel.backend().device_count() == 1


# -- accel.device() fast path ---------------------------------------------------------------------

def test_device_cache_follows_accel_device_env(monkeypatch):
    assert accel.device("cpu") == torch.device("cpu")
    monkeypatch.setenv("ACCEL_DEVICE", "cpu")
    assert accel.device() == torch.device("cpu")
    monkeypatch.setenv("ACCEL_DEVICE", "cdua")
    with pytest.raises(UnknownBackendError, match="cdua"):
        accel.device()
    with pytest.raises(InvalidDeviceError, match="of type list"):
        accel.device([1])


def test_device_cache_keeps_equal_values_of_other_types_apart(cpu):
    assert accel.device(0) == torch.device("cpu", 0)
    with pytest.raises(InvalidDeviceError, match="of type bool"):
        accel.device(False)  # 0 == False: must not hit 0's cache entry
    with pytest.raises(InvalidDeviceError, match="of type float"):
        accel.device(0.0)


# -- no device initialised by import or resolution; docstring examples ----------------------------------

def test_import_and_resolution_initialise_nothing():
    code = ("import torch, accel; accel.synchronize; accel.memory.allocated; accel.memory.allocated(); "
            "accel.synchronize(); print(torch.cuda.is_initialized(), accel.backend().name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False", out


@pytest.mark.parametrize("module", ["accel.runtime", "accel.memory", "accel._compat"])
def test_docstring_examples(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# -- real CUDA -----------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_resolves_raw_bindings():
    assert accel.runtime.active_runtime().current is _compat.resolve("cuda", "current_device")
    assert accel.current_device_index() == torch.cuda.current_device()
    assert accel.device_count() == torch.cuda.device_count()


@pytest.mark.cuda
def test_cuda_synchronize_waits():
    x = torch.randn(2048, 2048, device="cuda")
    y = x @ x
    accel.synchronize()
    accel.synchronize(0)
    accel.synchronize("cuda:0")
    accel.synchronize(torch.device("cuda", 0))
    assert torch.cuda.current_stream().query() and y.shape == (2048, 2048)


@pytest.mark.cuda
def test_cuda_bad_input_changes_no_state():
    before = torch.cuda.current_device()
    n = torch.cuda.device_count()
    with pytest.raises(DeviceMismatchError, match="'xpu:0'"):
        accel.synchronize("xpu:0")
    with pytest.raises(DeviceIndexError, match=rf"0\.\.{n - 1}"):
        accel.set_device_index(n)
    with pytest.raises(DeviceIndexError):
        accel.set_device_index(-1)
    assert torch.cuda.current_device() == before


@pytest.mark.cuda
@pytest.mark.parametrize("make, error", [
    (lambda n: torch.Stream(stream_id=0, device_index=n, device_type=1), DeviceIndexError),  # not visible
    (lambda n: torch.Stream("cpu"), DeviceMismatchError),
    (lambda n: "stream", InvalidStreamError),
    (lambda n: None, InvalidStreamError),
])
def test_cuda_set_stream_bad_stream_changes_no_state(make, error):
    """torch's binding refuses these first (accel validates only then): same typed errors, no state changed."""
    assert _compat.resolve("cuda", "set_stream") is torch._C._accelerator_setStream
    before_device, before_stream = torch.cuda.current_device(), torch.cuda.current_stream()
    with pytest.raises(error):
        accel.set_stream(make(torch.cuda.device_count()))
    assert torch.cuda.current_device() == before_device and torch.cuda.current_stream() == before_stream


@pytest.mark.cuda
def test_cuda_streams_and_events():
    default = accel.current_stream()
    assert isinstance(default, accel.Stream) and default.device.type == "cuda"
    s = accel.Stream(accel.device("cuda:0"))
    with accel.stream(s):
        assert accel.current_stream() == s
        start, end = accel.Event(enable_timing=True), accel.Event(enable_timing=True)
        start.record()
        x = torch.randn(1024, 1024, device="cuda")
        (x @ x).sum()
        end.record()
    assert accel.current_stream() == default
    end.synchronize()
    ms = accel.elapsed_time(start, end)
    assert isinstance(ms, float) and ms > 0
    # accel's events are plain torch.Events: torch's own methods take them as arguments
    assert type(start) is torch.Event and start.elapsed_time(end) == ms
    marker = accel.Event()
    s.record_event(marker)
    default.wait_event(marker)
    marker.synchronize()
    assert marker.query()
    accel.set_stream(s)
    assert accel.current_stream() == s
    accel.set_stream(default)


@pytest.mark.cuda
def test_cuda_device_index_context():
    before = accel.current_device_index()
    with accel.device_index(0):
        assert torch.cuda.current_device() == 0
    assert torch.cuda.current_device() == before



def test_a_misspelt_device_is_called_a_misspelling(cpu):
    """'gpu' is no device type: the error says so and lists the backends (it used to call 'gpu' a type)."""
    with pytest.raises(DeviceMismatchError, match=r"device 'gpu' names no backend or device type.*backends: cpu, "
                                                   r"cuda, mps, rocm, xpu.*Fix the spelling"):
        accel.synchronize("gpu")
    with pytest.raises(DeviceMismatchError, match="device 'cuda' is of type 'cuda', but the active backend is 'cpu'"):
        accel.synchronize("cuda")


def test_cpu_runtime_functions_are_named_and_documented_as_the_public_api():
    """On the CPU the resolved device_count/current_device_index are constants; help() and a wrong call
    name them as accel's public functions (not an internal stub)."""
    from accel.testing import fake_backend

    with fake_backend("cpu"):
        assert accel.device_count() == 1 and accel.current_device_index() == 0
        assert accel.device_count.__name__ == "device_count" and "Visible devices" in accel.device_count.__doc__
        assert accel.current_device_index.__name__ == "current_device_index"
        with pytest.raises(TypeError, match=r"device_count\(\) takes 0 positional arguments"):
            accel.device_count("cuda")
