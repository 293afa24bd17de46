"""Triton on the host: availability (package metadata, no import) and launches with little host time.

:func:`triton_launch` is ``fn[grid](*args, **constexprs)`` without Triton's per-call Python once a
specialization is compiled: on the H200's host ``fn[grid](...)`` cost 14.9 µs per call and the compiled
kernel's launcher called directly 6.6 µs (launch probe, ``benchmarks/results/h200/README.md``); Triton's own
``JITFunction.run`` (binding, specialization, cache key, knobs) is the difference. Inductor's generated
launchers call ``CompiledKernel.run`` the same way. Device-side helpers shared by the kernels are in
:mod:`.triton_lang` (which imports Triton).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from typing import Any

import torch

from accel._caches import detection_cache
from accel._compat import module_version

from .launch import device_guard
from .triton_configs import next_power_of_2, wide

__all__ = ["LaunchPlan", "SplitLaunch", "available", "fast_launch_supported", "row_launch", "triton_launch"]


def available() -> tuple[bool, str]:
    """Whether Triton is installed (package metadata only; nothing imported), and why."""
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed (pip install triton, or in your accel clone: pip install '.[triton]')"
    return True, f"triton {module_version('triton')} installed"



#: What ``JITFunction.run`` must contain for :func:`triton_launch`'s direct call to be the
#: same call Triton makes (triton 3.3 - 3.9: launcher, grid, stream, function, metadata, hooks, args).
_RUN_CALL = "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata"


@detection_cache
def fast_launch_supported() -> tuple[bool, str]:
    """Whether :func:`triton_launch` may call compiled kernels directly here, and why (checked once).

    Off under ``TRITON_INTERPRET=1`` (no compiled kernels), on Triton without ``triton.knobs``,
    and where ``JITFunction.run`` no longer makes the launcher call this module replicates.
    ``ACCEL_TRITON_FAST_LAUNCH=0`` turns it off.
    """
    if os.environ.get("ACCEL_TRITON_FAST_LAUNCH", "1").strip() == "0":
        return False, "ACCEL_TRITON_FAST_LAUNCH=0"
    if os.environ.get("TRITON_INTERPRET", "").strip() == "1":
        return False, "TRITON_INTERPRET=1 (interpreter: no compiled kernels)"
    try:
        from triton import knobs  # noqa: F401 - triton >= 3.4
        from triton.runtime.jit import JITFunction

        source = inspect.getsource(JITFunction.run)
    except (ImportError, OSError, TypeError) as exc:
        return False, f"triton internals not as expected ({type(exc).__name__}: {exc})"
    if _RUN_CALL not in source:
        return False, "this triton's JITFunction.run calls its launcher differently"
    return True, "direct launcher calls (triton JITFunction.run convention checked)"


def _arg_key(a: Any) -> Any:
    """What Triton specializes an argument on: dtype and 16-byte alignment of a tensor; an int's
    range (i32/i64), ``== 1`` and divisibility by 16; a tuple's elements, each so; the type of anything else.
    (:meth:`_FastLaunch.__call__` computes the same inline; the tests compare the two.)"""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() & 15 == 0
    if type(a) is int:  # i32 / i64 / u64 by range, as Triton types them
        return a == 1, a & 15 == 0, -(1 << 31) <= a < (1 << 31), a < (1 << 63)
    if type(a) is tuple:  # Triton specializes a tuple argument element by element
        return (tuple, *map(_arg_key, a))
    return type(a)


_MISSING = object()
_Tensor = torch.Tensor


def _no_hook(hook: Any) -> bool:
    """No launch hook: ``None`` (triton 3.4-3.6) or an empty ``HookChain`` (triton 3.7+)."""
    return hook is None or (not getattr(hook, "calls", True) and type(hook).__name__ == "HookChain")


def _hooks_set(runtime_knobs: Any) -> bool:
    """Whether a launch enter/exit hook (a profiler) is set in Triton's ``knobs.runtime``: then launches
    go through Triton's own path, which calls it."""
    enter, leave = runtime_knobs.launch_enter_hook, runtime_knobs.launch_exit_hook
    return (enter is not None or leave is not None) and not (_no_hook(enter) and _no_hook(leave))


