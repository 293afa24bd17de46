"""Portable RNG state: read, write, fork and checkpoint every random stream on every vendor.

One vocabulary for the CPU generator and the default generators of the active
backend's devices (CUDA, ROCm, XPU, MPS). ``device`` arguments take what
:func:`accel.device` takes; ``None`` means the active backend's current device
(the CPU generator when the CPU backend is active).

Reads go through ``torch.accelerator.random`` where the running torch has it
(2.14+), otherwise through the device module (``torch.cuda``, ``torch.xpu``,
``torch.mps``); writes always go through the device module, which upstream
leaves lazy on CUDA (seeding never initialises the runtime). :mod:`accel._compat`
makes that choice.

State formats (bytes of a 1-D ``torch.uint8`` CPU tensor, from the generators'
``get_state`` in ATen): CPU mt19937 5056; CUDA, ROCm and XPU Philox 16 (seed,
offset: two little-endian 64-bit integers); MPS Philox 44 (seven 32-bit counter
words, seed, offset). CUDA, ROCm and XPU states share one layout, so a raw state
cannot tell those vendors apart; :func:`snapshot` records the vendor, so
:func:`restore` never applies one vendor's streams on another.

:func:`snapshot` and :func:`restore` checkpoint every stream: Python ``random``,
NumPy's global ``RandomState`` (if NumPy is installed), the torch CPU generator
and each device of the active backend, as a plain dict that ``torch.save`` and
``torch.load(weights_only=True)`` carry without allow-listing.

Example:
    >>> import torch, accel.random
    >>> accel.random.manual_seed(0)
    >>> state = accel.random.get_rng_state("cpu")
    >>> a = torch.rand(3)
    >>> accel.random.set_rng_state(state, "cpu")
    >>> torch.equal(a, torch.rand(3))
    True
"""

from __future__ import annotations

import contextlib
import math
import operator
import random as _pyrandom
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import torch

from accel import _compat, _select
from accel.backends import Backend
from accel.errors import (
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
)

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "PhiloxState",
    "default_generator",
    "fork_rng",
    "get_philox_state",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "restore",
    "seed",
    "set_philox_state",
    "set_rng_state",
    "set_rng_state_all",
    "snapshot",
]

#: The ``"format"`` entry of every :func:`snapshot`.
SNAPSHOT_FORMAT = "accel.random.snapshot"
#: The snapshot format version this accel writes; :func:`restore` reads this version and older.
SNAPSHOT_VERSION = 1

_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1
_U64 = 2**64

#: Sizes of known generator states, to say what a wrongly sized state probably is.
_KNOWN_STATES = {
    5056: "a torch CPU (mt19937) state",
    16: "a CUDA/ROCm/XPU Philox state",
    44: "an MPS Philox state",
    36: "an MPS Philox state of torch < 2.5",
}


