"""Helion on the host: availability and version floor (package metadata, no import), and kernels bound
to explicit configs (never autotuned at run time), launched with little host time.

:func:`bind` wraps a kernel function with ``helion.kernel(config=helion.Config(**cfg))``
once per distinct config (cached), so each tuning-table config, or the op's
fixed default, compiles once and is reused; Helion's autotuner is never
entered in the user's process. :func:`call` runs a bound kernel: after the first
call per argument signature it calls Helion's generated host function directly,
with accel's direct Triton launcher (:func:`accel.kernels.dsl.triton_utils.triton_launch`)
as its ``_launcher``. Measured on the H200's host (``benchmarks/results/h200/launch_cost.md``):
a routed Helion call cost 68-88 µs against 39-83 µs for Triton; Helion's default
launcher goes through ``JITFunction.run`` (~15 µs), its dispatch through
``Kernel.__call__``, whose per-call key costs 12-26 µs on the CPU host (:func:`_dispatch_key`).
Imports Helion at the first :func:`bind`, never at import.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from packaging.version import Version

from accel._caches import detection_cache, kept_cache
from accel._compat import checked_version, module_version

from .launch import lazy_module
from .triton_utils import fast_launch_supported, triton_launch

__all__ = ["MIN_VERSION", "available", "bind", "call", "ignore_wrapper_tensor_ops"]

#: Oldest Helion the kernels are checked with (1.4.0 runs on the H200's torch 2.11).
MIN_VERSION = Version("1.4.0")

_helion = lazy_module("helion")


def available() -> tuple[bool, str]:
    """Whether Helion (and Triton, its backend) are installed in a usable version, and why (no import)."""
    if importlib.util.find_spec("helion") is None:
        return False, "helion is not installed (pip install helion, or in your accel clone: pip install '.[helion]')"
    if importlib.util.find_spec("triton") is None:
        return False, "helion is installed but triton (its code generator) is not"
    return checked_version("helion", module_version("helion"), MIN_VERSION)


def ignore_wrapper_tensor_ops() -> tuple:
    """``ignore_warnings`` for kernels that allocate their partial-sum buffers in the host code."""
    return (_helion().exc.TensorOperationInWrapper,)


@kept_cache("compiled Helion kernels, one per (function, config JSON): no device or environment fact")
def _bind(fn: Callable, cfg_json: str, ignore: tuple) -> Any:
    helion = _helion()
    cfg = helion.Config(**json.loads(cfg_json))
    return helion.kernel(fn, config=cfg, static_shapes=False, ignore_warnings=list(ignore))


_BOUND: dict[tuple[int, int, tuple], tuple[Mapping[str, Any], Any]] = {}


def bind(fn: Callable, cfg: Mapping[str, Any], ignore_warnings: tuple = ()) -> Any:
    """``fn`` as a Helion kernel with exactly the config ``cfg`` (``helion.Config`` keyword arguments).

    Per call this is one dict lookup by the identity of ``fn`` and ``cfg`` (the tuning
    table's and the ops' default configs are long-lived objects); a config seen for the
    first time is keyed by its JSON text, so equal configs share one compiled kernel.
    """
    key = (id(fn), id(cfg), ignore_warnings)
    hit = _BOUND.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    kernel = _bind(fn, json.dumps(dict(cfg), sort_keys=True), tuple(ignore_warnings))
    _BOUND[key] = (cfg, kernel)  # holds cfg: its id cannot be reused while the entry lives
    return kernel


def _launcher(triton_kernel: Any, grid: tuple, *args: Any, num_warps: int, num_stages: int, **options: Any) -> None:
    """Helion's ``_launcher`` contract, through :func:`triton_launch`; any extra launch option
    (cooperative grid, PTX options) goes to Helion's own launcher."""
    if options:
        from helion.runtime import default_launcher

        return default_launcher(triton_kernel, grid, *args, num_warps=num_warps, num_stages=num_stages, **options)
    triton_launch(triton_kernel, grid, *args, num_warps=num_warps, num_stages=num_stages)
    return None


#: ``(id(kernel), dispatch key)`` -> ``(kernel, the bound kernel's generated host function)``; the
#: entry holds the kernel, so its id cannot be reused by another one while the entry lives.
_HOST: dict[tuple, tuple[Any, Callable[..., Any]]] = {}
#: Entries kept at most (exact shapes are keyed: a workload of ever-new shapes must not grow it forever).
HOST_CACHE_SIZE = 4096
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter


@detection_cache
def _direct_ok() -> bool:
    """Whether :func:`call` may call generated host functions directly (checked once): accel's
    Triton fast launch is on and Helion is not interpreting."""
    return fast_launch_supported()[0] and os.environ.get("HELION_INTERPRET", "").strip() != "1"


def _dispatch_key(args: tuple) -> tuple | None:
    """Exact metadata of ``args``, or ``None`` where :func:`call` must let Helion decide.

    Per plain tensor: dtype, shape, strides, 16-byte alignment of the data pointer and whether the
    storage offset is 0 (Helion specializes tensor-descriptor configs on both); per scalar (int,
    float, bool): type and value; the first tensor's device index. ``None`` for anything else
    (tensor subclasses, containers), for a NaN scalar (it never equals itself: every call would add
    an entry), and when one tensor object is passed twice (Helion compiles aliased arguments
    separately). As fine as Helion's specialization key for accel's kernels (no ``key=`` function,
    no distributed tensors), at ~2.5 µs for 7 arguments against ~26 µs for Helion's own
    ``Kernel._fast_dispatch_key`` (Helion 1.5.1, CPU host, torch 2.13; 1.4 has it too), which builds
    a device object per tensor and looks for distributed tensors on every call.
    """
    key: list = []
    device = None
    seen: list[int] = []
    for a in args:
        t = type(a)
        if t is _Tensor or t is _Parameter:
            ident = id(a)
            if ident in seen:
                return None
            seen.append(ident)
            key.append((a.dtype, a.shape, a.stride(), a.data_ptr() & 15, a.storage_offset() == 0))
            if device is None:
                device = a.get_device()
        elif t is int or t is bool:
            key.append((t, a))
        elif t is float:
            if a != a:
                return None
            key.append((t, a))
        elif a is None:
            key.append(None)
        else:
            return None
    if device is None:
        return None
    key.append(device)
    return tuple(key)


def call(kernel: Any, *args: Any) -> Any:
    """``kernel(*args)`` for a Helion kernel (from :func:`bind` or ``@helion.kernel``): same result,
    less host time.

    The first call per :func:`_dispatch_key` goes through ``kernel(*args)``, which compiles or
    fetches the bound kernel; later ones call its generated host function with ``_launcher=``
    :func:`_launcher`. Falls back to ``kernel(*args)`` where :func:`_direct_ok` says no, for
    arguments :func:`_dispatch_key` cannot describe, and when the bound kernel has no generated
    host function with a ``_launcher`` parameter. At most :data:`HOST_CACHE_SIZE` entries are
    kept (the cache starts over when full).
    """
    if not _direct_ok():
        return kernel(*args)
    key = _dispatch_key(args)
    if key is None:
        return kernel(*args)
    entry = _HOST.get((id(kernel), key))
    if entry is not None:  # the entry holds its kernel: no other object can have that id meanwhile
        return entry[1](*args, _launcher=_launcher)
    out = kernel(*args)
    run = getattr(kernel.bind(args), "_run", None)
    if run is not None and "_launcher" in inspect.signature(run).parameters:
        if len(_HOST) >= HOST_CACHE_SIZE:
            _HOST.clear()
        _HOST[(id(kernel), key)] = (kernel, run)
    return out
