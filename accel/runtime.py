"""Device runtime: synchronize, device index, streams and events, on every vendor and torch 2.9+.

One API over ``torch.accelerator`` and the device modules (``torch.cuda``,
``torch.xpu``, ``torch.mps``). The functions are plain module-level functions; the
torch functions behind them are resolved once for the active backend
(:func:`accel.backend`) at first use, through :mod:`accel._compat` (where torch has a
function that gives exactly accel's answer, that function itself is called, unchanged).
:func:`accel.clear_cache` resolves them again.

=============================  =====================================================
function                       what it does (CPU behaviour)
=============================  =====================================================
``synchronize(device=None,/)``  wait for all work queued on the device (no-op on CPU;
                               no-op while the device runtime is not initialised)
``device_count()``             visible devices of the active backend (CPU: ``1``)
``current_device_index()``     the current device index (CPU: ``0``)
``set_device_index(device,/)``  make ``device`` current (CPU: only ``0``, a no-op)
``device_index(device, /)``    context manager: ``device`` current inside the block
``current_stream(device=None,/)``  the current :class:`Stream` of ``device``
                               (CPU: the CPU's one stream, ``torch.Stream("cpu")``)
``set_stream(stream, /)``      make ``stream`` current; also makes its device current
                               (CPU: accepts a CPU stream, a no-op)
``stream(stream, /)``          context manager: ``stream`` current inside the block
``Stream`` / ``Event``         ``torch.Stream`` / ``torch.Event`` (generic classes; ``accel.Event(...)``
                              makes a ``torch.Event``, checking the device first)
``elapsed_time(start, end,/)``  milliseconds between two recorded events (CPU: raises
                               :class:`~accel.errors.UnsupportedOperationError`)
=============================  =====================================================

A ``device`` argument is an ``int`` index, a ``str`` (``"cuda"``, ``"cuda:1"``, or the
backend name such as ``"rocm:1"``), a ``torch.device`` of the active backend's device
type, or ``None`` (the current device) where allowed. Anything else raises a typed
error from :mod:`accel.errors` that names the value and the valid range, before any
state is touched: :class:`~accel.errors.DeviceIndexError` (index outside
``0 .. device_count() - 1``), :class:`~accel.errors.DeviceMismatchError` (another
vendor's device, ``"xpu:0"`` while CUDA is active) or
:class:`~accel.errors.InvalidDeviceError` (not a device at all).

Example:
    >>> import accel
    >>> from accel.testing import fake_backend
    >>> with fake_backend("cpu"):
    ...     accel.synchronize()
    ...     accel.device_count(), accel.current_device_index()
    ...     with accel.device_index(0):
    ...         accel.current_stream().device
    (1, 0)
    device(type='cpu')
"""

from __future__ import annotations

from typing import TypeAlias

import torch

from accel import _compat, _probe
from accel._select import backend as _active_backend
from accel._select import parse_index, split_spec
from accel.backends import registered
from accel.errors import (
    DeviceIndexError,
    DeviceMismatchError,
    InvalidDeviceError,
    InvalidEventError,
    InvalidStreamError,
    UnsupportedOperationError,
)

__all__ = [
    "Event",
    "Stream",
    "current_device_index",
    "current_stream",
    "device_count",
    "device_index",
    "elapsed_time",
    "set_device_index",
    "set_stream",
    "stream",
    "synchronize",
]