# -- streams: the CPU generator, or the generators of one accelerator backend ----------------------------
class _CpuStream:
    """The torch CPU generator (one "device")."""

    name = "cpu"
    device_type = "cpu"

    def label(self, index: int | None) -> str:
        return "cpu"

    def count(self) -> int:
        return 1

    def current_index(self) -> int:
        return 0

    def generator(self, index: int | None) -> torch.Generator:
        return torch.default_generator

    def get_state(self, index: int | None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_state(self, state: torch.Tensor, index: int | None) -> None:
        torch.set_rng_state(_fresh(state))

    def initial_seed(self, index: int | None) -> int:
        return torch.initial_seed()

    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(seed)


_CPU = _CpuStream()


class _DeviceStream:
    """The default generators of one accelerator backend's devices."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.device_type = backend.torch_device_type

    def label(self, index: int | None) -> str:
        where = self.device_type if index is None else f"{self.device_type}:{index}"
        return where if self.name == self.device_type else f"{where} ({self.name})"

    def _module(self) -> Any:
        mod = self.backend.device_module()
        if mod is None:
            raise RngUnsupportedError(
                f"accel.random: torch {torch.__version__} has no device module for {self.device_type!r}. "
                f"RNG state needs torch.{self.device_type}. Install the torch build for this hardware."
            )
        return mod

    @staticmethod
    def _upstream() -> Any:
        """``torch.accelerator.random`` where the running torch has it, else ``None``."""
        return _compat.accelerator_random()

    def _dev(self, index: int | None) -> str | torch.device:
        return self.device_type if index is None else torch.device(self.device_type, index)

    def count(self) -> int:
        return self.backend.device_count()

    def current_index(self) -> int:
        return self.backend.rng_current_index(self._module())

    def generator(self, index: int | None) -> torch.Generator:
        try:
            return self.backend.default_generator(index)
        except AttributeError as exc:
            raise RngUnsupportedError(
                f"accel.random.default_generator({self.label(index)!r}): {exc}. accel reads default generators "
                f"from torch.{self.device_type}.default_generators or torch.mps. Use get_rng_state/set_rng_state."
            ) from exc

    def get_state(self, index: int | None) -> torch.Tensor:
        upstream = self._upstream()
        if upstream is not None:
            return upstream.get_rng_state(index)
        return self._module().get_rng_state(self._dev(index))

    def get_state_all(self) -> list[torch.Tensor]:
        upstream = self._upstream()
        if upstream is not None:
            return list(upstream.get_rng_state_all())
        return self.backend.rng_states(self._module(), [self._dev(i) for i in range(self.count())])

    def set_state(self, state: torch.Tensor, index: int | None) -> None:
        self._module().set_rng_state(_fresh(state), self._dev(index))

    def initial_seed(self, index: int | None) -> int:
        upstream = self._upstream()
        if upstream is not None:
            return int(upstream.initial_seed(index))
        mod = self._module()
        if index is None:
            seed = self.backend.rng_initial_seed(mod)
            if seed is not None:
                return seed
        return int(self.generator(index).initial_seed())  # per index, and where the module has no initial_seed

    def manual_seed_all(self, seed: int) -> None:
        self.backend.rng_manual_seed_all(self._module(), seed)


def _stream_for(backend: Backend) -> _CpuStream | _DeviceStream:
    return _CPU if backend.rng_is_host else _DeviceStream(backend)


def _active() -> _CpuStream | _DeviceStream:
    return _stream_for(_select.backend())


def _resolve(device: object, what: str) -> tuple[_CpuStream | _DeviceStream, int | None]:
    """A device spec -> (stream, index or None for the current device); typed errors from accel.device."""
    if device is None:
        return _active(), None
    if isinstance(device, int) and not isinstance(device, bool):
        stream = _active()
        count = stream.count()
        if not 0 <= device < count:
            raise DeviceIndexError(
                f"{what}: device index {device} is out of range: backend {stream.name!r} has {count} device(s), "
                f"so valid indices are 0..{count - 1}. Use a smaller index or check the visible-devices variables."
            )
        return stream, device
    sel = _select.selection(device)
    stream = _stream_for(sel.backend)
    return stream, (None if stream is _CPU else sel.device.index)


# -- validation ----------------------------------------------------------------------------------------------
def _fresh(state: torch.Tensor) -> torch.Tensor:
    """A new contiguous copy of ``state`` at storage offset 0, for ``Generator.set_state``.

    torch's generators read the state from the start of its storage: a view (a row of a
    stacked tensor, a slice kept by ``torch.save``/``torch.load``) crashes the process.
    ``.contiguous()`` would return such a view unchanged, so always copy (5056 bytes at most).
    """
    return state.detach().clone(memory_format=torch.contiguous_format)


def _check_seed(seed: object, what: str) -> int:
    """``seed`` as an int. Accepts what ``operator.index`` takes, as ``torch.manual_seed`` does: an ``int``,
    a NumPy integer, a one-element integer tensor (``torch.tensor(7)``); never a ``bool`` or bool tensor."""
    bad = isinstance(seed, bool) or not hasattr(type(seed), "__index__") or (
        isinstance(seed, torch.Tensor) and (seed.dtype == torch.bool or seed.is_floating_point()))
    value: int | None = None
    if not bad:
        try:
            value = operator.index(seed)
        except (TypeError, ValueError, RuntimeError):  # tensors/arrays of several elements or a float dtype
            bad = True
    if bad or value is None:
        shown = (f"a {seed.dtype} tensor of shape {tuple(seed.shape)}" if isinstance(seed, torch.Tensor)
                 else f"{seed!r} of type {type(seed).__name__}")
        raise SeedError(
            f"{what}: got seed {shown}. A seed is an integer (an int, a NumPy integer or a one-element integer "
            f"tensor). Pass an int (e.g. int(seed))."
        )
    if not _SEED_MIN <= value <= _SEED_MAX:
        raise SeedError(
            f"{what}: seed {value} is out of range. Seeds lie in -2**63 .. 2**64 - 1 (negative seeds wrap "
            f"modulo 2**64). Reduce it, e.g. seed % 2**64."
        )
    return value


def _check_state(state: object, stream: _CpuStream | _DeviceStream, index: int | None, what: str) -> torch.Tensor:
    """Raise :class:`RngStateError` unless ``state`` can be set on that generator; returns it contiguous.

    The final check sets ``state`` on a clone of the live generator, so anything the
    generator itself would refuse is refused here, before the live generator changes.
    """
    shape_rule = "An RNG state is a 1-D torch.uint8 tensor on the CPU, as accel.random.get_rng_state() returns."
    if not isinstance(state, torch.Tensor):
        raise RngStateError(f"{what}: got {type(state).__name__}, not a tensor. {shape_rule} Pass such a tensor.")
    if not state.is_cpu:  # generators keep their state in host memory on every vendor
        raise RngStateError(
            f"{what}: the state tensor is on {state.device}. {shape_rule} Device generators keep their state "
            f"on the CPU too. Pass state.cpu()."
        )
    if state.dtype != torch.uint8:
        raise RngStateError(f"{what}: the state has dtype {state.dtype}. {shape_rule} Pass the tensor unchanged.")
    if state.dim() != 1:
        raise RngStateError(
            f"{what}: the state has shape {tuple(state.shape)}. {shape_rule} Pass the tensor unchanged."
        )
    label = stream.label(index)
    expected = stream.get_state(index).numel()
    if state.numel() != expected:
        guess = _KNOWN_STATES.get(state.numel())
        looks = f" It looks like {guess}." if guess else ""
        raise RngStateError(
            f"{what}: the state has {state.numel()} bytes; the {label} generator's state has {expected}.{looks} "
            f"A state only fits the kind of generator it came from. Pass a state read from a {stream.name} "
            f"generator."
        )
    state = _fresh(state)
    gen = stream.generator(index)
    if hasattr(gen, "clone_state"):
        try:
            gen.clone_state().set_state(_fresh(state))
        except (RuntimeError, ValueError, TypeError) as exc:
            raise RngStateError(
                f"{what}: the {label} generator rejects this state: {exc}. The state is corrupted or from another "
                f"generator. Pass a state read from this kind of generator."
            ) from exc
    return state


# -- the public API ------------------------------------------------------------------------------------------
def initial_seed(device: object = None, /) -> int:
    """The initial seed of a device's default generator.

    Args:
        device: a device spec as :func:`accel.device` takes (``"cpu"``, ``"cuda:1"``,
            an ``int`` index on the active backend); ``None`` is the active backend's
            current device.

    Returns:
        The seed (an ``int`` in ``0 .. 2**64 - 1``) last set by :func:`manual_seed`,
        :func:`seed` or the generator's creation.

    Raises:
        The errors of :func:`accel.device` for a bad ``device``.

    .. note:: Initialises the device runtime for an accelerator device.

    Example:
        >>> import accel.random
        >>> accel.random.manual_seed(1234)
        >>> accel.random.initial_seed("cpu")
        1234
    """
    stream, index = _resolve(device, "accel.random.initial_seed")
    return stream.initial_seed(index)


def seed() -> int:
    """Seed the CPU generator and every device of the active backend with one non-deterministic seed.

    Returns:
        The seed used (an ``int`` in ``0 .. 2**64 - 1``).

    .. note:: Like :func:`manual_seed`, never initialises a CUDA runtime (seeding is queued
       until first use).
    """
    value = int(torch.default_generator.seed())
    stream = _active()
    if stream is not _CPU:
        stream.manual_seed_all(value)
    return value


def manual_seed(seed: int) -> None:
    """Seed the CPU generator and every device of the active backend.

    Args:
        seed: an integer in ``-2**63 .. 2**64 - 1`` (negative seeds wrap modulo 2**64):
            an ``int``, a NumPy integer, or a one-element integer tensor
            (``torch.tensor(7)``, as ``torch.manual_seed`` takes). Not a ``bool``, a
            float (also as a tensor) or a tensor of several elements.

    Raises:
        SeedError: (a ``ValueError``) ``seed`` is not an integer or out of range; no
            generator changed.

    .. note:: Never initialises a CUDA runtime: torch queues the device seeding until
       first use, so ``fork()`` afterwards stays safe. Python ``random`` and NumPy are not
       seeded (their state is part of :func:`snapshot`).

    Example:
        >>> import torch, accel.random
        >>> accel.random.manual_seed(0)
        >>> a = torch.rand(2)
        >>> accel.random.manual_seed(0)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    value = _check_seed(seed, "accel.random.manual_seed")
    stream = _active()
    torch.default_generator.manual_seed(value)
    if stream is not _CPU:
        stream.manual_seed_all(value)