class _FastLaunch:
    """One ``@triton.jit`` function's compiled kernels by specialization key, launched directly."""

    __slots__ = ("fn", "names", "tails", "cache", "runtime_knobs", "constexpr_pos")

    def __init__(self, fn: Any) -> None:
        from triton import knobs

        self.fn = fn
        self.names = tuple(fn.arg_names)
        #: positional count -> (the constexpr names after them, positions of constexprs passed positionally)
        self.tails: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        self.cache: dict[tuple, Any] = {}
        self.runtime_knobs = knobs.runtime
        params = getattr(fn, "params", None)  # triton's KernelParam list (is_constexpr per parameter)
        self.constexpr_pos = None if params is None else tuple(i for i, p in enumerate(params) if p.is_constexpr)

    def _key(self, grid: Any, args: tuple, constexprs: dict, opt_key: tuple) -> tuple[tuple, tuple] | None:
        """``(cache key, constexpr values to pass after args)`` of this call, or ``None`` where only
        Triton's own path can launch it (a grid function, a constexpr left to its default, an extra
        Triton option, a function whose constexpr parameters are unknown)."""
        split = self.tails.get(len(args))
        if split is None:
            cpos = self.constexpr_pos
            split = self.tails[len(args)] = (self.names[len(args):],
                                            None if cpos is None else tuple(i for i in cpos if i < len(args)))
        names, positional = split
        tail = tuple([constexprs.get(name, _MISSING) for name in names])
        if callable(grid) or _MISSING in tail or len(constexprs) != len(tail) or positional is None:
            return None
        passed = tail
        if positional:  # constexprs passed positionally (Helion's generated launches): their values count
            tail = (*tail, *[args[i] for i in positional])
        # _arg_key per argument, inlined (a function call per argument cost ~0.2 us each); a positional
        # constexpr's value is in ``tail`` as well
        key = (torch._C._cuda_getDevice(), tail, tuple(map(type, tail)), opt_key, *[
            (a.dtype, not a.data_ptr() & 15) if isinstance(a, _Tensor) else
            ((a == 1, not a & 15, -2147483648 <= a <= 2147483647, a < 9223372036854775808) if type(a) is int
             else type(a) if type(a) is not tuple else _arg_key(a)) for a in args])
        return key, passed

    def compiled(self, grid: Any, args: tuple, constexprs: dict, opt_key: tuple) -> tuple[Any, tuple] | None:
        """``(compiled kernel, constexpr values to pass after args)`` already cached for this call, or ``None``."""
        found = self._key(grid, args, constexprs, opt_key)
        if found is None:
            return None
        kernel = self.cache.get(found[0])
        return None if kernel is None else (kernel, found[1])

    def __call__(self, grid: tuple, args: tuple, constexprs: dict, options: dict, opt_key: tuple) -> None:
        if _hooks_set(self.runtime_knobs):
            self.fn[grid](*args, **constexprs, **options)  # profilers: Triton's own path
            return
        found = self._key(grid, args, constexprs, opt_key)
        if found is None:
            self.fn[grid](*args, **constexprs, **options)
            return
        key, tail = found
        kernel = self.cache.get(key)
        if kernel is None:  # compile (or fetch) through Triton, launching this once
            kernel = self.fn[grid](*args, **constexprs, **options)
            if kernel is not None and hasattr(kernel, "packed_metadata"):
                self.cache[key] = kernel
            return
        n = len(grid)
        kernel.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                   torch._C._cuda_getCurrentRawStream(key[0]), kernel.function, kernel.packed_metadata,
                   None, None, None, *args, *tail)


#: By ``id`` of the ``@triton.jit`` function (hashing a JITFunction computes its source cache key:
#: 1.5 µs per call on the H200's host); the entry holds the function, so the id stays its own.
_FAST: dict[int, _FastLaunch] = {}


