"""How the benchmark times: :class:`Timer` (the vendor's events, L2 flushed), the copy ceiling, the router's cost.

Device-agnostic: events are ``accel.Event(device, enable_timing=True)`` (``torch.Event`` of the device's type:
CUDA and HIP events, XPU events, ...), waiting is ``accel.synchronize(device)``; no ``torch.cuda`` call is
made for a device of another vendor. The active accel backend must be the device's (``accel bench`` times
the active backend's current device).

:class:`Timer` times one call at a time with the L2 cache flushed before it, so each kernel reads its
inputs from HBM as in a model; :meth:`Timer.interleaved` alternates the candidates of a row round by round.
:func:`copy_ceiling` is the bandwidth every row is a percentage of. :func:`router_overhead` is the host cost
of accel's router per call, beside the floor of any Python router (:func:`bare_router`).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import accel.kernels as ak
from accel.kernels.core.spec import GPU_BACKENDS  # where accel's built-in kernels are registered

__all__ = ["Timer", "bare_router", "copy_ceiling", "device_facts", "flush_bytes", "has_events", "router_overhead",
           "sync", "time_bare"]

#: The op whose dispatch :func:`router_overhead` times: one call on 8 elements is almost all host cost.
PROBE_OP = "aten::_fused_rms_norm"
_PROBE_EPS = 1e-6


def has_events(device: torch.device) -> bool:
    """Whether ``device``'s backend has timing events (every GPU backend; not the CPU)."""
    from accel.backends import backend_for_device

    return backend_for_device(device).has_events


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work through ``accel.synchronize`` (any vendor); nothing on the CPU."""
    if has_events(device):
        import accel

        accel.synchronize(device)


def bench_device(command: str, fix: str) -> torch.device:
    """The current device of the active accel backend, for ``accel bench`` (``command``) to time.

    Raises:
        KernelUnavailableError: the active backend is none of :data:`~accel.kernels.core.spec.GPU_BACKENDS`
            (a CPU or MPS machine); the message ends with ``fix``.
    """
    import accel
    from accel.errors import KernelUnavailableError

    backend = accel.backend()
    if backend.name not in GPU_BACKENDS:
        raise KernelUnavailableError(
            f"{command}: no GPU device: the active backend is {backend.name!r}, and accel's kernels run on "
            f"{', '.join(GPU_BACKENDS)} (an NVIDIA, AMD or Intel GPU). {fix}")
    return accel.device()


def device_facts(device: torch.device) -> dict[str, str]:
    """``{"device": name, "arch": tuning-table arch key, "backend": accel backend name}`` of ``device``, from its
    backend (``{"device": "NVIDIA H200", "arch": "sm_90", "backend": "cuda"}``; ``gfx942`` / ``rocm``;
    ``pvc`` / ``xpu``; ``cpu`` for smoke runs).

    .. note:: Initialises the device's runtime (device properties).
    """
    from accel.backends import backend_for_device
    from accel.kernels.dsl.launch import arch

    if not has_events(device):
        return {"device": device.type, "arch": device.type, "backend": device.type}
    backend = backend_for_device(device)
    return {"device": backend().device_name(device.index or 0), "arch": arch(device), "backend": backend.name}


#: Bytes zeroed before each timed rep to evict the last-level cache, at least: 256 MiB (the H200's L2 is
#: 50 MiB; an MI300X's Infinity Cache is 256 MiB, hence :func:`flush_bytes` takes twice a cache the device
#: properties report).
FLUSH_BYTES = 256 * 2**20


def flush_bytes(device: torch.device) -> int:
    """Bytes of the cache-flush buffer on ``device``: ``max(FLUSH_BYTES, 2 x the last-level cache)`` where the
    device properties give its size (``L2_cache_size`` on CUDA/HIP, ``last_level_cache_size`` on XPU); 1 on the
    CPU (no flush)."""
    if not has_events(device):
        return 1
    from accel.kernels.dsl.launch import kernel_limits

    return max(FLUSH_BYTES, 2 * (kernel_limits(device).cache_bytes or 0))


class Timer:
    """Device-event timing (``accel.Event``, any vendor) with a cache flush (zeroing :func:`flush_bytes`) before
    every rep.

    On a CPU device (smoke tests of the benchmark only) wall-clock time per call.

    Args:
        device: the device the timed functions run on.
        reps: timed repetitions per call of the timer (the median is returned), ``>= 1``.

    Attributes:
        device, reps: as given.
        flush: the buffer zeroed before each rep (one byte on CPU).
    """

    def __init__(self, device: torch.device, reps: int) -> None:
        self.device, self.reps = device, reps
        self.events = has_events(device)
        self.flush = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device)

    def __call__(self, fn: Callable[[], Any]) -> float:
        """Median µs of ``fn()`` over :attr:`reps` reps, after at least 3 calls and 20 ms of warm-up calls.

        The time-based warm-up keeps a first shape from being timed while the GPU's clocks
        still ramp up after compiles (the first rows of a run measured up to 2x slow).

        Raises:
            Exception: whatever ``fn`` raises, unchanged.
        """
        for _ in range(3):
            fn()
        sync(self.device)
        until = time.perf_counter() + 0.02
        while time.perf_counter() < until:
            fn()
        if not self.events:
            times = []
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times)
        import accel

        sync(self.device)
        starts = [accel.Event(self.device, enable_timing=True) for _ in range(self.reps)]
        ends = [accel.Event(self.device, enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        sync(self.device)
        return statistics.median(accel.elapsed_time(s, e) for s, e in zip(starts, ends)) * 1e3

    def interleaved(self, fns: dict[str, Callable[[], Any]], rounds: int,
                    errors: dict[str, str]) -> dict[str, float]:
        """Median µs per name over ``rounds`` rounds, each timing every function once in order.

        ATen, under ``name == "aten"``, is timed with accel's overrides disabled. Alternating keeps a drift
        of clocks or host over the row shifting every candidate alike instead of whichever came last.

        Args:
            fns: name -> zero-argument function, in timing order.
            rounds: rounds, ``>= 1``.
            errors: name -> error text; a function that raises is added here and left out of later rounds,
                and a name already in it is not timed.

        Returns:
            name -> median µs, for the names timed in at least one round and not in ``errors``.
        """
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                if name in errors:
                    continue
                try:
                    if name == "aten":
                        with ak.disabled():
                            times[name].append(self(fn))
                    else:
                        times[name].append(self(fn))
                except Exception as exc:  # noqa: BLE001 - one failing candidate must not end the run
                    errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return {name: statistics.median(ts) for name, ts in times.items() if ts and name not in errors}


def copy_ceiling(timer: Timer, device: torch.device) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), copying 512 MiB with ``timer``."""
    src = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e3