def manual_seed_all(seed: int) -> None:
    """Seed every device of the active backend (the CPU generator when the CPU backend is active).

    Args:
        seed: an integer in ``-2**63 .. 2**64 - 1``, taken as :func:`manual_seed` takes it.

    Raises:
        SeedError: (a ``ValueError``) ``seed`` is not an integer or out of range; no
            generator changed.

    .. note:: With an accelerator active the CPU generator is left alone (use
       :func:`manual_seed` for both). Never initialises a CUDA runtime.
    """
    value = _check_seed(seed, "accel.random.manual_seed_all")
    _active().manual_seed_all(value)


def get_rng_state(device: object = None, /) -> torch.Tensor:
    """The state of a device's default generator.

    Args:
        device: a device spec as :func:`accel.device` takes; ``None`` is the active
            backend's current device.

    Returns:
        A new 1-D ``torch.uint8`` CPU tensor: 5056 bytes on CPU, 16 on CUDA/ROCm/XPU,
        44 on MPS.

    Raises:
        The errors of :func:`accel.device` for a bad ``device``.

    .. note:: Initialises the device runtime for an accelerator device.
    """
    stream, index = _resolve(device, "accel.random.get_rng_state")
    return stream.get_state(index)


def set_rng_state(state: torch.Tensor, device: object = None, /) -> None:
    """Set the state of a device's default generator.

    Args:
        state: a 1-D ``torch.uint8`` CPU tensor read from the same kind of generator
            (:func:`get_rng_state`).
        device: a device spec as :func:`accel.device` takes; ``None`` is the active
            backend's current device.

    Raises:
        RngStateError: (a ``ValueError``) not a tensor, wrong dtype or shape, on a
            device, wrong size for this generator (e.g. a CPU state given to CUDA), or
            refused by the generator; the generator is unchanged.

    .. note:: Initialises the device runtime for an accelerator device (the state is
       checked against the live generator before it is set).
    """
    stream, index = _resolve(device, "accel.random.set_rng_state")
    state = _check_state(state, stream, index, f"accel.random.set_rng_state(device={stream.label(index)!r})")
    stream.set_state(state, index)


