"""Fake device generators: Philox-like RNG streams for a faked CUDA, ROCm, XPU or MPS, on the CPU.

:func:`fake_rng` patches the RNG functions of the vendor's torch device module
(``torch.cuda`` for CUDA and ROCm, ``torch.xpu``, ``torch.mps``) and of
``torch.accelerator.random`` with functions backed by :class:`FakeGenerator`
objects that keep the real state formats (16 bytes ``seed, offset`` on CUDA, ROCm
and XPU; 44 bytes on MPS: seven 32-bit counter words, seed, offset) and mirror
each module's API (``torch.mps`` has no ``*_all`` functions and no
``initial_seed``). Use it inside :func:`accel.testing.fake_backend`.

Example:
    >>> import accel.random
    >>> from accel.testing import fake_backend, fake_rng
    >>> with fake_backend("xpu", device_count=2), fake_rng("xpu", device_count=2) as rng:
    ...     accel.random.manual_seed(7)
    ...     state = accel.random.get_rng_state(1)
    ...     a = rng.draw(1, 3)
    ...     accel.random.set_rng_state(state, 1)
    ...     bool((a == rng.draw(1, 3)).all()), rng.generators[1].initial_seed()
    (True, 7)
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from accel.errors import UnknownBackendError
from accel.testing._standin import stand_in

__all__ = ["FakeGenerator", "FakeRng", "fake_rng"]

#: vendor -> (torch device type, 32-bit counter words before seed and offset in the state).
_LAYOUT = {"cuda": ("cuda", 0), "rocm": ("cuda", 0), "xpu": ("xpu", 0), "mps": ("mps", 7)}
_DEFAULT_SEED = 67280421310721  # ATen's default_rng_seed_val


class FakeGenerator:
    """A Philox-style generator of one faked device: a seed and an offset, no device memory.

    Draws (:meth:`draw`) depend only on ``(seed, offset)`` and advance the offset by 4
    per 4 values, as Philox's counter does.
    """

    def __init__(self, device: torch.device, *, words: int = 0, seed: int = _DEFAULT_SEED) -> None:
        self.device = device
        self._words = words
        self._seed = seed
        self._offset = 0

    @property
    def state_bytes(self) -> int:
        """Size of :meth:`get_state` in bytes."""
        return 4 * self._words + 16

    def get_state(self) -> torch.Tensor:
        """The state as a 1-D ``uint8`` CPU tensor (counter words, seed, offset; little-endian)."""
        words = [(self._seed >> (8 * (i % 4)) ^ self._offset ^ i) & 0xFFFFFFFF for i in range(self._words)]
        buf = struct.pack(f"<{self._words}IQQ", *words, self._seed, self._offset)
        return torch.frombuffer(bytearray(buf), dtype=torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> FakeGenerator:
        """Set seed and offset from a state; refuses what ATen's Philox generators refuse."""
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        if new_state.device.type != "cpu":
            raise RuntimeError("RNG state must be a CPU tensor")
        if new_state.numel() != self.state_bytes:
            raise RuntimeError(f"RNG state is wrong size: expected {self.state_bytes}, got {new_state.numel()}")
        seed, offset = struct.unpack_from("<QQ", bytes(new_state.contiguous().tolist()), 4 * self._words)
        if offset % 4:
            raise RuntimeError(f"offset must be a multiple of 4, got {offset}")
        self._seed, self._offset = seed, offset
        return self

    def manual_seed(self, seed: int) -> FakeGenerator:
        """Seed (negative seeds wrap modulo 2**64) and reset the offset to 0."""
        self._seed, self._offset = int(seed) % 2**64, 0
        return self

    def seed(self) -> int:
        """Seed from ``os.urandom`` and return the seed."""
        value = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        """The current seed."""
        return self._seed

    def get_offset(self) -> int:
        """The Philox offset."""
        return self._offset

    def set_offset(self, offset: int) -> FakeGenerator:
        """Set the Philox offset (a multiple of 4)."""
        if offset % 4:
            raise RuntimeError(f"offset must be a multiple of 4, got {offset}")
        self._offset = int(offset)
        return self

    def clone_state(self) -> FakeGenerator:
        """A new generator with the same seed and offset."""
        g = FakeGenerator(self.device, words=self._words, seed=self._seed)
        g._offset = self._offset
        return g

    def draw(self, n: int = 4) -> torch.Tensor:
        """``n`` float32 values in [0, 1) from ``(seed, offset)``; advances the offset."""
        g = torch.Generator().manual_seed((self._seed * 1_000_003 + self._offset) % 2**63)
        out = torch.rand(n, generator=g)
        self._offset += 4 * ((n + 3) // 4)
        return out


class FakeRng:
    """What :func:`fake_rng` installed: the generators, by device index, and a log of calls."""

    def __init__(self, name: str, device_type: str, generators: list[FakeGenerator]) -> None:
        self.name = name
        self.device_type = device_type
        self.generators = generators
        #: names of the patched torch functions called, in order (``"torch.xpu.get_rng_state"``, ...).
        self.calls: list[str] = []

    def draw(self, index: int = 0, n: int = 4) -> torch.Tensor:
        """Draw ``n`` values on faked device ``index`` (what ``torch.rand(n, device=...)`` would consume)."""
        return self.generators[index].draw(n)


def _index(device: Any, current: int) -> int:
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return current if device.index is None else device.index


@contextlib.contextmanager
def fake_rng(name: str, *, device_count: int = 1) -> Iterator[FakeRng]:
    """Give a faked vendor's device module working default generators.

    Args:
        name: ``"cuda"``, ``"rocm"``, ``"xpu"`` or ``"mps"`` (as in :func:`fake_backend`).
        device_count: number of generators (MPS always has one).

    Yields:
        :class:`FakeRng`: the generators and the log of calls to the patched functions.

    Raises:
        UnknownBackendError: ``name`` is not an accelerator vendor.

    .. note:: Side effects: patches RNG functions of ``torch.cuda``/``torch.xpu``/``torch.mps``
       and ``torch.accelerator.random`` (created if this torch lacks it) until the block exits,
       and clears :mod:`accel._compat`'s cached answer about the latter on entry and exit.
    """
    if name not in _LAYOUT:
        raise UnknownBackendError(f"fake_rng: unknown accelerator vendor {name!r}. Valid: {', '.join(_LAYOUT)}.")
    device_type, words = _LAYOUT[name]
    count = 1 if name == "mps" else device_count
    gens = [FakeGenerator(torch.device(device_type, i), words=words) for i in range(count)]
    rng = FakeRng(name, device_type, gens)
    mod_name = f"torch.{device_type}"

    def logged(label: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rng.calls.append(label)
            return fn(*args, **kwargs)

        return wrapper

    def gen(device: Any = device_type) -> FakeGenerator:
        return gens[_index(device, 0)]

    def set_state(new_state: torch.Tensor, device: Any = device_type) -> None:
        gen(device).set_state(new_state)

    def manual_seed(seed: int) -> None:
        gens[0].manual_seed(seed)

    def seed() -> None:
        gens[0].seed()

    def manual_seed_all(seed: int) -> None:
        for g in gens:
            g.manual_seed(seed)

    def set_all(states: Any) -> None:
        for i, s in enumerate(states):
            gens[i].set_state(s)

    api: dict[str, Any] = {
        "get_rng_state": lambda device=device_type: gen(device).get_state(),
        "set_rng_state": set_state,
        "manual_seed": manual_seed,
        "seed": seed,
    }
    if name == "mps":
        api["_get_default_mps_generator"] = lambda: gens[0]
    else:
        api.update(
            get_rng_state_all=lambda: [g.get_state() for g in gens],
            set_rng_state_all=set_all,
            manual_seed_all=manual_seed_all,
            seed_all=lambda: manual_seed_all(gens[0].seed()),
            initial_seed=lambda: gens[0].initial_seed(),
            current_device=lambda: 0,
            init=lambda: None,
        )
    module = getattr(torch, device_type)
    patches = [mock.patch.object(module, k, stand_in(getattr(module, k, None), logged(f"{mod_name}.{k}", v)),
                                 create=True) for k, v in api.items()]
    if name != "mps":
        patches.append(mock.patch.object(module, "default_generators", tuple(gens)))
    upstream = SimpleNamespace(
        initial_seed=lambda device=None: gen(device if device is not None else 0).initial_seed(),
        get_rng_state=lambda device=None: gen(device if device is not None else 0).get_state(),
        get_rng_state_all=lambda: [g.get_state() for g in gens],
    )
    real_upstream = getattr(torch.accelerator, "random", None)
    for k in list(vars(upstream)):
        setattr(upstream, k, stand_in(getattr(real_upstream, k, None),
                                      logged(f"torch.accelerator.random.{k}", getattr(upstream, k))))
    patches.append(mock.patch.object(torch.accelerator, "random", upstream, create=True))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        stack.callback(_forget_compat)  # the faked torch.accelerator.random must not outlive the block
        _forget_compat()
        yield rng


def _forget_compat() -> None:
    """Drop accel._compat's cached answer about ``torch.accelerator.random`` (it changes with the fake)."""
    from accel import _compat

    clear = getattr(_compat.has_accelerator_random, "cache_clear", None)
    if clear is not None:  # None while a test has replaced the function
        clear()
