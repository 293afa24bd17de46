"""A fake device runtime for tests of accel.runtime / accel.memory under faked vendors.

``FakeRuntime`` installs one fake per operation at *every* torch path that
``accel._compat.RUNTIME_SOURCES`` lists for it (``torch._C._cuda_getDevice`` and
``torch.cuda.current_device`` alike), so the tests do not depend on which one the
running torch build has. The fake keeps device state (initialised?, current device,
current stream per device, allocator counters) and records calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from accel import _compat
from accel.testing import fake_backend

#: c10::DeviceType values, for building torch.Stream objects of a faked device type.
DEVICE_TYPE_ID = {"cuda": 1, "xpu": 12, "mps": 13}


def make_stream(device_type: str, index: int, stream_id: int) -> torch.Stream:
    return torch.Stream(stream_id=stream_id, device_index=index, device_type=DEVICE_TYPE_ID[device_type])


@contextlib.contextmanager
def fake_runtime(vendor: str, count: int = 2) -> Iterator[FakeRuntime]:
    """``fake_backend(vendor)`` plus a :class:`FakeRuntime`, undone in the right order.

    The runtime's patches are undone before ``fake_backend``'s, so neither restores a
    fake the other installed (``torch.cuda.device_count`` is patched by both).
    """
    with fake_backend(vendor, device_count=count), pytest.MonkeyPatch.context() as mp:
        yield FakeRuntime(mp, {"rocm": "cuda"}.get(vendor, vendor), count)


class FakeRuntime:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, device_type: str, count: int = 2) -> None:
        self.patch = monkeypatch  #: use this for further patches, so they are undone with the fake
        self.type, self.count = device_type, count
        self.initialized = False
        self.device = 0
        self.calls: list[tuple] = []
        self.streams = {i: make_stream(device_type, i, 0) for i in range(count)}
        self.counters = {i: {"allocated_bytes": {"current": 0, "peak": 0}, "reserved_bytes": {"current": 0, "peak": 0}}
                         for i in range(count)}
        self.telemetry: dict[str, object] = {}
        impl = {
            "device_count": lambda: self.count,
            "is_initialized": lambda: self.initialized,
            "current_device": self._current_device,
            "set_device": self._set_device,
            "synchronize": self._synchronize,
            "synchronize_device": self._synchronize,
            "current_stream": self._current_stream,
            "set_stream": self._set_stream,
            "memory_stats_raw": self._stats,
            "reset_peak": lambda i: self.calls.append(("reset_peak", i)),
            "reset_accumulated": lambda i: self.calls.append(("reset_accumulated", i)),
            "empty_cache": lambda: self.calls.append(("empty_cache",)),
            "empty_host_cache": lambda: self.calls.append(("empty_host_cache",)),
            "mem_get_info": lambda i=None: (1000 + (i or 0), 8000),
            "current_allocated_memory": lambda: 111,
            "driver_allocated_memory": lambda: 222,
            "recommended_max_memory": lambda: 1000,
        }
        for name in ("device_memory_used", "utilization", "power_draw", "clock_rate", "temperature"):
            impl[name] = self._telemetry_query(name)
        self.impl = impl
        for op, paths in _compat.RUNTIME_SOURCES[device_type].items():
            for path in paths:
                parent_path, _, attr = path.rpartition(".")
                parent = _compat._lookup(parent_path)
                monkeypatch.setattr(parent, attr, impl[op], raising=False)

    # -- behaviour mirroring torch: queries initialise the runtime --------------------------
    def _init(self) -> None:
        self.initialized = True

    def _current_device(self) -> int:
        self._init()
        return self.device

    def _set_device(self, index: int) -> None:
        self._init()
        self.calls.append(("set_device", index))
        self.device = index

    def _synchronize(self, index: int | None = None) -> None:
        # ("synchronize", i): the current device's sync; ("synchronize_device", i): a sync by index.
        self.calls.append(("synchronize", self.device) if index is None else ("synchronize_device", index))

    def _current_stream(self, index: int | None = None) -> torch.Stream:
        self._init()
        return self.streams[self.device if index is None else index]

    def _set_stream(self, stream: torch.Stream) -> None:
        # Mirrors torch's ``_accelerator_setStream`` binding: it refuses a bad stream before
        # changing anything (pybind's TypeError; c10's checks raise RuntimeError). Whatever the
        # order of its checks, the CUDA guard cannot switch to another type's device or an
        # invisible index, so nothing changes; test_cuda_set_stream_bad_stream_changes_no_state
        # checks exactly that against the real binding on the GPU machine.
        if not isinstance(stream, torch.Stream):
            raise TypeError(f"_accelerator_setStream(): incompatible function arguments: {stream!r}")
        if stream.device_type != DEVICE_TYPE_ID[self.type]:
            raise RuntimeError(f"stream's device type {stream.device.type} doesn't match the current accelerator")
        if not 0 <= stream.device_index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {stream.device_index}")
        self._init()
        self.calls.append(("set_stream", stream.device_index, stream.stream_id))
        self.device = stream.device_index
        self.streams[stream.device_index] = stream

    def _stats(self, index: int) -> dict:
        self.calls.append(("stats", index))
        c = self.counters[index]
        return {
            "num_ooms": 0,
            "allocated_bytes": {"all": dict(c["allocated_bytes"], allocated=7, freed=3), "large_pool": {"current": 1}},
            "reserved_bytes": {"all": dict(c["reserved_bytes"], allocated=9, freed=1)},
        }

    def _telemetry_query(self, name: str):
        def query(index: int | None = None):
            value = self.telemetry.get(name)
            if isinstance(value, BaseException):
                raise value
            return value

        return query