def get_rng_state_all() -> list[torch.Tensor]:
    """The state of every accelerator device of the active backend, by device index.

    As ``torch.accelerator.random.get_rng_state_all`` and ``torch.cuda.get_rng_state_all``:
    "all" means every accelerator device, never the CPU generator (read that with
    ``get_rng_state("cpu")``).

    Returns:
        One 1-D ``torch.uint8`` CPU tensor per device of the active accelerator backend;
        ``[]`` when no accelerator is active (the CPU backend), as :func:`snapshot` records
        no device streams there.

    .. versionchanged:: unreleased (after 0.1.0; CHANGELOG.md)
       Returns ``[]`` on the CPU backend; it returned ``[CPU generator state]`` before.

    .. note:: Initialises the device runtime.
    """
    stream = _active()
    return [] if stream is _CPU else stream.get_state_all()


def set_rng_state_all(states: Iterable[torch.Tensor], /) -> None:
    """Set the state of every accelerator device of the active backend; checks all before setting any.

    Args:
        states: one state per device, by index, as :func:`get_rng_state_all` returns
            (a list, tuple or other iterable of tensors; not a ``str``, ``bytes`` or mapping).
            ``[]`` when no accelerator is active (the CPU backend): then this does nothing.

    Raises:
        RngStateError: (a ``ValueError``) not a list/tuple of states, not one state per
            device (any state at all on the CPU backend), or a bad state; no generator changed.

    .. versionchanged:: unreleased (after 0.1.0; CHANGELOG.md)
       On the CPU backend takes ``[]`` (a no-op) and refuses a CPU state; it took
       ``[CPU generator state]`` before. Use :func:`set_rng_state` with ``"cpu"`` for that.

    .. note:: Initialises the device runtime.
    """
    stream = _active()
    if isinstance(states, (torch.Tensor, str, bytes, bytearray, Mapping)) or not isinstance(states, Iterable):
        raise RngStateError(
            f"accel.random.set_rng_state_all: got {type(states).__name__} {states!r:.60}, which is not a "
            f"list/tuple of states. It takes a list of states, one per device, as get_rng_state_all() returns. "
            f"Pass that list; use set_rng_state for one device."
        )
    states = list(states)
    if stream is _CPU:
        if states:
            raise RngStateError(
                f"accel.random.set_rng_state_all: got {len(states)} state(s), but no accelerator is active (the "
                f"CPU backend), so there are 0 device states: get_rng_state_all() returns [] here. Pass [] (a "
                f"no-op), or set the CPU generator with accel.random.set_rng_state(state, 'cpu')."
            )
        return
    count = stream.count()
    if len(states) != count:
        raise RngStateError(
            f"accel.random.set_rng_state_all: got {len(states)} state(s); backend {stream.name!r} has {count} "
            f"device(s). Pass one state per device, as get_rng_state_all() returns."
        )
    checked = [_check_state(s, stream, i, f"accel.random.set_rng_state_all: state {i}") for i, s in enumerate(states)]
    for i, s in enumerate(checked):
        stream.set_state(s, i)


def default_generator(device: object = None, /) -> torch.Generator:
    """The default ``torch.Generator`` of a device (``torch.default_generator`` for CPU).

    Args:
        device: a device spec as :func:`accel.device` takes; ``None`` is the active
            backend's current device.

    Raises:
        RngUnsupportedError: (a ``RuntimeError``) the running torch exposes no default
            generator for this device type.

    .. note:: Initialises the device runtime for an accelerator device.

    Example:
        >>> import torch, accel.random
        >>> accel.random.default_generator("cpu") is torch.default_generator
        True
    """
    stream, index = _resolve(device, "accel.random.default_generator")
    return stream.generator(index)


class PhiloxState(NamedTuple):
    """A Philox generator's position: ``seed`` and ``offset`` (counter increments, a multiple of 4)."""

    seed: int
    offset: int


def _philox_generator(device: object, what: str) -> tuple[torch.Generator, str]:
    stream, index = _resolve(device, what)
    if stream is _CPU:
        raise RngUnsupportedError(
            f"{what}: the CPU generator is mt19937, not Philox; it has no seed/offset pair. Philox seed/offset "
            f"exist on CUDA, ROCm, XPU and MPS generators. Use get_rng_state/set_rng_state for the CPU."
        )
    return stream.generator(index), stream.label(index)


