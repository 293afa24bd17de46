"""accel.random on the CPU and on faked CUDA / ROCm / XPU / MPS generators, through both torch code paths.

The two paths: ``torch.accelerator.random`` (torch 2.14+) for reads, or the device module
(``torch.cuda`` / ``torch.xpu`` / ``torch.mps``); the ``path`` fixture forces each by
monkeypatching accel._compat's answer.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import random
import warnings

import pytest
import torch

import accel
import accel._compat
import accel.random as ar
from accel.errors import (
    BackendUnavailableError,
    DeviceIndexError,
    DeviceMismatchError,
    InvalidDeviceError,
    RngRestoreError,
    RngRestoreWarning,
    RngSnapshotError,
    RngSnapshotVersionError,
    RngStateError,
    RngUnsupportedError,
    SeedError,
    UnknownBackendError,
)
from accel.testing import FakeGenerator, fake_backend, fake_rng

np = pytest.importorskip("numpy", reason="these tests check NumPy's stream too; install numpy (the 'test' extra)")

VENDORS = ["cuda", "rocm", "xpu", "mps"]
STATE_BYTES = {"cuda": 16, "rocm": 16, "xpu": 16, "mps": 44}


@pytest.fixture(params=["accelerator", "device_module"])
def path(request, monkeypatch):
    """Force the torch.accelerator.random path or the device-module fallback."""
    monkeypatch.setattr(accel._compat, "has_accelerator_random", lambda: request.param == "accelerator")
    return request.param



@contextlib.contextmanager
def faked(vendor, count=2):
    with fake_backend(vendor, device_count=count), fake_rng(vendor, device_count=count) as rng:
        yield rng


def all_states():
    """Every host-visible stream, comparable with ==."""
    return (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist())


# -- CPU ---------------------------------------------------------------------------------------------------
def test_get_set_rng_state_cpu_reproduces_draws(cpu):
    for device in (None, "cpu", torch.device("cpu"), 0):
        state = ar.get_rng_state(device)
        assert state.dtype == torch.uint8 and state.shape == (5056,)
        a = torch.rand(5)
        ar.set_rng_state(state, device)
        assert torch.equal(a, torch.rand(5))


def test_manual_seed_and_initial_seed_cpu(cpu):
    ar.manual_seed(123)
    assert ar.initial_seed() == 123 == ar.initial_seed("cpu")
    a = torch.rand(3)
    ar.manual_seed(np.int64(123))  # any integer type with __index__
    assert torch.equal(a, torch.rand(3))
    ar.manual_seed(-1)
    assert ar.initial_seed() == 2**64 - 1
    ar.manual_seed_all(5)  # CPU backend: its one device is the CPU generator
    assert ar.initial_seed("cpu") == 5


def test_seed_is_nondeterministic_and_returned(cpu):
    s1, s2 = ar.seed(), ar.seed()
    assert s1 != s2 and ar.initial_seed() == s2


@pytest.mark.parametrize("bad", [1.5, "7", True, None, 2**64, -(2**63) - 1])
def test_bad_seed_changes_nothing(cpu, bad):
    before = torch.get_rng_state()
    for fn in (ar.manual_seed, ar.manual_seed_all):
        with pytest.raises(SeedError, match="seed"):
            fn(bad)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda s: s.tolist(), "not a tensor"),
        (lambda s: s.to(torch.int64), "dtype torch.int64"),
        (lambda s: s.reshape(2, -1), "shape"),
        (lambda s: s.to("meta"), "is on meta"),
        (lambda s: torch.zeros(16, dtype=torch.uint8), "looks like a CUDA/ROCm/XPU Philox state"),
        (lambda s: torch.zeros(44, dtype=torch.uint8), "looks like an MPS Philox state"),
        (lambda s: torch.zeros(7, dtype=torch.uint8), "7 bytes"),
        (lambda s: torch.zeros_like(s), "rejects this state"),
    ],
)
def test_bad_state_to_cpu_changes_nothing(cpu, make, match):
    before = torch.get_rng_state()
    with pytest.raises(RngStateError, match=match):
        ar.set_rng_state(make(before), "cpu")
    assert torch.equal(before, torch.get_rng_state())


def test_rng_state_all_cpu_backend(cpu):
    # issue 24 item 3: "all" means every accelerator device, as torch.accelerator.random's and
    # torch.cuda's _all functions mean it: none on the CPU backend (snapshot() records none there either)
    assert ar.get_rng_state_all() == [] == ar.snapshot()["devices"]
    before = torch.get_rng_state()
    ar.set_rng_state_all([])  # a no-op
    assert torch.equal(before, torch.get_rng_state())
    with pytest.raises(RngStateError, match=r"got 1 state\(s\), but no accelerator is active"):
        ar.set_rng_state_all([before])
    with pytest.raises(RngStateError, match="takes a list of states"):
        ar.set_rng_state_all(before)
    assert torch.equal(before, torch.get_rng_state())


def test_default_generator_and_philox_on_cpu(cpu):
    assert ar.default_generator() is torch.default_generator
    assert ar.default_generator("cpu") is torch.default_generator
    with pytest.raises(RngUnsupportedError, match="mt19937"):
        ar.get_philox_state("cpu")
    with pytest.raises(RngUnsupportedError, match="mt19937"):
        ar.set_philox_state((1, 0), "cpu")


def test_bad_device_specs(cpu):
    with pytest.raises(UnknownBackendError):
        ar.get_rng_state("cdua")
    with pytest.raises(DeviceIndexError, match="device index 3 is out of range"):
        ar.get_rng_state(3)
    with pytest.raises(BackendUnavailableError):
        ar.get_rng_state("xpu:0")
    with pytest.raises(InvalidDeviceError):
        ar.set_rng_state(torch.get_rng_state(), 1.5)


def test_fork_rng_cpu(cpu):
    before = torch.get_rng_state()
    with ar.fork_rng():
        torch.rand(10)
    assert torch.equal(before, torch.get_rng_state())
    with pytest.raises(KeyError), ar.fork_rng(["cpu"]):
        torch.rand(10)
        raise KeyError("inside")
    assert torch.equal(before, torch.get_rng_state())
    with ar.fork_rng(enabled=False):
        torch.rand(10)
    assert not torch.equal(before, torch.get_rng_state())
    with pytest.raises(InvalidDeviceError, match="not a list of devices"), ar.fork_rng(3.5):
        pass


# -- faked vendors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("vendor", VENDORS)
def test_device_state_round_trip(path, vendor):
    with faked(vendor) as rng:
        n = len(rng.generators)
        for index in [None, *range(n)]:
            state = ar.get_rng_state(index)
            assert state.dtype == torch.uint8 and state.numel() == STATE_BYTES[vendor]
            a = rng.draw(index or 0, 6)
            ar.set_rng_state(state, index)
            assert torch.equal(a, rng.draw(index or 0, 6))
        module = "torch.accelerator.random" if path == "accelerator" else f"torch.{rng.device_type}"
        reader = f"{module}.get_rng_state"
        assert reader in rng.calls
        assert f"torch.{rng.device_type}.set_rng_state" in rng.calls


@pytest.mark.parametrize("vendor", VENDORS)
def test_seeding_reaches_cpu_and_every_device(path, vendor):
    with faked(vendor, count=3) as rng:
        ar.manual_seed(99)
        assert torch.initial_seed() == 99
        assert [g.initial_seed() for g in rng.generators] == [99] * len(rng.generators)
        assert [ar.initial_seed(i) for i in range(len(rng.generators))] == [99] * len(rng.generators)
        assert ar.initial_seed() == 99
        ar.manual_seed_all(7)  # devices only
        assert torch.initial_seed() == 99 and ar.initial_seed(0) == 7
        s = ar.seed()
        assert torch.initial_seed() == s and all(g.initial_seed() == s for g in rng.generators)


@pytest.mark.parametrize("vendor", VENDORS)
def test_rng_state_all_round_trip(path, vendor):
    with faked(vendor, count=3) as rng:
        states = ar.get_rng_state_all()
        assert len(states) == len(rng.generators)
        a = [rng.draw(i, 5) for i in range(len(states))]
        ar.set_rng_state_all(states)
        assert all(torch.equal(a[i], rng.draw(i, 5)) for i in range(len(states)))
        if path == "device_module" and vendor == "mps":
            assert "torch.mps.get_rng_state" in rng.calls  # torch.mps has no get_rng_state_all


@pytest.mark.parametrize("vendor", VENDORS)
def test_bad_state_to_device_changes_nothing(path, vendor):
    with faked(vendor) as rng:
        rng.draw(0, 8)
        before = rng.generators[0].get_state()
        with pytest.raises(RngStateError, match="looks like a torch CPU"):
            ar.set_rng_state(torch.get_rng_state(), 0)
        other = 44 if vendor != "mps" else 16
        with pytest.raises(RngStateError, match=f"{other} bytes"):
            ar.set_rng_state(torch.zeros(other, dtype=torch.uint8), 0)
        bad_offset = before.clone()
        bad_offset[-8] = 3  # offset 3: not a multiple of 4, refused by the generator itself
        with pytest.raises(RngStateError, match="rejects this state"):
            ar.set_rng_state(bad_offset, 0)
        with pytest.raises(RngStateError, match="dtype"):
            ar.set_rng_state(before.to(torch.int32), 0)
        assert torch.equal(before, rng.generators[0].get_state())


def test_state_all_checks_every_state_before_setting_any(path):
    with faked("xpu", count=2) as rng:
        rng.draw(0, 4)
        s0 = rng.generators[0].get_state()
        new0 = FakeGenerator(torch.device("xpu", 0)).manual_seed(5).get_state()
        with pytest.raises(RngStateError, match="state 1"):
            ar.set_rng_state_all([new0, torch.get_rng_state()])
        assert torch.equal(s0, rng.generators[0].get_state())


@pytest.mark.parametrize("vendor", VENDORS)
def test_philox_seed_offset(path, vendor):
    with faked(vendor) as rng:
        ar.manual_seed(11)
        assert ar.get_philox_state() == (11, 0)
        rng.draw(0, 8)
        st = ar.get_philox_state(0)
        assert st == ar.PhiloxState(11, 8)
        a = rng.draw(0, 4)
        ar.set_philox_state(st, 0)
        assert torch.equal(a, rng.draw(0, 4))
        assert ar.default_generator(0) is rng.generators[0]
        before = rng.generators[0].get_state()
        for bad, match in [((1, 6), "multiple of 4"), ((1, -4), "negative"), ((1.0, 0), "seed"), ([1, 0], "pair")]:
            with pytest.raises(SeedError, match=match):
                ar.set_philox_state(bad, 0)
        assert torch.equal(before, rng.generators[0].get_state())


def test_philox_errors_from_the_generator_leave_it_unchanged(path, monkeypatch):
    with faked("xpu") as rng:
        before = rng.generators[0].get_state()

        def refuse(self, offset):
            raise RuntimeError("offset refused")

        monkeypatch.setattr(FakeGenerator, "set_offset", refuse)
        with pytest.raises(RngUnsupportedError, match="refused seed/offset: offset refused"):
            ar.set_philox_state((5, 4))
        assert torch.equal(before, rng.generators[0].get_state())
        monkeypatch.setattr(FakeGenerator, "get_offset", lambda self: refuse(self, 0))
        with pytest.raises(RngUnsupportedError, match="exposes no offset"):
            ar.get_philox_state()


def test_missing_device_module_or_generator(monkeypatch):
    with faked("xpu"):
        monkeypatch.setattr(accel._compat, "has_accelerator_random", lambda: False)
        monkeypatch.setattr(accel._compat, "device_module", lambda t: None)
        with pytest.raises(RngUnsupportedError, match="has no device module for 'xpu'"):
            ar.get_rng_state()
        monkeypatch.setattr(accel._compat, "device_module", lambda t: object())
        with pytest.raises(RngUnsupportedError, match="exposes no default generator"):
            ar.default_generator()


def test_compat_helpers():
    assert accel._compat.device_module("xpu") is torch.xpu
    assert accel._compat.device_module("no_such_device") is None
    assert accel._compat.default_generator("cpu") is torch.default_generator


# -- fork_rng on faked vendors -----------------------------------------------------------------------------
def _forbid(monkeypatch, module, names):
    def boom(*args, **kwargs):
        raise AssertionError(f"{module.__name__} must not be touched")

    for n in names:
        monkeypatch.setattr(module, n, boom)


def test_fork_rng_on_xpu_forks_xpu_not_cuda(path, monkeypatch):
    with faked("xpu", count=2) as rng:
        _forbid(monkeypatch, torch.cuda, ["get_rng_state", "set_rng_state", "get_rng_state_all", "current_device"])
        before = [g.get_state() for g in rng.generators]
        with ar.fork_rng():
            rng.draw(0, 8), rng.draw(1, 4)
        assert all(torch.equal(b, g.get_state()) for b, g in zip(before, rng.generators, strict=True))
        assert "torch.xpu.set_rng_state" in rng.calls


def test_fork_rng_cpu_only_list_touches_no_accelerator(path, monkeypatch):
    with faked("cuda", count=2) as rng:
        _forbid(monkeypatch, torch.cuda, ["get_rng_state", "set_rng_state", "init", "current_device"])
        cpu_before = torch.get_rng_state()
        for devices in (["cpu"], [torch.device("cpu")], "cpu", []):
            with ar.fork_rng(devices):
                torch.rand(3)
                rng.draw(0, 4)  # not forked: stays advanced
            assert torch.equal(cpu_before, torch.get_rng_state())
        assert rng.calls == []
        assert rng.generators[0].get_offset() == 16


def test_fork_rng_only_the_listed_devices(path):
    with faked("rocm", count=3) as rng:
        before = [g.get_state() for g in rng.generators]
        with ar.fork_rng([1, "cuda:2", torch.device("cuda", 1)]):
            for i in range(3):
                rng.draw(i, 4)
        assert not torch.equal(before[0], rng.generators[0].get_state())
        assert torch.equal(before[1], rng.generators[1].get_state())
        assert torch.equal(before[2], rng.generators[2].get_state())
        with ar.fork_rng(["cuda"]):  # the current device (0)
            rng.draw(0, 4)
        assert rng.generators[0].get_offset() == 4


def test_fork_rng_rejects_mixed_accelerator_types():
    from unittest import mock

    # inner patches are undone before faked() restores the real functions (no leak into later tests)
    with faked("cuda"), mock.patch.object(torch.version, "xpu", "20250301", create=True), \
            mock.patch.object(torch.xpu, "device_count", lambda: 1):
        accel.clear_cache()
        with pytest.raises(DeviceMismatchError, match="mix 'cuda' and 'xpu'"), ar.fork_rng(["cuda:0", "xpu:0"]):
            pass


# -- snapshot / restore ------------------------------------------------------------------------------------
def _draws(rng=None):
    out = [random.random(), float(np.random.rand()), torch.rand(3).tolist()]
    if rng is not None:
        out += [rng.draw(i, 4).tolist() for i in range(len(rng.generators))]
    return out


def _saved(snap):
    buf = io.BytesIO()
    torch.save(snap, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _plain(obj):
    """Only tensors and Python primitives, all the way down."""
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_plain(v) for v in obj)
    if isinstance(obj, torch.Tensor):
        return obj.device.type == "cpu"
    return obj is None or type(obj) in (int, float, str, bool)


def test_snapshot_is_plain_and_survives_weights_only_load(cpu):
    random.gauss(0, 1)  # leaves a cached gauss_next in Python's state
    np.random.standard_normal()  # and a cached gaussian in NumPy's
    snap = ar.snapshot()
    assert _plain(snap)
    assert snap["format"] == ar.SNAPSHOT_FORMAT and snap["version"] == ar.SNAPSHOT_VERSION
    assert snap["vendor"] == "cpu" and snap["device_count"] == 0 and snap["devices"] == []
    expected = _draws() + [random.gauss(0, 1), float(np.random.standard_normal())]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = ar.restore(_saved(snap))
    assert report == {"restored": ["python", "numpy", "torch_cpu"], "skipped": {}, "failed": {}}
    assert _draws() + [random.gauss(0, 1), float(np.random.standard_normal())] == expected


@pytest.mark.parametrize("vendor", VENDORS)
def test_snapshot_restore_devices(path, vendor):
    with faked(vendor, count=2) as rng:
        rng.draw(0, 8)
        snap = _saved(ar.snapshot())
        assert snap["vendor"] == vendor and snap["device_count"] == len(rng.generators)
        expected = _draws(rng)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ar.restore(snap, strict=True)
        assert _draws(rng) == expected


def test_restore_other_vendor_skips_devices_with_one_warning(path):
    with faked("cuda", count=2) as rng:
        snap = ar.snapshot()
    with faked("rocm", count=2) as rng:
        rng.draw(0, 4)
        dev_before = [g.get_state() for g in rng.generators]
        expected = _draws()
        with pytest.warns(RngRestoreWarning) as record:
            report = ar.restore(snap)
        assert len(record) == 1
        msg = str(record[0].message)
        assert "cuda:0..1: skipped" in msg and "vendor 'cuda'" in msg and "'rocm'" in msg
        assert report["restored"] == ["python", "numpy", "torch_cpu"]
        assert _draws() == expected
        assert all(torch.equal(b, g.get_state()) for b, g in zip(dev_before, rng.generators, strict=True))
        before = all_states()
        with pytest.raises(RngRestoreError, match="cannot apply here"):
            ar.restore(snap, strict=True)
        assert all_states() == before  # strict: nothing set


def test_restore_on_fewer_devices(path):
    with faked("cuda", count=4) as rng:
        for i in range(4):
            rng.draw(i, 4 * (i + 1))
        snap = ar.snapshot()
    with faked("cuda", count=2) as rng:
        skipped = r"cuda:2\.\.3: skipped: the snapshot has 4 cuda device stream\(s\); this machine has 2"
        with pytest.warns(RngRestoreWarning, match=skipped):
            report = ar.restore(snap)
        assert report["restored"] == ["python", "numpy", "torch_cpu", "cuda:0", "cuda:1"]
        assert [g.get_offset() for g in rng.generators] == [4, 8]
    with faked("cuda", count=3), pytest.warns(RngRestoreWarning, match=r"cuda:3: skipped"):
        ar.restore(snap)


def test_restore_on_cpu_only_machine(monkeypatch):
    with fake_backend("xpu", device_count=1), fake_rng("xpu", device_count=1):
        snap = ar.snapshot()
    assert snap["device_count"] == 1
    monkeypatch.setenv("ACCEL_DEVICE", "cpu")
    accel.clear_cache()
    expected = _draws()
    with pytest.warns(RngRestoreWarning, match="no accelerator is active here"):
        ar.restore(snap)
    assert _draws() == expected


def test_numpy_missing(cpu, monkeypatch):
    snap = ar.snapshot()
    from accel import _rng_snapshot

    monkeypatch.setattr(_rng_snapshot, "numpy_module", lambda: None)
    assert ar.snapshot()["numpy"] is None
    expected = [random.random(), torch.rand(2).tolist()]
    with pytest.warns(RngRestoreWarning, match="numpy: skipped: NumPy is not installed here"):
        ar.restore(snap)
    assert [random.random(), torch.rand(2).tolist()] == expected
    with pytest.raises(RngRestoreError, match="NumPy is not installed"):
        ar.restore(snap, strict=True)


def test_failure_in_one_part_does_not_stop_the_others(path, monkeypatch):
    with faked("xpu", count=2) as rng:
        snap = ar.snapshot()
        expected = _draws(rng)

        def broken(state):
            raise RuntimeError("CPU generator on fire")

        monkeypatch.setattr(torch, "set_rng_state", broken)
        with pytest.warns(RngRestoreWarning, match="torch_cpu: failed: RuntimeError: CPU generator on fire"):
            report = ar.restore(snap)
        assert report["restored"] == ["python", "numpy", "xpu:0", "xpu:1"]
        got = _draws(rng)
        assert got[:2] == expected[:2] and got[3:] == expected[3:]
        with pytest.raises(RngRestoreError, match="failed to restore"):
            ar.restore(snap, strict=True)
        assert _draws(rng)[3:] == expected[3:]  # the others were still set


def _set(path_, value):
    def mutate(snap):
        *head, last = path_
        target = snap
        for key in head:
            target = target[key]
        target[last] = value(target[last]) if callable(value) else value
        return snap

    return mutate


CORRUPTIONS = [
    (lambda s: [s], RngSnapshotError, "not an accel RNG snapshot"),
    (_set(["format"], "something.else"), RngSnapshotError, "not an accel RNG snapshot"),
    (_set(["version"], ar.SNAPSHOT_VERSION + 1), RngSnapshotVersionError, "newer than this accel reads"),
    (_set(["version"], "1"), RngSnapshotError, "not a positive int"),
    (_set(["version"], 0), RngSnapshotError, "not a positive int"),
    (lambda s: {k: v for k, v in s.items() if k != "torch_cpu"}, RngSnapshotError, "missing torch_cpu"),
    (_set(["vendor"], 3), RngSnapshotError, "not strings"),
    (_set(["device_count"], 5), RngSnapshotError, "list of 5 states"),
    (_set(["devices"], "x"), RngSnapshotError, "got str"),
    (_set(["devices", 0], lambda t: t.to(torch.int32)), RngSnapshotError, r"devices\[0\]"),
    (_set(["devices", 0], lambda t: t[:8]), RngSnapshotError, "8 bytes"),
    (_set(["devices", 1], lambda t: torch.cat([t[:-8], torch.tensor([2] + [0] * 7, dtype=torch.uint8)])),
     RngSnapshotError, "rejects this state"),
    (_set(["python"], [1, 2]), RngSnapshotError, "python"),
    (_set(["python", "gauss_next"], "x"), RngSnapshotError, "gauss_next"),
    (_set(["python", "internal"], lambda t: t[:10]), RngSnapshotError, "625 words"),
    (_set(["python", "internal"], lambda t: t.to(torch.float32)), RngSnapshotError, "int64 tensor"),
    (_set(["python", "internal"], lambda t: torch.cat([t[:-1], torch.tensor([700])])), RngSnapshotError,
     "random.setstate refuses"),
    (_set(["python", "internal"], lambda t: torch.cat([torch.tensor([2**32]), t[1:]])), RngSnapshotError,
     "outside 0"),
    (_set(["numpy"], {}), RngSnapshotError, "numpy"),
    (_set(["numpy", "bit_generator"], "PCG64"), RngSnapshotError, "MT19937"),
    (_set(["numpy", "pos"], 1.5), RngSnapshotError, "pos is float"),
    (_set(["numpy", "pos"], 9999), RngSnapshotError, "pos 9999 / has_gauss 0 outside"),
    (_set(["numpy", "has_gauss"], 2), RngSnapshotError, "has_gauss 2 outside"),
    (_set(["numpy", "key"], lambda t: t[:10]), RngSnapshotError, "624 words"),
    (_set(["torch_cpu"], lambda t: torch.zeros_like(t)), RngSnapshotError, "rejects this state"),
    (_set(["torch_cpu"], "bytes"), RngSnapshotError, "not a tensor"),
]


@pytest.mark.parametrize(("mutate", "error", "match"), CORRUPTIONS)
def test_corrupted_or_newer_snapshot_changes_nothing(path, mutate, error, match):
    with faked("cuda", count=2) as rng:
        rng.draw(1, 4)
        snap = mutate(_saved(ar.snapshot()))
        _draws(rng)
        before = all_states(), [g.get_state().tolist() for g in rng.generators]
        with pytest.raises(error, match=match) as info:
            ar.restore(snap)
        assert "Nothing was restored" in str(info.value)
        assert (all_states(), [g.get_state().tolist() for g in rng.generators]) == before


def test_numpy_state_round_trips_every_field(cpu):
    np.random.seed(3)
    np.random.standard_normal()
    snap = ar.snapshot()["numpy"]
    name, key, pos, has_gauss, cached = np.random.get_state()
    assert snap["bit_generator"] == name and snap["key"].tolist() == key.tolist()
    assert (snap["pos"], snap["has_gauss"], snap["cached_gaussian"]) == (pos, has_gauss, cached)
    assert type(snap["pos"]) is int and type(snap["cached_gaussian"]) is float


# -- docstring examples ------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["accel.random", "accel.testing._rng"])
def test_docstring_examples(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_numpy_refusing_the_state_is_reported_as_corruption(cpu, monkeypatch):
    from types import SimpleNamespace

    snap = ar.snapshot()

    class Refusing:
        def set_state(self, state):
            raise ValueError("state refused")

    fake_np = SimpleNamespace(asarray=np.asarray, uint32=np.uint32, random=SimpleNamespace(RandomState=Refusing))
    from accel import _rng_snapshot

    monkeypatch.setattr(_rng_snapshot, "numpy_module", lambda: fake_np)
    before = all_states()
    with pytest.raises(RngSnapshotError, match="RandomState.set_state refuses it: state refused"):
        ar.restore(snap)
    assert all_states() == before


def test_gpu_check_script_says_when_no_accelerator_is_active(monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "ci" / "gpu" / "rng_check.py"
    env = {**__import__("os").environ, "ACCEL_DEVICE": "cpu"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no accelerator active" in out.stdout


def test_compat_accelerator_random_follows_the_feature_flag(monkeypatch):
    monkeypatch.setattr(accel._compat, "has_accelerator_random", lambda: False)
    assert accel._compat.accelerator_random() is None
    with fake_rng("xpu"):
        monkeypatch.setattr(accel._compat, "has_accelerator_random", lambda: True)
        assert accel._compat.accelerator_random() is torch.accelerator.random
