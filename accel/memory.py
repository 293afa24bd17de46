"""Device memory: allocator counters, cache control and telemetry, on every vendor and torch 2.9+.

Every size is in bytes. The functions are plain module-level functions; their
implementations are resolved once for the active backend (:func:`accel.backend`) at
first use; :func:`accel.clear_cache` resolves them again.

====================================  ==================================================
function                              meaning
====================================  ==================================================
``allocated(device=None, /)``         bytes occupied by live tensors (caching allocator)
``reserved(device=None, /)``          bytes held by the caching allocator (live + cached)
``max_allocated(device=None, /)``     peak of ``allocated`` since start or ``reset_peak``
``max_reserved(device=None, /)``      peak of ``reserved`` since start or ``reset_peak``
``reset_peak(device=None, /)``        restart the peaks at the current values
``reset_accumulated(device=None,/)``  zero the accumulated counters (``*.allocated``,
                                      ``*.freed``, ``num_alloc_retries``, ...)
``empty_cache()``                     return cached, unused device memory to the driver
``empty_host_cache()``                return cached, unused pinned host memory
``get_memory_info(device=None, /)``   ``(free, total)`` bytes of the device, all processes
``stats(device=None, /)``             ``{"allocated_bytes.all.current": ..., ...}`` flat,
                                      sorted, with torch's ``memory_stats`` keys
``telemetry(device=None, /)``         :class:`Telemetry` from NVML / amd-smi / Level Zero
====================================  ==================================================

Per backend:

- **CUDA and ROCm, XPU**: the caching allocator's statistics. The getters read one
  value from the raw, unflattened statistics (``torch._C._cuda_memoryStats(i)``, the
  source ``torch.cuda.memory_stats`` flattens), which is several times cheaper than
  ``torch.cuda.memory_allocated``; see ``benchmarks/host_overhead.py``. While the
  device runtime is not initialised the getters return ``0``, ``stats`` ``{}``, and
  the resets do nothing: nothing was allocated, and nothing is initialised.
- **MPS**: Metal's own counters. ``allocated`` is ``torch.mps.current_allocated_memory()``,
  ``reserved`` is ``torch.mps.driver_allocated_memory()``, ``get_memory_info`` is
  ``(recommended_max_memory - driver_allocated_memory, recommended_max_memory)``
  (Metal's recommended working-set size, not physical memory). Peaks are not tracked
  there: ``max_*`` return ``0``, resets do nothing, there is no host cache.
- **CPU**: not tracked. Getters return ``0``, ``get_memory_info`` ``(0, 0)``,
  ``stats`` ``{}``, ``telemetry`` all ``None``; cache and reset functions do nothing.
  Nothing raises, except on a bad ``device`` argument.

A ``device`` argument is validated as in :mod:`accel.runtime` (typed errors naming the
value and the valid range; no state changed).

Example:
    >>> import accel
    >>> from accel.testing import fake_backend
    >>> with fake_backend("cpu"):
    ...     accel.memory.allocated(), accel.memory.get_memory_info(), accel.memory.stats()
    (0, (0, 0), {})
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TypeAlias

import torch

from accel import _compat, _resolve
from accel.backends._base import TELEMETRY_QUERIES
from accel.runtime import active_runtime as _runtime

__all__ = [
    "Telemetry",
    "allocated",
    "empty_cache",
    "empty_host_cache",
    "get_memory_info",
    "max_allocated",
    "max_reserved",
    "reserved",
    "reset_accumulated",
    "reset_peak",
    "stats",
    "telemetry",
]

#: The functions whose implementation is resolved per backend at first use.
RESOLVED = ("allocated", "reserved", "max_allocated", "max_reserved", "reset_peak", "reset_accumulated",
            "empty_cache", "empty_host_cache", "get_memory_info", "stats", "telemetry")


@dataclass(frozen=True)
class Telemetry:
    """Device telemetry from the vendor's management library; ``None`` where unavailable.

    A field is ``None`` when the running torch has no such query for the backend, or the
    library behind it (NVML via ``pynvml``, ``amdsmi``, Level Zero Sysman) cannot answer.

    Attributes:
        device_memory_used: bytes of device memory in use, all processes (driver's view).
        utilization: percent (0-100) of the last sample period a kernel was running.
        power_draw: watts (NVML's milliwatts are converted).
        clock_rate: graphics / SM clock in MHz.
        temperature: degrees Celsius.

    .. note:: On XPU, ``utilization`` and ``power_draw`` each block about 100 ms (torch
       samples two counter reads).
    """

    device_memory_used: int | None = None
    utilization: float | None = None
    power_draw: float | None = None
    clock_rate: int | None = None
    temperature: float | None = None


def _telemetry_errors() -> tuple[type[BaseException], ...]:
    """What a telemetry query raises when it cannot answer (evaluated after the raise, so
    vendor modules that torch imported lazily are found without importing them here)."""
    found: list[type[BaseException]] = [RuntimeError, OSError, ImportError, ValueError, AttributeError]
    for module, name in (("pynvml", "NVMLError"), ("amdsmi", "AmdSmiException")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _flatten(nested: dict, prefix: str = "", out: list | None = None) -> list:
    out = [] if out is None else out
    for key, value in nested.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            _flatten(value, name, out)
        else:
            out.append((name, value))
    return out


_GETTERS = (
    ("allocated", "allocated_bytes", "current", "Bytes occupied by live tensors on ``device`` (default: current)."),
    ("reserved", "reserved_bytes", "current",
     "Bytes the caching allocator holds on ``device`` (live tensors plus cached blocks)."),
    ("max_allocated", "allocated_bytes", "peak",
     "Peak of :func:`allocated` in bytes since the start or the last :func:`reset_peak`."),
    ("max_reserved", "reserved_bytes", "peak",
     "Peak of :func:`reserved` in bytes since the start or the last :func:`reset_peak`."),
)

_GETTER_DOC = """{summary}

Args:
    device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

Returns:
    int, bytes. ``0`` on CPU (not tracked), and before the device runtime is initialised.
    See :mod:`accel.memory` for MPS.

Raises:
    DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

.. note:: Never initialises the device runtime.
"""


def _named(fn, name: str, doc: str):
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _no_cache(name: str, what: str):
    """A no-op ``name()`` for a backend without ``what``; no parameters, like torch's ``empty_cache()``."""

    def no_cache() -> None:
        return None

    return _named(no_cache, name, f"A no-op: this backend has no {what}. Takes no arguments, like torch's "
                                  f"``torch.accelerator.{name}()``.")


def _build_allocator(rt) -> dict[str, object]:
    """CUDA, ROCm, XPU and other caching-allocator backends: the allocator's statistics."""
    t, index, current = rt.type, rt.index, rt.current
    raw = _compat.resolve(t, "memory_stats_raw")
    is_init = rt.is_initialized
    if raw is None:  # a plug-in device type: the generic accelerator binding has the same layout
        raw, is_init = _compat.accelerator_allocator_stats()
    acc = torch.accelerator

    def getter(name: str, kind: str, field: str, summary: str):
        what = f"accel.memory.{name}"

        def get(device=None, /) -> int:
            if device is None:
                if not is_init():
                    return 0
                i = current()
            else:
                i = index(device, what)
                if not is_init():
                    return 0
            try:
                return raw(i)[kind]["all"][field]
            except KeyError:  # an allocator that does not track this statistic
                return 0

        return _named(get, name, _GETTER_DOC.format(summary=summary))

    def resetter(name: str, op: str, fallback, summary: str):
        what = f"accel.memory.{name}"
        reset = _compat.resolve(t, op) or fallback

        def reset_stats(device=None, /) -> None:
            i = None if device is None else index(device, what)
            if is_init():
                reset(current() if i is None else i)

        return _named(reset_stats, name, f"""{summary}

Args:
    device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

Raises:
    DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

.. note:: A no-op before the device runtime is initialised, and on CPU and MPS.
""")

    mem_info = _compat.resolve(t, "mem_get_info") or acc.get_memory_info

    def get_memory_info(device=None, /) -> tuple[int, int]:
        """``(free, total)`` bytes of ``device``'s memory, as the driver reports them (all processes).

        Returns:
            ``(free, total)`` ints in bytes. CPU: ``(0, 0)`` (not tracked). MPS: Metal's
            recommended working-set size minus what the driver holds, and that size.

        Raises:
            DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

        .. note:: Initialises the device runtime (CUDA/HIP/XPU: it needs a context).
        """
        i = current() if device is None else index(device, "accel.memory.get_memory_info")
        free, total = mem_info(i)
        return int(free), int(total)

    def stats(device=None, /) -> dict[str, int]:
        """The allocator's statistics, flat and sorted, with torch's ``memory_stats`` keys.

        Returns:
            ``{"active.all.allocated": ..., "allocated_bytes.all.current": ..., ...}``; byte
            counters end in ``_bytes``. ``{}`` before the runtime is initialised and on CPU.
            MPS: ``allocated_bytes.all.current`` and ``reserved_bytes.all.current`` only.

        Raises:
            DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

        .. note:: Never initialises the device runtime.
        """
        i = None if device is None else index(device, "accel.memory.stats")
        if not is_init():
            return {}
        return dict(sorted(_flatten(raw(current() if i is None else i))))

    power_scale = rt.backend.power_to_watts  # NVML reports milliwatts, the others watts
    queries = {name: _compat.resolve(t, name) for name in TELEMETRY_QUERIES}

    def telemetry(device=None, /) -> Telemetry:
        """:class:`Telemetry` of ``device`` from NVML / amd-smi / Level Zero; ``None`` fields where unavailable.

        Raises:
            DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

        .. note:: Queries the vendor management library (no device runtime initialisation on
           CUDA/ROCm, which use NVML / amd-smi; XPU initialises). Slow: use it for monitoring,
           not in a hot loop.
        """
        i = current() if device is None else index(device, "accel.memory.telemetry")
        values: dict[str, object] = {}
        for name, query in queries.items():
            if query is None:
                continue
            try:
                values[name] = query(i)
            except _telemetry_errors():  # the library is missing or cannot answer: documented as None
                values[name] = None
        if values.get("power_draw") is not None:
            values["power_draw"] = float(values["power_draw"]) * power_scale
        return Telemetry(**values)

    table: dict[str, object] = {name: getter(name, kind, field, summary) for name, kind, field, summary in _GETTERS}
    table.update(
        reset_peak=resetter("reset_peak", "reset_peak", acc.reset_peak_memory_stats,
                            "Restart :func:`max_allocated` and :func:`max_reserved` at the current values."),
        reset_accumulated=resetter("reset_accumulated", "reset_accumulated", acc.reset_accumulated_memory_stats,
                                   "Zero the accumulated counters (``*.allocated``, ``*.freed``, "
                                   "``num_alloc_retries``, ``num_ooms``, ...)."),
        empty_cache=_compat.resolve(t, "empty_cache") or acc.empty_cache,
        empty_host_cache=_compat.resolve(t, "empty_host_cache") or _no_cache("empty_host_cache", "pinned host cache"),
        get_memory_info=get_memory_info,
        stats=stats,
        telemetry=telemetry,
    )
    return table


def _build_fixed(rt, read: dict[str, object], memory_info, stats_keys: dict[str, str]) -> dict[str, object]:
    """CPU and MPS: getters read a counter without a device index (one device)."""
    index = rt.index

    def getter(name: str, summary: str):
        what = f"accel.memory.{name}"
        source = read.get(name)

        def get(device=None, /) -> int:
            if device is not None:
                index(device, what)
            return 0 if source is None else int(source())

        return _named(get, name, _GETTER_DOC.format(summary=summary))

    def validating_noop(name: str, doc: str):
        what = f"accel.memory.{name}"

        def reset_stats(device=None, /) -> None:
            if device is not None:
                index(device, what)

        return _named(reset_stats, name, doc)

    def get_memory_info(device=None, /) -> tuple[int, int]:
        """``(free, total)`` bytes: CPU ``(0, 0)`` (not tracked); MPS Metal's working-set figures."""
        if device is not None:
            index(device, "accel.memory.get_memory_info")
        return memory_info()

    def stats(device=None, /) -> dict[str, int]:
        """Flat statistics: CPU ``{}``; MPS ``allocated_bytes.all.current`` and ``reserved_bytes.all.current``."""
        if device is not None:
            index(device, "accel.memory.stats")
        return {key: int(read[name]()) for key, name in sorted(stats_keys.items())}

    def telemetry(device=None, /) -> Telemetry:
        """All ``None``: no management-library telemetry on this backend."""
        if device is not None:
            index(device, "accel.memory.telemetry")
        return Telemetry()

    table: dict[str, object] = {name: getter(name, summary) for name, _, _, summary in _GETTERS}
    table.update(
        reset_peak=validating_noop("reset_peak", "A no-op: peaks are not tracked on this backend."),
        reset_accumulated=validating_noop("reset_accumulated", "A no-op: no accumulated counters here."),
        empty_cache=read.get("empty_cache") or _no_cache("empty_cache", "device memory cache"),
        empty_host_cache=_no_cache("empty_host_cache", "pinned host cache"),
        get_memory_info=get_memory_info,
        stats=stats,
        telemetry=telemetry,
    )
    return table


def _build() -> dict[str, object]:
    rt = _runtime()
    fixed = rt.backend.memory_counters()  # CPU and MPS: fixed counters, one device
    if fixed is not None:
        return _build_fixed(rt, *fixed)
    return _build_allocator(rt)


#: The active backend's implementations, built at first use (forgotten by ``accel.clear_cache``).
_impl = _resolve.Resolved(__name__, RESOLVED, _build)

#: What a ``device`` argument may be: an index, ``"cuda:1"``-style str, ``torch.device`` or ``None`` (current).
DeviceLike: TypeAlias = "int | str | torch.device | None"


# The public functions: plain module-level definitions, each calling the active backend's implementation.

def allocated(device: DeviceLike = None, /) -> int:
    """Bytes occupied by live tensors on ``device`` (default: current).

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Returns:
        int, bytes. ``0`` on CPU (not tracked), and before the device runtime is initialised.
        See :mod:`accel.memory` for MPS.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Never initialises the device runtime.
    """
    return _impl.allocated(device)


def reserved(device: DeviceLike = None, /) -> int:
    """Bytes the caching allocator holds on ``device`` (live tensors plus cached blocks).

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Returns:
        int, bytes. ``0`` on CPU (not tracked), and before the device runtime is initialised.
        See :mod:`accel.memory` for MPS.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Never initialises the device runtime.
    """
    return _impl.reserved(device)


def max_allocated(device: DeviceLike = None, /) -> int:
    """Peak of :func:`allocated` in bytes since the start or the last :func:`reset_peak`.

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Returns:
        int, bytes. ``0`` on CPU (not tracked), and before the device runtime is initialised.
        See :mod:`accel.memory` for MPS.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Never initialises the device runtime.
    """
    return _impl.max_allocated(device)


def max_reserved(device: DeviceLike = None, /) -> int:
    """Peak of :func:`reserved` in bytes since the start or the last :func:`reset_peak`.

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Returns:
        int, bytes. ``0`` on CPU (not tracked), and before the device runtime is initialised.
        See :mod:`accel.memory` for MPS.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Never initialises the device runtime.
    """
    return _impl.max_reserved(device)


def reset_peak(device: DeviceLike = None, /) -> None:
    """Restart :func:`max_allocated` and :func:`max_reserved` at the current values.

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: A no-op before the device runtime is initialised, and on CPU and MPS.
    """
    _impl.reset_peak(device)


def reset_accumulated(device: DeviceLike = None, /) -> None:
    """Zero the accumulated counters (``*.allocated``, ``*.freed``, ``num_alloc_retries``, ``num_ooms``, ...).

    Args:
        device: ``None`` (current device), an index, ``"cuda:1"``-style str or ``torch.device``.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: A no-op before the device runtime is initialised, and on CPU and MPS.
    """
    _impl.reset_accumulated(device)


def empty_cache() -> None:
    """Return the caching allocator's cached, unused device memory to the driver.

    Takes no arguments, like torch's ``torch.accelerator.empty_cache()``. A no-op on the CPU (no
    device memory cache); on MPS ``torch.mps.empty_cache()``.
    """
    _impl.empty_cache()


def empty_host_cache() -> None:
    """Return the cached, unused pinned host memory (where the backend's torch has a host cache).

    Takes no arguments, like torch's ``torch.accelerator.empty_host_cache()``. A no-op on the CPU
    and MPS, and on a torch without the function (no pinned host cache).
    """
    _impl.empty_host_cache()


def get_memory_info(device: DeviceLike = None, /) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device``'s memory, as the driver reports them (all processes).

    Returns:
        ``(free, total)`` ints in bytes. CPU: ``(0, 0)`` (not tracked). MPS: Metal's
        recommended working-set size minus what the driver holds, and that size.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Initialises the device runtime (CUDA/HIP/XPU: it needs a context).
    """
    return _impl.get_memory_info(device)


def stats(device: DeviceLike = None, /) -> dict[str, int]:
    """The allocator's statistics, flat and sorted, with torch's ``memory_stats`` keys.

    Returns:
        ``{"active.all.allocated": ..., "allocated_bytes.all.current": ..., ...}``; byte
        counters end in ``_bytes``. ``{}`` before the runtime is initialised and on CPU.
        MPS: ``allocated_bytes.all.current`` and ``reserved_bytes.all.current`` only.

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Never initialises the device runtime.
    """
    return _impl.stats(device)


def telemetry(device: DeviceLike = None, /) -> Telemetry:
    """:class:`Telemetry` of ``device`` from NVML / amd-smi / Level Zero; ``None`` fields where unavailable.

    All ``None`` on the CPU and MPS (no management-library telemetry there).

    Raises:
        DeviceIndexError, DeviceMismatchError, InvalidDeviceError: bad ``device``.

    .. note:: Queries the vendor management library (no device runtime initialisation on
       CUDA/ROCm, which use NVML / amd-smi; XPU initialises). Slow: use it for monitoring,
       not in a hot loop.
    """
    return _impl.telemetry(device)