def triton_launch(fn: Any, grid: tuple, *args: Any, num_warps: int = 4, num_stages: int | None = None,
                  **constexprs: Any) -> None:
    """``fn[grid](*args, num_warps=..., **constexprs)``, launched directly once compiled.

    ``args`` are the kernel's arguments in signature order (tensors, ints, floats; constexpr
    parameters may come positionally too, as Helion's generated code passes them: their values
    are part of the key); ``constexprs`` the ``tl.constexpr`` parameters after them, by name.
    The first call per specialization (device, constexprs, options, and per argument
    what Triton specializes on: see :func:`_arg_key`) goes through Triton, which compiles
    and launches; later ones call the compiled kernel's launcher with the current raw
    stream, as ``JITFunction.run`` does. Falls back to ``fn[grid](...)`` everywhere
    :func:`fast_launch_supported` says no, and while a launch hook (profiler) is set.
    Skips ``JITFunction.run``'s check that globals the kernel reads are unchanged (accel's
    kernels read none), and does not re-read Triton's compile knobs (``knobs.runtime.debug``,
    instrumentation) per call: changing them after a kernel's first launch takes effect
    for specializations compiled later, not for ones already cached here.
    """
    options = {"num_warps": num_warps} if num_stages is None else {"num_warps": num_warps, "num_stages": num_stages}
    fast = _FAST.get(id(fn))
    on_cuda = bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_cuda
    if fast is None or not on_cuda:
        if not (on_cuda and fast_launch_supported()[0]):
            fn[grid](*args, **constexprs, **options)
            return
        fast = _FAST[id(fn)] = _FastLaunch(fn)
    fast(grid, args, constexprs, options, (num_warps, num_stages))


class LaunchPlan:
    """One Triton launch with all but its tensor arguments fixed: ``plan(*tensors)`` launches it.

    Built once per argument signature by an impl's ``plan`` (:mod:`accel.kernels.core.plans`), so a
    routed call skips the per-call work of :func:`triton_launch` (specialization key, option dicts):
    once the kernel is compiled, a call is the device check, the current raw stream and the
    compiled kernel's launcher - the call ``JITFunction.run`` ends in. The first two calls go
    through :func:`triton_launch` (compiling on the first); the second captures the compiled
    kernel (a plan used once never pays for the capture). Falls back to :func:`triton_launch`
    wherever it would not launch directly (:func:`fast_launch_supported`, a launch hook set,
    another current device than the one the kernel was captured on).

    The capture is valid for every later call because what Triton specializes on is fixed by
    the plan: the scalars and constexprs are the plan's, and the tensors' dtypes and 16-byte
    alignment are part of the signature the plan was built for; output buffers must come from
    torch's allocator (blocks of at least 512 bytes on CUDA, hence aligned).

    Args:
        fn: the ``@triton.jit`` function.
        grid: up to three program counts.
        scalars: the non-tensor arguments after the tensors, in signature order.
        num_warps, num_stages: Triton launch options.
        **constexprs: the ``tl.constexpr`` parameters by name.
    """

    __slots__ = ("fn", "grid", "scalars", "constexprs", "num_warps", "num_stages", "calls", "kernel", "rest",
                 "index", "grid3", "knobs")

    def __init__(self, fn: Any, grid: tuple, scalars: tuple = (), *, num_warps: int = 4, num_stages: int | None = None,
                 **constexprs: Any) -> None:
        self.fn, self.grid, self.scalars, self.constexprs = fn, tuple(grid), tuple(scalars), constexprs
        self.num_warps, self.num_stages = num_warps, num_stages
        self.calls = 0
        self.kernel: Any = None
        self.rest: tuple = ()
        self.index = -1
        self.grid3 = (*self.grid, 1, 1)[:3]
        self.knobs: Any = None

    def __call__(self, *tensors: torch.Tensor) -> None:
        kernel = self.kernel
        if kernel is not None:
            if not _hooks_set(self.knobs):
                index = self.index
                if torch._C._cuda_getDevice() == index:
                    g = self.grid3
                    kernel.run(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(index), kernel.function,
                               kernel.packed_metadata, None, None, None, *tensors, *self.rest)
                    return
        args = (*tensors, *self.scalars)
        with device_guard(tensors[0].device):
            triton_launch(self.fn, self.grid, *args, num_warps=self.num_warps, num_stages=self.num_stages,
                          **self.constexprs)
            if kernel is None:
                self.calls += 1
                if self.calls == 2:
                    self._capture(args)

    def _capture(self, args: tuple) -> None:
        """Keep the compiled kernel :func:`triton_launch` cached for ``args`` (none where it launches through Triton)."""
        fast = _FAST.get(id(self.fn))
        if fast is None or not args[0].is_cuda:
            return
        found = fast.compiled(self.grid, args, self.constexprs, (self.num_warps, self.num_stages))
        if found is not None:  # ``kernel`` last: another thread sees it only with the rest in place
            kernel, tail = found
            self.rest = (*self.scalars, *tail)
            self.index = torch._C._cuda_getDevice()
            self.knobs = fast.runtime_knobs
            self.kernel = kernel