#: ``torch.Stream``: the generic stream class (``torch.cuda.Stream`` is a subclass).
Stream = _compat.stream_class()
class _EventType(type):
    """``isinstance(e, accel.Event)`` is ``isinstance(e, torch.Event)``: accel's events are torch's."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _compat.event_class())

    def __subclasscheck__(cls, sub: type) -> bool:
        return isinstance(sub, type) and issubclass(sub, _compat.event_class())


class Event(metaclass=_EventType):
    """Make a ``torch.Event`` on a device of the active backend (the object returned IS a ``torch.Event``).

    ``Event(device=None, *, enable_timing=False, blocking=False, interprocess=False)``, as
    ``torch.Event``'s constructor, except that ``device`` (an index, ``'cuda:1'``, a
    ``torch.device`` or ``None``: the current device of the active backend, not torch's
    default accelerator) is checked like every accel device argument, and the CPU - which has
    no events - is refused here rather than at ``record()``. ``Event(enable_timing=True)``
    for timing with :func:`elapsed_time`. Any ``torch.Event`` (``torch.cuda.Event``,
    ``Stream.record_event()``) counts as an ``accel.Event`` in ``isinstance``.

    (Not a subclass: torch's C methods - ``elapsed_time``, ``Stream.record_event`` - refuse
    Python subclasses of ``torch.Event`` as arguments.)

    Raises:
        UnsupportedOperationError: the active backend is the CPU (torch has no CPU events; time
            host code with ``time.perf_counter_ns()``). It is a ``RuntimeError``, as torch's was.
        DeviceMismatchError, DeviceIndexError, InvalidDeviceError: ``device`` is not a device of
            the active backend.

    .. note:: Creating an event initialises the device's runtime (as ``torch.Event`` does).
    """

    def __new__(cls, device: object = None, *, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        rt = _runtime()
        if not rt.backend.has_events:
            if device is not None:
                rt.index(device, "accel.Event")  # a device of another backend: the typed mismatch error
            raise UnsupportedOperationError(
                f"accel.Event: the active backend is {rt.name!r}, which has no events (torch: '{rt.type} backend "
                "doesn't support events'). Time host code with time.perf_counter_ns(), or select an accelerator.")
        index = rt.index(device, "accel.Event")
        return _compat.event_class()(torch.device(rt.type, index), enable_timing=enable_timing, blocking=blocking,
                                     interprocess=interprocess)


class _Runtime:
    """The active backend's runtime operations, resolved once (cleared by ``accel.clear_cache``)."""

    def __init__(self) -> None:
        b = _active_backend()
        self.backend = b
        self.name = b.name
        self.type = t = b.torch_device_type
        self.count = b.device_count()  # from the probe: never initialises a device
        self.accepted = frozenset({b.name, t})
        self._stream_type_ids: set[int] = set()  # c10 device type ids of streams that passed the full check
        fns = b.runtime_functions(self.count)
        self.device_count = fns["device_count"]
        self.is_initialized = fns["is_initialized"]
        self.current = fns["current"]
        self.set_device = fns["set_device"]
        self.sync, self.sync_device = fns["sync"], fns["sync_device"]
        self.get_stream, self.set_stream = fns["get_stream"], fns["set_stream"]
        #: ``set_stream`` is torch's ``_accelerator_setStream`` binding, which refuses a bad stream
        #: (not a stream, another device type, a device that is not visible) before changing anything.
        self.set_stream_checks = self.set_stream is _compat.accelerator_set_stream()

    def valid(self) -> str:
        """The valid devices, for messages: ``"indices 0..7 ('cuda:0'..'cuda:7')"``."""
        last = self.count - 1
        return f"valid indices are 0..{last} ('{self.type}:0'..'{self.type}:{last}')"

    def index(self, device: object, what: str) -> int:
        """The index ``device`` names on the active backend; ``None`` means the current one.

        Raises:
            DeviceIndexError: index outside ``0 .. count - 1``.
            DeviceMismatchError: a device of another type than the active backend's.
            InvalidDeviceError: not an ``int``, ``str``, ``torch.device`` or ``None``.
        """
        if type(device) is int:
            if 0 <= device < self.count:
                return device
            shown, idx = repr(device), device
        elif device is None:
            return self.current()
        elif isinstance(device, torch.device):
            kind, idx, shown = device.type, device.index, repr(device)
            self._check_type(kind, shown, what)
            if idx is None:
                return self.current()
        elif isinstance(device, str):
            kind, text = split_spec(device)
            shown = repr(device)
            self._check_type(kind, shown, what, typed=True)
            if text is None:
                return self.current()
            idx = parse_index(text, f"{what}: device {shown}",
                              f"Backend {self.name!r} has {self.count} device(s): {self.valid()}. Pass one of those.")
        else:
            raise InvalidDeviceError(
                f"{what}: got {device!r} of type {type(device).__name__}, which is not a device. A device is an "
                f"int index, a str such as '{self.type}:0', a torch.device of type '{self.type}' or None (the "
                f"current device); backend {self.name!r}: {self.valid()}. Pass one of those."
            )
        if 0 <= idx < self.count:
            return idx
        raise DeviceIndexError(
            f"{what}: device index {idx}{'' if shown == str(idx) else f' (from {shown})'} is out of range: backend {self.name!r} has {self.count} "
            f"visible device(s), so {self.valid()}. Use an index in that range or check the visible-devices "
            f"variables."
        )

    def _check_type(self, kind: str, shown: str, what: str, typed: bool = False) -> None:
        """``typed``: ``kind`` was typed by the user (a string), so it may be a misspelling; a
        ``torch.device`` always names a real device type."""
        if kind not in self.accepted:
            found = registered()
            known = sorted(found)
            if typed and kind not in found and kind not in {cls.torch_device_type for cls in found.values()}:
                raise DeviceMismatchError(
                    f"{what}: device {shown} names no backend or device type ({kind!r}; backends: "
                    f"{', '.join(known)}). The active backend is {self.name!r} ({self.valid()}). Fix the spelling, "
                    f"e.g. '{self.type}:0', or pass None for the current device.")
            raise DeviceMismatchError(
                f"{what}: device {shown} is of type {kind!r}, but the active backend is {self.name!r} (torch "
                f"device type {self.type!r}; {self.valid()}). Pass a device of the active backend, or select "
                f"another backend with ACCEL_DEVICE (then call accel.clear_cache())."
            )

    def check_stream(self, s: object, what: str) -> int:
        """Validate a stream of the active backend; returns its device index."""
        if isinstance(s, Stream) and s.device_type in self._stream_type_ids:  # fast path: a type seen before
            if self.backend.host_stream:
                return 0
            i = s.device_index
            if 0 <= i < self.count:
                return i
        if not isinstance(s, Stream):
            raise InvalidStreamError(
                f"{what}: got {s!r} of type {type(s).__name__}, which is not a stream. Pass a torch.Stream (for "
                f"example accel.current_stream() or accel.Stream({self.type!r}))."
            )
        dev = s.device
        self._check_type(dev.type, repr(s), what)
        i = 0 if self.backend.host_stream else self.index(dev.index, what)
        self._stream_type_ids.add(s.device_type)
        return i


