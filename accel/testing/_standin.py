"""Replacements for torch functions that torch itself cannot tell from the originals by their attributes, and
the few runtime answers torch needs once a faked device "is available".

torch reads attributes of its own functions: ``torch._dynamo`` reads
``torch.backends.mps.is_available.__wrapped__`` (an ``lru_cache`` wrapper's) when it is first
imported, on torch 2.14. A plain lambda patched in its place makes that import raise
``AttributeError`` and leaves ``torch._dynamo`` half-imported for the rest of the process, so every
function the fakes of :mod:`accel.testing` install goes through :func:`stand_in`.

Once ``torch.cuda.is_available()`` says yes, torch itself uses the device: ``torch.compile``
saves the CUDA generator's state around each trace (and AOT autograd the XPU one), asks
``torch.cuda.current_device()`` and whether a stream is capturing; ``FakeTensorMode`` makes a real
tensor to set up the GPU context before a ``device="cuda"`` fake tensor (torch 2.9 decides that from
``torch.cuda.is_available()``). :func:`device_free_patches` answers those on a machine without the
faked device; with a real device of that type, torch's own functions answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
import torch._subclasses.fake_tensor as _fake_tensor

__all__ = ["device_free_patches", "stand_in"]

#: Methods an ``functools.lru_cache`` wrapper has (on its type, so ``functools.wraps`` does not copy them).
_CACHE_METHODS = ("cache_clear", "cache_info", "cache_parameters")


def stand_in(original: Any, replacement: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls ``replacement`` and carries ``original``'s attributes, to be patched in its place.

    It has what :func:`functools.wraps` copies (name, qualname, module, doc, annotations, the
    instance ``__dict__``), an ``lru_cache`` wrapper's ``cache_clear``/``cache_info``/
    ``cache_parameters`` (the original's), and ``__wrapped__`` set to what the original's
    ``__wrapped__`` is (the original itself when it has none), so that torch reading
    ``fn.__wrapped__`` or unwrapping ``fn`` reaches the same function it would reach unfaked.
    A new function each call: one fake may stand in for several torch functions.

    Args:
        original: the torch function being replaced; ``None`` (an attribute this torch lacks, patched
            with ``create=True``) returns ``replacement`` itself.
        replacement: the fake.

    Returns:
        The stand-in.
    """
    if original is None or not callable(original):
        return replacement

    @functools.wraps(original)
    def stand(*args: Any, **kwargs: Any) -> Any:
        return replacement(*args, **kwargs)

    stand.__wrapped__ = getattr(original, "__wrapped__", original)  # type: ignore[attr-defined]
    for name in _CACHE_METHODS:
        method = getattr(original, name, None)
        if callable(method):
            setattr(stand, name, method)
    return stand


def _real_devices(binding_name: str) -> Callable[[], bool]:
    """Whether this machine really has a device of a type, from torch's C binding as it is now (not
    ``torch.cuda.is_available()``, which asks the faked ``device_count``; a fake entered later may
    replace the binding). Asked lazily, at most once: counting devices may start the driver."""
    binding = getattr(torch._C, binding_name, None)
    seen: list[bool] = []  # the answer, once asked (a closure, not a functools.cache: it lives one block)

    def available() -> bool:
        if not seen:
            seen.append(binding is not None and int(binding()) > 0)
        return seen[0]

    return available


def _rng_patches(module: Any, count: int, real: Callable[[], bool], generator: type) -> list[Any]:
    device_type = module.__name__.rpartition(".")[2]
    real_get, real_set = module.get_rng_state, module.set_rng_state
    gens: dict[int, Any] = {}

    def gen(device: Any) -> Any:
        i = device if isinstance(device, int) else (torch.device(device).index or 0)
        if not 0 <= i < count:
            raise RuntimeError(f"{device_type} error: invalid device ordinal {i} (fake_backend: {count} device(s))")
        return gens.setdefault(i, generator(torch.device(device_type, i)))

    def get_rng_state(device: Any = device_type) -> torch.Tensor:
        return real_get(device) if real() else gen(device).get_state()

    def set_rng_state(new_state: torch.Tensor, device: Any = device_type) -> None:
        if real():
            real_set(new_state, device)
        else:
            gen(device).set_state(new_state)

    return [mock.patch.object(module, "get_rng_state", stand_in(real_get, get_rng_state)),
            mock.patch.object(module, "set_rng_state", stand_in(real_set, set_rng_state))]


def device_free_patches(cuda_count: int, xpu_count: int, generator: type) -> list[Any]:
    """``mock.patch`` objects (not yet started) for the device-using torch functions torch calls once
    ``cuda_count`` CUDA/ROCm or ``xpu_count`` XPU devices are faked: without a real device of the type,
    device 0 is current, no stream is capturing, each faked device has a generator state of its own
    (a ``generator(device)``: :class:`~accel.testing.FakeGenerator`), and ``FakeTensorMode`` sets up
    no GPU context."""
    real = {"cuda": _real_devices("_cuda_getDeviceCount"), "xpu": _real_devices("_xpu_getDeviceCount")}
    patches: list[Any] = []
    for module, count in ((torch.cuda, cuda_count), (torch.xpu, xpu_count)):
        if count <= 0:
            continue
        has = real[module.__name__.rpartition(".")[2]]
        current = module.current_device
        patches.append(mock.patch.object(module, "current_device",
                                         stand_in(current, lambda has=has, current=current: current() if has() else 0)))
        patches += _rng_patches(module, count, has, generator)
    if cuda_count > 0:
        capturing = torch.cuda.is_current_stream_capturing
        patches.append(mock.patch.object(torch.cuda, "is_current_stream_capturing",
                                         stand_in(capturing, lambda: real["cuda"]() and capturing())))
    init = getattr(_fake_tensor, "init_gpu_context", None)
    if init is not None:
        def init_gpu_context(device: Any) -> None:
            has = real.get(torch.device(device).type)
            if has is not None and has():
                init(device)

        patches.append(mock.patch.object(_fake_tensor, "init_gpu_context", stand_in(init, init_gpu_context)))
    return patches
