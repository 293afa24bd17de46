"""accel.memory's cache functions take exactly what torch's take, on every backend (no catch-all no-ops)."""

from __future__ import annotations

import inspect

import pytest
import torch
from _runtime_fakes import fake_runtime

import accel
import accel.memory



@pytest.mark.parametrize("name", ["empty_cache", "empty_host_cache"])
def test_torch_cache_functions_take_no_arguments(name):
    # What accel mirrors: torch.accelerator.empty_cache() / empty_host_cache() take none.
    fn = getattr(torch.accelerator, name, None) or torch.cuda.empty_cache
    assert list(inspect.signature(fn).parameters) == []


@pytest.mark.parametrize("name", ["empty_cache", "empty_host_cache"])
@pytest.mark.parametrize("args", [(1, 2, 3), ("x",), (0,)])
def test_cpu_cache_functions_refuse_arguments_like_cuda(cpu, name, args):
    fn = getattr(accel.memory, name)
    assert list(inspect.signature(fn).parameters) == []
    assert fn() is None
    with pytest.raises(TypeError, match="positional argument"):
        fn(*args)


@pytest.mark.parametrize("vendor", ["mps", "cuda"])
def test_faked_backends_have_the_same_signatures(vendor, monkeypatch):
    with fake_runtime(vendor, 1) as fake:
        if vendor == "cuda":  # a torch without empty_host_cache: accel's stand-in must not take arguments either
            fake.patch.setattr(accel._compat, "resolve",
                               lambda t, op, _real=accel._compat.resolve: None if op == "empty_host_cache"
                               else _real(t, op))
            accel.clear_cache()
        for name in ("empty_cache", "empty_host_cache"):
            fn = getattr(accel.memory, name)
            assert list(inspect.signature(fn).parameters) == []
            with pytest.raises(TypeError):
                fn(1, 2, 3)
            fn()
