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
import random as _pyrandom
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import torch

from accel._rng_snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION, restore, snapshot
from accel._rng_streams import CPU, CpuStream, DeviceStream, active, check_seed, check_state, numpy_module, resolve
from accel.errors import DeviceMismatchError, InvalidDeviceError, RngStateError, RngUnsupportedError, SeedError

# snapshot and restore live in accel._rng_snapshot; this is their public home (what the docs and reprs name)
snapshot.__module__ = restore.__module__ = __name__

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
    stream, index = resolve(device, "accel.random.initial_seed")
    return stream.initial_seed(index)


def seed() -> int:
    """Seed the CPU generator and every device of the active backend with one non-deterministic seed.

    Returns:
        The seed used (an ``int`` in ``0 .. 2**64 - 1``).

    .. note:: Like :func:`manual_seed`, never initialises a CUDA runtime (seeding is queued
       until first use).
    """
    value = int(torch.default_generator.seed())
    stream = active()
    if stream is not CPU:
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
    value = check_seed(seed, "accel.random.manual_seed")
    stream = active()
    torch.default_generator.manual_seed(value)
    if stream is not CPU:
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
    value = check_seed(seed, "accel.random.manual_seed_all")
    active().manual_seed_all(value)


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
    stream, index = resolve(device, "accel.random.get_rng_state")
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
    stream, index = resolve(device, "accel.random.set_rng_state")
    state = check_state(state, stream, index, f"accel.random.set_rng_state(device={stream.label(index)!r})")
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
    stream = active()
    return [] if stream is CPU else stream.get_state_all()


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
    stream = active()
    if isinstance(states, (torch.Tensor, str, bytes, bytearray, Mapping)) or not isinstance(states, Iterable):
        raise RngStateError(
            f"accel.random.set_rng_state_all: got {type(states).__name__} {states!r:.60}, which is not a "
            f"list/tuple of states. It takes a list of states, one per device, as get_rng_state_all() returns. "
            f"Pass that list; use set_rng_state for one device."
        )
    states = list(states)
    if stream is CPU:
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
    checked = [check_state(s, stream, i, f"accel.random.set_rng_state_all: state {i}") for i, s in enumerate(states)]
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
    stream, index = resolve(device, "accel.random.default_generator")
    return stream.generator(index)


class PhiloxState(NamedTuple):
    """A Philox generator's position: ``seed`` and ``offset`` (counter increments, a multiple of 4)."""

    seed: int
    offset: int


def _philox_generator(device: object, what: str) -> tuple[torch.Generator, str]:
    stream, index = resolve(device, what)
    if stream is CPU:
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
    seed_value = check_seed(state[0], what)
    offset = check_seed(state[1], what)
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


def _fork_targets(devices: object) -> tuple[CpuStream | DeviceStream, list[int]]:
    """Which device generators :func:`fork_rng` saves (the CPU generator is always saved)."""
    if devices is None:
        stream = active()
        return stream, ([] if stream is CPU else list(range(stream.count())))
    if isinstance(devices, (str, int, torch.device)):
        devices = [devices]
    if not isinstance(devices, Iterable):
        raise InvalidDeviceError(
            f"accel.random.fork_rng: devices={devices!r} is not a list of devices. Pass None (every device of the "
            f"active backend), or a list such as [0, 1] or ['cuda:0']."
        )
    chosen: DeviceStream | None = None
    indices: list[int] = []
    for spec in devices:
        stream, index = resolve(spec, "accel.random.fork_rng")
        if stream is CPU:
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
    return (chosen if chosen is not None else CPU), indices


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
    np = numpy_module() if all_streams else None
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