def get_philox_state(device: object = None, /) -> PhiloxState:
    """Seed and offset of a device's Philox generator (CUDA, ROCm, XPU, MPS).

    Args:
        device: a device spec as :func:`accel.device` takes; ``None`` is the active
            backend's current device.

    Returns:
        :class:`PhiloxState` ``(seed, offset)``.

    Raises:
        RngUnsupportedError: (a ``RuntimeError``) the device's generator has no
            seed/offset (the CPU's mt19937).

    .. note:: Initialises the device runtime.
    """
    what = "accel.random.get_philox_state"
    gen, label = _philox_generator(device, what)
    try:
        return PhiloxState(int(gen.initial_seed()), int(gen.get_offset()))
    except RuntimeError as exc:
        raise RngUnsupportedError(
            f"{what}: the {label} generator exposes no offset: {exc}. Use get_rng_state instead."
        ) from exc


def set_philox_state(state: tuple[int, int], device: object = None, /) -> None:
    """Set seed and offset of a device's Philox generator.

    Args:
        state: ``(seed, offset)``, e.g. a :class:`PhiloxState`; ``offset`` is a
            non-negative multiple of 4 below 2**64.
        device: a device spec as :func:`accel.device` takes; ``None`` is the active
            backend's current device.

    Raises:
        SeedError: (a ``ValueError``) bad seed or offset; the generator is unchanged.
        RngUnsupportedError: (a ``RuntimeError``) the device's generator has no
            seed/offset (the CPU's mt19937).

    .. note:: Initialises the device runtime.
    """
    what = "accel.random.set_philox_state"
    if not isinstance(state, tuple) or len(state) != 2:
        raise SeedError(f"{what}: got {state!r}. The state is a (seed, offset) pair. Pass a PhiloxState.")
    seed_value = _check_seed(state[0], what)
    offset = _check_seed(state[1], what)
    if offset < 0 or offset % 4:
        raise SeedError(
            f"{what}: offset {offset} is negative or not a multiple of 4. Philox offsets count 4-wide counter "
            f"increments. Pass an offset read by get_philox_state."
        )
    gen, label = _philox_generator(device, what)
    before = gen.get_state()
    try:
        gen.manual_seed(seed_value)
        gen.set_offset(offset)
    except RuntimeError as exc:
        gen.set_state(before)
        raise RngUnsupportedError(
            f"{what}: the {label} generator refused seed/offset: {exc}. It is unchanged. Use set_rng_state."
        ) from exc


def _fork_targets(devices: object) -> tuple[_CpuStream | _DeviceStream, list[int]]:
    """Which device generators :func:`fork_rng` saves (the CPU generator is always saved)."""
    if devices is None:
        stream = _active()
        return stream, ([] if stream is _CPU else list(range(stream.count())))
    if isinstance(devices, (str, int, torch.device)):
        devices = [devices]
    if not isinstance(devices, Iterable):
        raise InvalidDeviceError(
            f"accel.random.fork_rng: devices={devices!r} is not a list of devices. Pass None (every device of the "
            f"active backend), or a list such as [0, 1] or ['cuda:0']."
        )
    chosen: _DeviceStream | None = None
    indices: list[int] = []
    for spec in devices:
        stream, index = _resolve(spec, "accel.random.fork_rng")
        if stream is _CPU:
            continue  # the CPU generator is always forked
        if chosen is not None and chosen.device_type != stream.device_type:
            raise DeviceMismatchError(
                f"accel.random.fork_rng: devices mix {chosen.device_type!r} and {stream.device_type!r}. One fork "
                f"covers the CPU and one accelerator type. Nest two fork_rng blocks instead."
            )
        chosen = stream
        index = stream.current_index() if index is None else index
        if index not in indices:
            indices.append(index)
    return (chosen if chosen is not None else _CPU), indices