def row_launch(looped: Any, rows_kernel: Any, cfg: Any, m: int, n: int, scalars: tuple = (), *,
               looped_hints: bool = False, **flags: Any) -> LaunchPlan:
    """The launch of a row-wise op for ``m`` rows of ``n`` with tuning config ``cfg``: the ``looped`` kernel
    (one row per program in ``cfg["block_n"]`` chunks; arguments ``(tensors..., n, *scalars)``; ``None`` for
    an op without one, whose limits keep looped configs away) where ``cfg["looped"]``, else ``rows_kernel``
    (``cfg["rows"]`` rows per program, each whole in registers; arguments ``(tensors..., m, n, *scalars)``, with ``HINTS`` and ``WIDE``: :mod:`accel.kernels.dsl.triton_lang`).
    ``flags``: constexprs both kernels take (``HAS_W``, ...); ``looped_hints``: the looped kernel takes
    ``HINTS`` and honours ``num_stages`` too (softmax's). ``hints`` defaults to off.
    """
    hints = cfg.get("hints", False)
    if cfg["looped"]:
        extra = {"HINTS": hints, "num_stages": cfg.get("num_stages")} if looped_hints else {}
        return LaunchPlan(looped, (m,), (n, *scalars), BLOCK_N=cfg["block_n"], num_warps=cfg["num_warps"],
                          **flags, **extra)
    rows, block_n = cfg["rows"], max(cfg["block_n"], next_power_of_2(n))
    return LaunchPlan(rows_kernel, (-(-m // rows),), (m, n, *scalars), BLOCK_N=block_n, ROWS=rows, HINTS=hints,
                      WIDE=wide(m, rows, block_n), num_warps=cfg["num_warps"], **flags)


class SplitLaunch:
    """A split-row kernel's launch (:mod:`accel.kernels.dsl.triton_lang`): ``launch(*tensors)`` allocates the
    zeroed slots buffer (``m * split`` int64, from torch's allocator on the tensors' stream, so
    concurrent calls never share one) and launches ``fn`` over ``groups * split`` programs with it after
    the tensors. On a GPU the parts of a row wait for each other in one launch (``STAGE=0``); where
    programs run one after another (``TRITON_INTERPRET=1``, CPU or GPU tensors alike) a wait would
    never end, so it makes two launches, publish then finish (``STAGE=1``, ``2``), which compute the
    same result.

    Args:
        fn: the ``@triton.jit`` split kernel; arguments ``(tensors..., slots, *scalars)`` and the constexprs
            ``PART``, ``SPLIT``, ``STAGE`` and ``flags``.
        cfg: ``{"split", "block_n" (the part), "num_warps"}``; a part too short for ``split`` parts to
            cover a row is lengthened to the shortest power of two that does.
        m, n: rows (one slot per row and part) and row length.
        scalars: the kernel's scalar arguments after ``slots``.
        groups: program groups of ``split`` parts (default ``m``: one row per group).
        **flags: further constexprs of ``fn``.
    """

    __slots__ = ("count", "fused", "staged", "interpreted")

    def __init__(self, fn: Any, cfg: Any, m: int, n: int, scalars: tuple, groups: int | None = None,
                 **flags: Any) -> None:
        split = cfg["split"]
        self.count = m * split
        grid = ((m if groups is None else groups) * split,)
        part = max(cfg["block_n"], next_power_of_2(-(-n // split)))
        options = dict(PART=part, SPLIT=split, num_warps=cfg["num_warps"], **flags)
        self.fused = LaunchPlan(fn, grid, scalars, STAGE=0, **options)
        self.staged = tuple(LaunchPlan(fn, grid, scalars, STAGE=s, **options) for s in (1, 2))
        self.interpreted = os.environ.get("TRITON_INTERPRET", "").strip() == "1"

    def __call__(self, *tensors: torch.Tensor) -> None:
        slots = torch.zeros(self.count, dtype=torch.int64, device=tensors[0].device)
        if tensors[0].is_cuda and not self.interpreted:
            self.fused(*tensors, slots)
        else:
            for launch in self.staged:
                launch(*tensors, slots)