_RT: _Runtime | None = None


def active_runtime() -> _Runtime:
    """The active backend's runtime operations, resolved at first use (:mod:`accel.memory` builds on them)."""
    global _RT
    if _RT is None:
        _RT = _Runtime()
    return _RT


_runtime = active_runtime


def _forget() -> None:
    global _RT
    _RT = None


_probe.on_clear(_forget)


#: What a ``device`` argument may be: an index, ``"cuda:1"``-style str, ``torch.device`` or ``None`` (current).
DeviceLike: TypeAlias = "int | str | torch.device | None"


# The public functions below are plain module-level definitions (visible to editors and type checkers);
# each reads the active backend's resolved operations from ``_RT`` (built once by :func:`active_runtime`,
# forgotten by ``accel.clear_cache``), so a call costs one global look-up over the resolved function.

def synchronize(device: DeviceLike = None, /) -> None:
    """Wait until all work queued on ``device`` (default: the current device) has finished.

    Args:
        device: ``None``, an index, ``"cuda:1"``-style str or ``torch.device``.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: A no-op on the CPU, and while the device runtime is not initialised
       (nothing can be queued then); it never initialises a device.
    """
    rt = _RT or active_runtime()
    if device is None:
        if rt.is_initialized():
            rt.sync()
        return
    i = rt.index(device, "accel.synchronize")
    if rt.is_initialized():
        # The current device's sync is the cheap one (cudaDeviceSynchronize); a device
        # sync of another index swaps the current device around it (~1 us more on the H200).
        if i == rt.current():
            rt.sync()
        else:
            rt.sync_device(i)


