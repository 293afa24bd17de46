"""Shared pieces of the kernel-registry tests: both registry paths, a clean registry, a counting impl."""

import pytest

import accel.kernels as ak
from accel import _compat
from accel.kernels import _registry

#: The registration paths this torch offers: accel's own router always, torch._native where present.
PATHS = ["accel"] + (["native"] if _compat.native_dsl_registry() is not None else [])


@pytest.fixture(autouse=True)
def _clean_registry():
    """No override or filter survives a test; the registration path is restored."""
    yield
    for o in ak.overrides():
        ak.unregister(o.name)
    ak.enable()
    ak.set_verify(False)
    _registry._STATE.path_mode = None


@pytest.fixture(params=PATHS)
def path(request):
    """Run the test once per registration path."""
    ak.use_registry(request.param)
    return request.param


class Counting:
    """An impl that counts calls and answers with a given function."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)
