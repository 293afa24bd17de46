"""accel.kernels.dsl.helion_utils.call: Helion kernels' generated host code called directly, launched by accel.

The dispatch logic runs here with a fake Helion kernel (records whether a call went through
``Kernel.__call__`` or straight to the generated host function, and with which launcher); the
real kernels run through it in the interpreter tests (fallback path) and in the ``cuda`` tests.
"""

from __future__ import annotations

import pytest
import torch

from accel.testing.pytest_plugin import importorskip_dsl

importorskip_dsl("helion")  # a skip naming the error also when helion is installed but does not import

from accel.kernels.dsl import helion_utils as _helion  # noqa: E402


class _Bound:
    def __init__(self, calls: list, with_launcher: bool = True) -> None:
        self.calls = calls
        if with_launcher:
            def run(*args, _launcher=None):
                calls.append(("host", _launcher, args))
                return "host-result"
        else:
            def run(*args):
                calls.append(("host-no-launcher", args))
        self._run = run


class _Kernel:
    def __init__(self, with_launcher: bool = True) -> None:
        self.calls: list = []
        self.bound = _Bound(self.calls, with_launcher)

    def __call__(self, *args):
        self.calls.append(("kernel", args))
        return "kernel-result"

    def bind(self, args):
        return self.bound


@pytest.fixture
def direct(monkeypatch):
    monkeypatch.setattr(_helion, "_direct_ok", lambda: True)
    monkeypatch.setattr(_helion, "_HOST", {})


def test_first_call_through_helion_then_host_function_with_accels_launcher(direct):
    k, x = _Kernel(), torch.zeros(4, 8)
    assert _helion.call(k, x, 1.0) == "kernel-result"
    assert _helion.call(k, x, 1.0) == "host-result"
    assert [c[0] for c in k.calls] == ["kernel", "host"]
    assert k.calls[1][1] is _helion._launcher and k.calls[1][2] == (x, 1.0)
    _helion.call(k, torch.zeros(5, 8), 1.0)  # a new dispatch key: through Helion again
    assert k.calls[-1][0] == "kernel"


def test_unkeyable_arguments_and_host_functions_without_launcher_use_helion(direct):
    k = _Kernel()
    for _ in range(2):
        _helion.call(k, 3, 4)  # no tensor: no key
    assert [c[0] for c in k.calls] == ["kernel", "kernel"]
    k2, x = _Kernel(with_launcher=False), torch.zeros(2)
    for _ in range(2):
        _helion.call(k2, x)
    assert [c[0] for c in k2.calls] == ["kernel", "kernel"]


def test_not_direct_means_plain_kernel_call(monkeypatch):
    monkeypatch.setattr(_helion, "_direct_ok", lambda: False)
    k, x = _Kernel(), torch.zeros(2)
    for _ in range(2):
        _helion.call(k, x)
    assert [c[0] for c in k.calls] == ["kernel", "kernel"]


def test_launcher_sends_extra_options_to_helions_own_launcher(monkeypatch):
    import helion.runtime

    seen = []
    monkeypatch.setattr(_helion, "triton_launch", lambda fn, grid, *a, **kw: seen.append(("accel", grid, a, kw)))
    monkeypatch.setattr(helion.runtime, "default_launcher", lambda fn, grid, *a, **kw: seen.append(("helion", kw)))
    _helion._launcher("fn", (3,), 1, 2, num_warps=8, num_stages=1)
    _helion._launcher("fn", (3,), 1, 2, num_warps=8, num_stages=1, launch_cooperative_grid=True)
    assert seen[0] == ("accel", (3,), (1, 2), {"num_warps": 8, "num_stages": 1})
    assert seen[1] == ("helion", {"num_warps": 8, "num_stages": 1, "launch_cooperative_grid": True})


def test_direct_ok_is_off_while_helion_interprets(monkeypatch):
    _helion._direct_ok.cache_clear()
    monkeypatch.setenv("HELION_INTERPRET", "1")
    try:
        assert _helion._direct_ok() is False
    finally:
        _helion._direct_ok.cache_clear()


def test_dispatch_key_is_exact_and_refuses_what_it_cannot_describe():
    x = torch.zeros(4, 8)
    k = _helion._dispatch_key((x, 1e-5, 3, None))
    assert k == ((torch.float32, torch.Size([4, 8]), (8, 1), x.data_ptr() & 15, True), (float, 1e-5), (int, 3),
                 None, -1)
    assert _helion._dispatch_key((x.t(), 1e-5, 3, None)) != k  # strides differ
    assert _helion._dispatch_key((x, 2e-5, 3, None)) != k      # scalar values count
    assert _helion._dispatch_key((x.to(torch.bfloat16), 1e-5, 3, None)) != k
    assert _helion._dispatch_key((x, [1, 2])) is None          # a container
    assert _helion._dispatch_key((x, x)) is None               # aliased: Helion compiles it separately
    assert _helion._dispatch_key((x, float("nan"))) is None    # never equal to itself
    flat = torch.zeros(33)
    assert _helion._dispatch_key((flat[1:],)) != _helion._dispatch_key((flat[:32],))  # offset / alignment
    assert _helion._dispatch_key((3, 4)) is None               # no tensor: no device

    class Sub(torch.Tensor):
        pass

    assert _helion._dispatch_key((x.as_subclass(Sub),)) is None


def test_a_new_kernel_at_a_freed_kernels_address_never_gets_its_host_function(direct):
    x = torch.zeros(2)
    for i in range(20):
        k = _Kernel()
        assert _helion.call(k, x) == "kernel-result", f"kernel {i}: first call must go through Helion"
        assert _helion.call(k, x) == "host-result"
        del k


def test_the_host_cache_is_bounded(direct, monkeypatch):
    monkeypatch.setattr(_helion, "HOST_CACHE_SIZE", 3)
    k = _Kernel()
    for n in range(1, 8):
        _helion.call(k, torch.zeros(n))
    assert len(_helion._HOST) <= 3
