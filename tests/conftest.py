"""Shared test setup: accel's own pytest plugin (hardware markers, fake_backend fixture), and the
``once`` marker's selection."""

import os

import pytest
import torch

import accel

pytest_plugins = ["accel.testing.pytest_plugin"]


@pytest.fixture
def cpu(monkeypatch):
    """The real CPU backend, also on a machine with a GPU."""
    monkeypatch.setenv("ACCEL_DEVICE", "cpu")
    accel.clear_cache()


@pytest.fixture
def fake_cuda():
    """Faked CUDA with two devices and a fake device runtime (tests/_runtime_fakes.py)."""
    from _runtime_fakes import fake_runtime

    with fake_runtime("cuda", 2) as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_detection(monkeypatch):
    """Every test starts with ACCEL_DEVICE unset and accel's caches empty."""
    monkeypatch.delenv("ACCEL_DEVICE", raising=False)
    accel.clear_cache()
    yield
    accel.clear_cache()


# torch-level facts accel.testing fakes: a test that leaks a fake (e.g. monkeypatch inside fake_backend,
# whose teardown then restores the *fake*) would silently change every later test's hardware.
_WATCHED = [(torch.version, "cuda"), (torch.version, "hip"), (torch.cuda, "device_count"),
            (torch.cuda, "is_available"), (torch.cuda, "get_device_properties"), (torch.xpu, "device_count"),
            (torch.xpu, "is_available"), (torch.backends.mps, "is_available")]
_ORIGINAL = [getattr(obj, name, None) for obj, name in _WATCHED]


@pytest.fixture(autouse=True)
def _no_leaked_fakes():
    yield
    leaked = [f"{obj.__name__}.{name}" for (obj, name), orig in zip(_WATCHED, _ORIGINAL)
              if getattr(obj, name, None) is not orig]
    for (obj, name), orig in zip(_WATCHED, _ORIGINAL):
        setattr(obj, name, orig)
    assert not leaked, f"test leaked faked torch facts: {leaked} (patch inside the fake_backend block with mock.patch)"


@pytest.fixture
def cutedsl_sm90(monkeypatch):
    """accel's CuTeDSL checks see an sm_90 device (CPU tensors stand in for CUDA ones) and empty tuning tables."""
    from accel.kernels.dsl import cutedsl_utils as _cutedsl
    from accel.kernels.tuning import table as _tuning

    monkeypatch.setattr(_cutedsl, "arch", lambda device: "sm_90")
    monkeypatch.setattr(_tuning, "table", lambda arch: {})


#: Set in the one tox env that runs the ``once`` tests (tox.ini: env cpu).
ONCE_ENV = "ACCEL_TEST_ONCE"


def pytest_collection_modifyitems(config, items):
    """``once`` tests (slow sets that prove nothing new per torch version: the interpreter sweeps over every
    candidate config, the demo, the benchmark scripts) run only where ``ACCEL_TEST_ONCE=1``; elsewhere they
    are deselected, and the summary says so and where they run."""
    if os.environ.get(ONCE_ENV) == "1":
        return
    once = [item for item in items if item.get_closest_marker("once")]
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = [item for item in items if not item.get_closest_marker("once")]
        config._accel_once_deselected = len(once)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "_accel_once_deselected", 0)
    if n:
        terminalreporter.write_line(f"accel: {n} 'once' tests deselected here; they run where {ONCE_ENV}=1 "
                                    f"(tox env cpu: ./ci/test.sh)")


@pytest.fixture
def spy_init(monkeypatch):
    """``torch.distributed.init_process_group`` and the set-device calls recorded instead of run:
    ``{"init": [kwargs, ...], "set_device": [index, ...]}``."""
    import torch.distributed as dist

    calls = {"init": [], "set_device": []}
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls["init"].append(kw))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda i: calls["set_device"].append(i), raising=False)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls["set_device"].append(i))
    return calls