@contextlib.contextmanager
def fork_rng(devices: Iterable[object] | None = None, enabled: bool = True, *,
             all_streams: bool = False) -> Iterator[None]:
    """Save the CPU generator and device generators, and put them back when the block exits.

    The device type comes from ``devices`` when given, else from the active backend
    (:func:`accel.backend`): on XPU the XPU generators are forked, never CUDA's; a
    list of CPU devices forks only the CPU generator and touches no accelerator.

    Args:
        devices: device specs (``[0, 1]``, ``["xpu:0"]``, ``["cpu"]``); ``None``: every
            device of the active backend. CPU entries add nothing (CPU is always forked).
        enabled: ``False`` makes this a no-op context.
        all_streams: also fork Python ``random`` and NumPy's global state (off by
            default, as in ``torch.random.fork_rng``).

    Raises:
        DeviceMismatchError: (a ``ValueError``) ``devices`` mixes accelerator types.
        InvalidDeviceError: (a ``TypeError``) ``devices`` is not a list of device specs.
        AccelError: the errors of :func:`accel.device` for a bad device spec, before any state is read.

    .. note:: Initialises the runtime of the forked devices.

    Example:
        >>> import torch, accel.random
        >>> before = torch.get_rng_state()
        >>> with accel.random.fork_rng(["cpu"]):
        ...     _ = torch.rand(100)
        >>> torch.equal(before, torch.get_rng_state())
        True
    """
    if not enabled:
        yield
        return
    stream, indices = _fork_targets(devices)
    np = _numpy() if all_streams else None
    py_state = _pyrandom.getstate() if all_streams else None
    np_state = np.random.get_state() if np is not None else None
    cpu_state = torch.get_rng_state()
    saved = [(i, stream.get_state(i)) for i in indices]
    try:
        yield
    finally:
        torch.set_rng_state(cpu_state)
        for i, state in saved:
            stream.set_state(state, i)
        if py_state is not None:
            _pyrandom.setstate(py_state)
        if np_state is not None:
            np.random.set_state(np_state)