def device_count() -> int:
    """Visible devices of the active backend: ``1`` on the CPU and MPS, else the backend's count.

    Returns:
        int, the number of devices the active backend sees (after the visible-devices variables).

    .. note:: Takes no argument, as torch's. Never initialises the device runtime.
    """
    return (_RT or active_runtime()).device_count()


def current_device_index() -> int:
    """Index of the current device of the active backend: always ``0`` on the CPU and MPS (one device).

    Returns:
        int, in ``0 .. device_count() - 1``.
    """
    return (_RT or active_runtime()).current()


def set_device_index(device: DeviceLike, /) -> None:
    """Make ``device`` the current device (an index, ``"cuda:1"``-style str or ``torch.device``).

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``
        (``None`` too: say which device).

    .. note:: Initialises the device runtime (CUDA/HIP/XPU). A no-op on CPU and MPS
       (one device, index 0).
    """
    rt = _RT or active_runtime()
    if device is None:
        raise InvalidDeviceError(
            f"accel.set_device_index: got None. Say which device to make current: {rt.valid()}."
        )
    rt.set_device(rt.index(device, "accel.set_device_index"))


def current_stream(device: DeviceLike = None, /) -> torch.Stream:
    """The current :class:`Stream` of ``device`` (default: the current device).

    Returns:
        ``torch.Stream`` (on CUDA through ``torch.cuda`` fallbacks, a ``torch.cuda.Stream``,
        a subclass). On CPU the CPU's one stream, ``torch.Stream("cpu")``.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Initialises the device runtime (CUDA/HIP/XPU).
    """
    rt = _RT or active_runtime()
    if device is None:
        return rt.get_stream(rt.current())
    return rt.get_stream(rt.index(device, "accel.current_stream"))


def set_stream(stream: torch.Stream, /) -> None:
    """Make ``stream`` the current stream of its device, and its device the current device.

    Raises:
        InvalidStreamError: ``stream`` is not a ``torch.Stream``.
        DeviceMismatchError, DeviceIndexError: a stream of another backend, or of a device
        that is not visible.

    .. note:: A no-op on CPU (after validation).
    """
    rt = _RT or active_runtime()
    if rt.set_stream_checks:
        # torch's binding checks the stream itself (not a stream -> TypeError, another device
        # type or a device that is not visible -> RuntimeError) before it changes anything, so
        # the typed validation runs only when it refuses: no cost on the good path.
        try:
            rt.set_stream(stream)
        except (TypeError, RuntimeError, ValueError):
            rt.check_stream(stream, "accel.set_stream")
            raise
        return
    rt.check_stream(stream, "accel.set_stream")
    rt.set_stream(stream)


class device_index:  # noqa: N801 - a context manager named like torch.accelerator.device_index
    """Context manager: ``device`` is the current device inside the block, the previous one after.

    Args:
        device: an index, ``"cuda:1"``-style str, ``torch.device``, or ``None`` (changes nothing).

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``, raised when
        the object is created, before any state changes.

    .. note:: Initialises the device runtime (CUDA/HIP/XPU) on entry. On CPU and MPS it
       only validates (one device, index 0).

    Example:
        >>> import accel
        >>> from accel.testing import fake_backend
        >>> with fake_backend("cpu"):
        ...     with accel.device_index(0) as i:
        ...         i
        0
    """

    __slots__ = ("_index", "_prev", "_rt")

    def __init__(self, device: object, /) -> None:
        self._rt = rt = _runtime()
        self._index = None if device is None else rt.index(device, "accel.device_index")
        #: the device current before each entry not yet exited (one object may be entered again, nested)
        self._prev: list[int] = []

    def __enter__(self) -> int | None:
        i = self._index
        if i is not None:
            prev = self._rt.current()
            self._prev.append(prev)
            if prev != i:
                self._rt.set_device(i)
        return i

    def __exit__(self, *exc: object) -> None:
        if not self._prev:
            return
        prev = self._prev.pop()
        if prev != self._index:
            self._rt.set_device(prev)