def bare_router(op_name: str, key: str) -> Any:
    """Install, at dispatch key ``key`` of ATen op ``op_name``, a ``torch.library`` kernel that only calls the
    ATen kernel captured under it: the floor of any Python router at that key (the dispatcher boxing the call
    into Python and back), measured beside accel's.

    Returns:
        The ``torch.library.Library``: ``lib._destroy()`` removes the kernel, ``lib.calls[0]`` counts the calls
        it answered.

    Raises:
        RuntimeError: ``op_name`` has no kernel at ``key`` to capture (torch's error).
    """
    from torch.library import get_kernel

    kernel = get_kernel(op_name, key)
    namespace, name = op_name.split("::")
    lib = torch.library.Library(namespace, "IMPL", key)
    lib.calls = [0]  # type: ignore[attr-defined]  # whether the dispatcher reached it (a 30 ns list update)
    calls = lib.calls  # type: ignore[attr-defined]

    def bare(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return kernel.call_boxed(keyset, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "overriding a previously registered kernel"
        lib.impl(name, bare, key, with_keyset=True)
    return lib


def time_bare(key: str, per_call: Callable[[], float]) -> float | None:
    """``per_call()`` (µs) with :func:`bare_router` installed at ``key`` for :data:`PROBE_OP`.

    Returns:
        ``None`` where the router cannot be installed, the timing raises, or the dispatcher never reached it
        (another registration in front of the key, as torch's native DSL registry can be): no floor then,
        accel's cost is still measured.
    """
    try:
        lib = bare_router(PROBE_OP, key)
    except Exception:  # noqa: BLE001 - no floor at this key; reported as None
        return None
    try:
        t = per_call()
    except Exception:  # noqa: BLE001 - same
        t = None
    finally:
        lib._destroy()
    return t if lib.calls[0] else None


def router_overhead(device: torch.device, calls: int = 2000, rounds: int = 5) -> dict[str, Any]:
    """Host µs per :data:`PROBE_OP` call on 8 elements: plain ATen, through a bare router, through accel's.

    Plain ATen runs with accel's overrides disabled; the bare router is :func:`bare_router` at the device's
    dispatch key. Each figure is the fastest of ``rounds`` loops of ``calls`` calls, the three alternating (a
    host whose speed drifts over the measurement shifts all alike).

    Returns:
        ``{"aten_us", "with_router_us", "router_cost_us", "bare_router_cost_us"}``; ``bare_router_cost_us`` is
        ``None`` where that router cannot be installed or timed, or the dispatcher does not reach it. Without a
        live accel override of the op (``--ops`` without its family, no DSL installed) there is no router to
        time: ``{"skipped": why}``.
    """
    from accel.backends import backend_for_device

    backend = backend_for_device(device)  # the backend's own dispatch key (CUDA serves rocm too)
    if not any(o.op == PROBE_OP and o.active and backend.name in o.backends for o in ak.overrides()):
        return {"skipped": f"no accel override of {PROBE_OP} is active on {backend.name}: no router to time"}

    x = torch.randn(1, 8, device=device)
    w = torch.randn(8, device=device)
    op = torch.ops.aten._fused_rms_norm.default
    key = backend.dispatch_key

    def per_call() -> float:
        for _ in range(50):
            op(x, [8], w, _PROBE_EPS)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            op(x, [8], w, _PROBE_EPS)
        sync(device)
        return (time.perf_counter() - t0) / calls * 1e6

    plains, bares, routeds = [], [], []
    for _ in range(rounds):
        with ak.disabled():
            plains.append(per_call())
            if bares is not None:  # the first round without a floor ends the floor's measurement
                t = time_bare(key, per_call) if key is not None else None
                bares = None if t is None else [*bares, t]
        routeds.append(per_call())
    plain, routed = min(plains), min(routeds)
    bare = min(bares) - plain if bares else None
    return {"aten_us": plain, "with_router_us": routed, "router_cost_us": routed - plain, "bare_router_cost_us": bare}