# -- snapshot / restore ----------------------------------------------------------------------------------------
def _numpy() -> Any:
    """NumPy if installed, else ``None`` (imported on first use only)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _python_state() -> dict[str, Any]:
    version, internal, gauss_next = _pyrandom.getstate()
    return {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": None if gauss_next is None else float(gauss_next)}


def _numpy_state() -> dict[str, Any] | None:
    np = _numpy()
    if np is None:
        return None
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {"bit_generator": str(name), "key": torch.from_numpy(np.asarray(key, dtype=np.int64).copy()),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def snapshot() -> dict[str, Any]:
    """Every RNG stream of this process as a plain dict, for checkpoints.

    Returns:
        ``{"format", "version", "accel", "torch", "vendor", "device_type",
        "device_count", "python", "numpy", "torch_cpu", "devices"}``: Python
        ``random``'s state (625 words as an ``int64`` tensor), NumPy's global
        ``RandomState`` (``None`` without NumPy; key as an ``int64`` tensor), the torch
        CPU state and one state per device of the active backend (``uint8`` CPU
        tensors), with the backend name (``vendor``) and ``device_count``: the number of
        per-device states in ``devices`` (``0`` on the CPU, whose state is ``torch_cpu``). Only tensors and
        Python primitives: ``torch.save`` then ``torch.load`` (``weights_only=True``)
        need no allow-listing.

    .. note:: Initialises the device runtime of the active accelerator. NumPy
       ``Generator`` objects (``np.random.default_rng()``) have no global state and are
       not included.

    Example:
        >>> import io, random, torch, accel.random
        >>> snap = accel.random.snapshot()
        >>> buf = io.BytesIO(); torch.save(snap, buf); _ = buf.seek(0)
        >>> x, t = random.random(), torch.rand(1)
        >>> _ = accel.random.restore(torch.load(buf, weights_only=True))
        >>> x == random.random() and torch.equal(t, torch.rand(1))
        True
    """
    backend = _select.backend()
    stream = _stream_for(backend)
    devices = [] if stream is _CPU else [s.clone() for s in stream.get_state_all()]
    from accel._version import __version__

    return {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "accel": str(__version__),
        "torch": str(torch.__version__),
        "vendor": backend.name,
        "device_type": backend.torch_device_type,
        "device_count": len(devices),
        "python": _python_state(),
        "numpy": _numpy_state(),
        "torch_cpu": torch.get_rng_state(),
        "devices": devices,
    }


def _corrupt(part: str, detail: str) -> RngSnapshotError:
    detail = detail.removeprefix(f"{part}: ").rstrip(".")  # a checker's own message may name the part, end in '.'
    return RngSnapshotError(
        f"accel.random.restore: the snapshot is corrupted: {part}: {detail}. Nothing was restored. "
        f"Restore a snapshot made by accel.random.snapshot() and saved unchanged."
    )


def _words(value: object, part: str, n: int) -> list[int]:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 1 or value.numel() != n:
        shown = (f"{value.dtype} tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                 else type(value).__name__)
        raise _corrupt(part, f"expected an int64 tensor of {n} words, got {shown}")
    words = value.tolist()
    if any(w < 0 or w >= 2**32 for w in words):
        raise _corrupt(part, "a word is outside 0 .. 2**32 - 1")
    return words


def _check_mt19937_key(words: list[int], part: str) -> None:
    """Refuse a degenerate MT19937 key: its 19937 state bits (the top bit of word 0 and words 1..623) all zero.

    Python's ``random.setstate`` and NumPy's ``set_state`` accept such a key, and the
    generator then returns 0 forever; seeding never produces one.
    """
    if not words[0] & 0x80000000 and not any(words[1:624]):
        raise _corrupt(part, "degenerate MT19937 state (every state bit of the key is zero: the generator would "
                             "only ever return 0)")


def _plan_python(part: object) -> tuple[Any, ...]:
    if not isinstance(part, dict) or set(part) != {"version", "internal", "gauss_next"}:
        raise _corrupt("python", f"expected a dict with version, internal, gauss_next; got {part!r:.80}")
    gauss, version = part["gauss_next"], part["version"]
    if gauss is not None and not isinstance(gauss, float):
        raise _corrupt("python", f"gauss_next is {type(gauss).__name__}, not a float or None")
    if gauss is not None and not math.isfinite(gauss):  # random.setstate takes it; the next gauss() returns it
        raise _corrupt("python", f"gauss_next is {gauss}, not a finite float (a cached Gaussian sample)")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _corrupt("python", f"version is {type(version).__name__}, not an int")
    words = _words(part["internal"], "python.internal", 625)
    _check_mt19937_key(words, "python.internal")
    state = (version, tuple(words), gauss)
    try:
        _pyrandom.Random().setstate(state)  # dry run on a scratch generator
    except (ValueError, TypeError, OverflowError) as exc:
        raise _corrupt("python", f"random.setstate refuses it: {exc}") from exc
    return state


def _plan_numpy(part: object, np: Any) -> tuple[Any, ...]:
    keys = {"bit_generator", "key", "pos", "has_gauss", "cached_gaussian"}
    if not isinstance(part, dict) or set(part) != keys:
        raise _corrupt("numpy", f"expected a dict with {', '.join(sorted(keys))}; got {part!r:.80}")
    if not isinstance(part["bit_generator"], str) or part["bit_generator"] != "MT19937":
        raise _corrupt("numpy", f"bit generator {part['bit_generator']!r:.60}; NumPy's global state is 'MT19937'")
    words = _words(part["key"], "numpy.key", 624)
    _check_mt19937_key(words, "numpy.key")
    for name, kind in (("pos", int), ("has_gauss", int), ("cached_gaussian", float)):
        if not isinstance(part[name], kind) or isinstance(part[name], bool):
            raise _corrupt("numpy", f"{name} is {type(part[name]).__name__}, not {kind.__name__}")
    if not 0 <= part["pos"] <= 624 or part["has_gauss"] not in (0, 1):
        raise _corrupt("numpy", f"pos {part['pos']} / has_gauss {part['has_gauss']} outside 0..624 / 0..1")
    if not math.isfinite(part["cached_gaussian"]):  # set_state takes it; the next standard_normal() returns it
        raise _corrupt("numpy", f"cached_gaussian is {part['cached_gaussian']}, not a finite float")
    if np is None:
        return ()
    state = ("MT19937", np.asarray(words, dtype=np.uint32), part["pos"], part["has_gauss"], part["cached_gaussian"])
    try:
        np.random.RandomState().set_state(state)  # dry run on a scratch generator
    except (ValueError, TypeError) as exc:
        raise _corrupt("numpy", f"RandomState.set_state refuses it: {exc}") from exc
    return state


def _plan_tensor(state: object, stream: _CpuStream | _DeviceStream, index: int | None, part: str) -> torch.Tensor:
    try:
        return _check_state(state, stream, index, part)
    except RngStateError as exc:
        raise _corrupt(part, str(exc)) from exc


def restore(snapshot: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    """Put back the RNG streams of a :func:`snapshot`, each on its own.

    Everything is checked before anything is set. Streams that cannot apply here
    (NumPy not installed, another vendor, fewer devices, no accelerator) are skipped
    and named in ONE :class:`~accel.errors.RngRestoreWarning`; a stream that fails to
    set does not stop the others.

    Args:
        snapshot: a dict from :func:`snapshot` (also after ``torch.save``/``torch.load``).
        strict: raise instead of skipping: then nothing is set when a stream cannot apply.

    Returns:
        ``{"restored": [part names], "skipped": {part: reason}, "failed": {part: error}}``;
        parts are ``"python"``, ``"numpy"``, ``"torch_cpu"``, ``"<device type>:<index>"``.

    Raises:
        RngSnapshotVersionError: (a ``ValueError``) written by a newer accel; nothing set.
        RngSnapshotError: (a ``ValueError``) not a snapshot, or corrupted (a field of the
            wrong type, a state a generator refuses, a degenerate all-zero MT19937 key in
            the Python or NumPy part, a cached Gaussian that is NaN or inf); nothing set.
        RngRestoreError: (a ``RuntimeError``) ``strict=True`` and a stream cannot apply
            (nothing set) or failed to set (the others were set).

    .. note:: Initialises the device runtime when the snapshot holds device streams of
       the active vendor.
    """
    plan, skipped = _plan(snapshot)
    if strict and skipped:
        raise RngRestoreError(
            "accel.random.restore(strict=True): part(s) of the snapshot cannot apply here:\n"
            + "\n".join(f"  {k}: {v}" for k, v in skipped.items())
            + "\nNothing was restored. Restore on a matching machine, or pass strict=False to restore the rest."
        )
    restored: list[str] = []
    failed: dict[str, str] = {}
    for name, apply in plan:
        try:
            apply()
        except Exception as exc:  # noqa: BLE001 - one stream failing must not stop the others; reported below
            failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            restored.append(name)
    lines = [f"  {k}: skipped: {v}" for k, v in skipped.items()] + [f"  {k}: failed: {v}" for k, v in failed.items()]
    if failed and strict:
        raise RngRestoreError(
            "accel.random.restore(strict=True): part(s) failed to restore:\n" + "\n".join(lines)
            + f"\nRestored: {', '.join(restored) or 'nothing'}. Check the device, then restore again."
        )
    if lines:
        warnings.warn(
            f"accel.random.restore: {len(lines)} part(s) of the snapshot were not restored:\n" + "\n".join(lines)
            + f"\nRestored: {', '.join(restored) or 'nothing'}. Draws from the parts above will differ from the "
            f"run that made the snapshot. Pass strict=True to make this an error.",
            RngRestoreWarning,
            stacklevel=2,
        )
    return {"restored": restored, "skipped": skipped, "failed": failed}


def _plan(snap: object) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """Check the whole snapshot; return (what to set, in order) and (what to skip, why). Sets nothing."""
    fmt = snap.get("format") if isinstance(snap, dict) else None
    if not isinstance(fmt, str) or fmt != SNAPSHOT_FORMAT:  # isinstance first: a NumPy array's != is elementwise
        shown = fmt if isinstance(snap, dict) else type(snap).__name__
        raise RngSnapshotError(
            f"accel.random.restore: not an accel RNG snapshot (format: {shown!r:.80}). It takes the dict "
            f"accel.random.snapshot() returns. Pass that dict (after torch.load if it was saved). Nothing was restored."
        )
    version = snap.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _corrupt("version", f"{version!r} is not a positive int")
    if version > SNAPSHOT_VERSION:
        raise RngSnapshotVersionError(
            f"accel.random.restore: snapshot format version {version} is newer than this accel reads "
            f"(up to {SNAPSHOT_VERSION}). Nothing was restored. Upgrade accel (pip install -U accel-portability)."
        )
    required = ("vendor", "device_type", "device_count", "python", "numpy", "torch_cpu", "devices")
    missing = [k for k in required if k not in snap]
    if missing:
        raise _corrupt("keys", f"missing {', '.join(missing)}")
    vendor, devices, count = snap["vendor"], snap["devices"], snap["device_count"]
    if not isinstance(vendor, str) or not isinstance(snap["device_type"], str):
        raise _corrupt("vendor", f"vendor {vendor!r:.60} / device_type {snap['device_type']!r:.60} are not strings")
    if not isinstance(count, int) or isinstance(count, bool):
        raise _corrupt("device_count", f"{type(count).__name__} {count!r:.60} is not an int")
    if not isinstance(devices, list) or count != len(devices):
        raise _corrupt("devices", f"expected a list of {count!r} states, got {type(devices).__name__}"
                       f"{' of ' + str(len(devices)) if isinstance(devices, list) else ''}")
    for i, s in enumerate(devices):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.uint8 or s.dim() != 1 or not s.is_cpu:
            raise _corrupt(f"devices[{i}]", f"not a 1-D uint8 CPU tensor ({type(s).__name__})")

    plan: list[tuple[str, Any]] = []
    skipped: dict[str, str] = {}
    py_state = _plan_python(snap["python"])
    plan.append(("python", lambda: _pyrandom.setstate(py_state)))
    if snap["numpy"] is not None:
        np = _numpy()
        np_state = _plan_numpy(snap["numpy"], np)
        if np is None:
            skipped["numpy"] = "NumPy is not installed here"
        else:
            plan.append(("numpy", lambda: np.random.set_state(np_state)))
    cpu_state = _plan_tensor(snap["torch_cpu"], _CPU, None, "torch_cpu")
    plan.append(("torch_cpu", lambda: torch.set_rng_state(cpu_state)))

    if devices:
        here = _active()
        dtype = snap["device_type"]
        names = f"{dtype}:0..{len(devices) - 1}" if len(devices) > 1 else f"{dtype}:0"
        if here is _CPU:
            skipped[names] = f"{len(devices)} {vendor} device stream(s) in the snapshot; no accelerator is active here"
        elif here.name != vendor:
            skipped[names] = (f"the snapshot's streams are from vendor {vendor!r}; the active backend here is "
                              f"{here.name!r} (states of one vendor's generator do not apply to another's)")
        else:
            count = here.count()
            for i, state in enumerate(devices[:count]):
                checked = _plan_tensor(state, here, i, f"devices[{i}] ({here.label(i)})")
                plan.append((f"{here.device_type}:{i}", lambda s=checked, i=i: here.set_state(s, i)))
            if len(devices) > count:
                rest = f"{dtype}:{count}" + (f"..{len(devices) - 1}" if len(devices) - count > 1 else "")
                skipped[rest] = f"the snapshot has {len(devices)} {vendor} device stream(s); this machine has {count}"
    return plan, skipped