class stream:  # noqa: N801 - a context manager named like torch.cuda.stream
    """Context manager: ``stream`` is current inside the block; the previous streams and device after.

    Args:
        stream: a ``torch.Stream`` of the active backend, or ``None`` (changes nothing).

    Raises:
        InvalidStreamError, DeviceMismatchError, DeviceIndexError: bad ``stream``, raised when the
        object is created, before any state changes.

    .. note:: Like ``torch.cuda.stream``: on entry the stream's device becomes current too;
       on exit the previous current stream of that device and the previous device (with its
       current stream) are restored. One object may be entered again inside its own block
       (nested, or from a function the block calls): each exit restores what its own entry
       replaced. A no-op on CPU.

    Example:
        >>> import accel
        >>> from accel.testing import fake_backend
        >>> with fake_backend("cpu"):
        ...     with accel.stream(accel.current_stream()) as s:
        ...         s.device
        device(type='cpu')
    """

    __slots__ = ("_stream", "_saved", "_rt", "_there")

    def __init__(self, stream: object, /) -> None:
        self._rt = rt = _runtime()
        self._there = None if stream is None else rt.check_stream(stream, "accel.stream")
        self._stream = stream
        #: per entry not yet exited, what it replaced: (stream of the stream's device, stream of the device
        #: current before, or None when that was the same device). A stack: one object entered again inside
        #: its own block restores each level (torch's StreamContext keeps one saved stream and loses the outer).
        self._saved: list[tuple[object, object | None]] = []

    def __enter__(self) -> object:
        s = self._stream
        rt, there = self._rt, self._there
        if s is None or rt.backend.host_stream:  # one stream: nothing to switch
            return s
        here = rt.current()
        prev_there = rt.get_stream(there)
        prev_here = rt.get_stream(here) if here != there else None
        rt.set_stream(s)
        self._saved.append((prev_there, prev_here))
        return s

    def __exit__(self, *exc: object) -> None:
        if not self._saved:
            return
        prev_there, prev_here = self._saved.pop()
        rt = self._rt
        rt.set_stream(prev_there)
        if prev_here is not None:
            rt.set_stream(prev_here)  # also makes the previous device current again


def elapsed_time(start: object, end: object, /) -> float:
    """Milliseconds of device time between two recorded events.

    Args:
        start: an :class:`Event` created with ``enable_timing=True`` and recorded.
        end: the same, recorded after ``start``.

    Returns:
        Elapsed time in milliseconds (float), as ``start.elapsed_time(end)`` measures it
        on the device. Call ``end.synchronize()`` (or :func:`synchronize`) first.

    Raises:
        InvalidEventError: ``start`` or ``end`` is not a ``torch.Event``.
        UnsupportedOperationError: the active backend is the CPU (torch has no CPU events;
            time host code with ``time.perf_counter_ns()``).
    """
    for name, ev in (("start", start), ("end", end)):
        if not isinstance(ev, Event):
            raise InvalidEventError(
                f"accel.elapsed_time: {name} is {ev!r} of type {type(ev).__name__}, not an event. Pass two "
                f"accel.Event(enable_timing=True) objects, both recorded."
            )
    rt = _runtime()
    if not rt.backend.has_events:
        raise UnsupportedOperationError(
            f"accel.elapsed_time: the active backend is {rt.name!r}, which has no events (torch: '{rt.type} backend "
            "doesn't support events'). Time host code with time.perf_counter_ns(), or select an accelerator."
        )
    return start.elapsed_time(end)
