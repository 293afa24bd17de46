"""The one place that knows which running torch has which function.

Feature detection with ``hasattr`` on the running torch, never version-string
comparisons. Everything else in accel asks this module. Answers are computed
once, at first use, and never import a DSL runtime or initialise a device.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "RUNTIME_SOURCES",
    "accelerator_has",
    "accelerator_random",
    "default_generator",
    "device_module",
    "event_class",
    "has_accelerator_graph",
    "has_accelerator_random",
    "has_native_dsl_registry",
    "has_xpu_graph",
    "graph_class",
    "graph_pool_functions",
    "module_version",
    "resolve",
    "stream_class",
    # issue 8: compile options, low-precision GEMM, distributed, TunableOp
    "c10d_backends",
    "ck_available",
    "cutedsl_available",
    "has_cuda_tunable",
    "tunable_writer",
    "has_dtype",
    "has_rdna3_flex_heuristics",
    "has_scaled_mm",
    "has_scaled_mm_v2",
    "has_symmetric_memory",
    "inductor_config_get",
    "inductor_config_has",
    "inductor_mode_options",
    "nvgemm_available",
    "origami_available",
    "library_get_kernel",
    "module_version",
    "checked_version",
    "native_dsl_registry",
    "native_dsl_registry_reason",
]


def accelerator_has(name: str) -> bool:
    """Whether ``torch.accelerator.<name>`` exists in the running torch."""
    return hasattr(getattr(torch, "accelerator", None), name)


@functools.cache
def has_accelerator_random() -> bool:
    """``torch.accelerator.random`` (torch 2.14+)."""
    return accelerator_has("random")


def accelerator_random():
    """``torch.accelerator.random`` (2.14+; reads only: ``initial_seed``, ``get_rng_state(_all)``), or ``None``."""
    return torch.accelerator.random if has_accelerator_random() else None


@functools.cache
def has_accelerator_graph() -> bool:
    """``torch.accelerator.Graph`` (torch 2.12+)."""
    return accelerator_has("Graph")


@functools.cache
def has_xpu_graph() -> bool:
    """An XPU graph class (``torch.xpu.XPUGraph``) in the running torch."""
    return hasattr(getattr(torch, "xpu", None), "XPUGraph")


def graph_class(device_type: str) -> tuple[str, type] | None:
    """The graph class the running torch offers for ``device_type``, as ``(qualified name, class)``.

    Order: ``torch.accelerator.Graph`` (torch 2.12+, any device type with a graph
    implementation), else the vendor class: ``torch.cuda.CUDAGraph`` for ``"cuda"``
    (CUDA and ROCm builds), ``torch.xpu.XPUGraph`` for ``"xpu"``. ``None`` when the
    running torch has none for that device type (``"mps"``, ``"cpu"``, old XPU builds).
    Reads attributes only; never initialises a device.
    """
    if device_type in ("cuda", "xpu") and has_accelerator_graph():
        return "torch.accelerator.Graph", torch.accelerator.Graph
    if device_type == "cuda" and hasattr(torch.cuda, "CUDAGraph"):
        return "torch.cuda.CUDAGraph", torch.cuda.CUDAGraph
    if device_type == "xpu" and has_xpu_graph():
        return "torch.xpu.XPUGraph", torch.xpu.XPUGraph
    return None


def graph_pool_functions(device_type: str) -> tuple[Any, Any, Any]:
    """``(graph_pool_handle, end_allocate_to_pool, release_pool)`` of ``device_type``'s allocator.

    ``graph_pool_handle()`` returns a fresh memory-pool id (``torch.cuda.graph_pool_handle``,
    ``torch.xpu.graph_pool_handle``). ``end_allocate_to_pool(device_index, pool)`` and
    ``release_pool(device_index, pool)`` are the allocator hooks (``torch._C._cuda_endAllocateToPool``,
    older ``torch._C._cuda_endAllocateCurrentStreamToPool``; ``torch._C._cuda_releasePool``; the
    ``_xpu_`` ones) used to close a capture that the driver aborted. Each is ``None`` where the
    running torch lacks it.
    """
    module = getattr(torch, device_type, None)
    handle = getattr(module, "graph_pool_handle", None)
    prefix = {"cuda": "_cuda", "xpu": "_xpu"}.get(device_type)
    if prefix is None:
        return handle, None, None
    end = getattr(torch._C, f"{prefix}_endAllocateToPool", None) or getattr(
        torch._C, f"{prefix}_endAllocateCurrentStreamToPool", None
    )
    release = getattr(torch._C, f"{prefix}_releasePool", None)
    return handle, end, release


@functools.cache
def has_native_dsl_registry() -> bool:
    """``torch._native`` (the native DSL operator registry, torch 2.13+). Not imported here."""
    return importlib.util.find_spec("torch._native") is not None


def device_module(device_type: str):
    """``torch.<device_type>`` (``torch.cuda`` also for ROCm, ``torch.xpu``, ``torch.mps``), or ``None``.

    Uses ``torch.get_device_module`` where the running torch has it.
    """
    if hasattr(torch, "get_device_module"):
        try:
            return torch.get_device_module(device_type)
        except RuntimeError:  # an unknown device type: torch raises instead of returning None
            return None
    return getattr(torch, device_type, None)


def default_generator(device_type: str, index: int | None = None) -> torch.Generator:
    """The default ``torch.Generator`` of one device, found the way the running torch exposes it.

    ``cpu``: ``torch.default_generator``. Device modules with ``default_generators``
    (``torch.cuda`` incl. ROCm, ``torch.xpu``): ``init()`` then ``default_generators[index]``
    (``index=None``: the current device). ``torch.mps``: its single default generator.

    Raises:
        AttributeError: the device module exposes no default generator (the caller turns
            this into a typed accel error).

    .. note:: Initialises the device runtime (the generators exist only after it).
    """
    if device_type == "cpu":
        return torch.default_generator
    mod = device_module(device_type)
    if hasattr(mod, "default_generators"):
        if hasattr(mod, "init"):
            mod.init()
        idx = mod.current_device() if index is None else index
        return mod.default_generators[idx]
    if hasattr(mod, "_get_default_mps_generator"):  # torch.mps: one device, no public getter
        return mod._get_default_mps_generator()
    raise AttributeError(f"torch.{device_type} exposes no default generator")


def module_version(dist_or_module: str) -> str | None:
    """Installed version of a distribution (``"triton"``, ``"helion"``), or ``None``.

    Reads package metadata only: never imports the module (importing Triton or
    Helion is slow and may initialise a device).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist_or_module)
    except PackageNotFoundError:
        return None


def checked_version(dist: str, raw: str | None, minimum: Any, hint: str = "") -> tuple[bool, str]:
    """Whether ``raw`` (the installed version of ``dist``, from :func:`module_version`; ``None`` reads as ``"0"``)
    is at least ``minimum`` (a ``packaging`` ``Version``: the oldest version accel's kernels are checked with),
    and the sentence saying so; ``hint`` follows the too-old sentence (e.g. ``"; pip install -U ..."``)."""
    from packaging.version import InvalidVersion, Version

    raw = raw or "0"
    try:
        ver = Version(raw)
    except InvalidVersion:
        return False, f"{dist} version {raw!r} is not a version number"
    if ver < minimum:
        return False, f"{dist} {ver} < {minimum} (oldest version the kernels are checked with{hint})"
    return True, f"{dist} {ver} installed"


# -- runtime and memory functions ---------------------------------------------------------
# Where each runtime / memory operation lives in torch, per torch device type, fastest
# first. ``resolve`` hands out the first one the running torch has, unchanged (no
# wrapper). Raw ``torch._C`` bindings come first where they answer exactly what the
# public function does minus its Python argument handling (accel validates arguments
# itself); the public torch functions follow as the portable fallback.
# ``synchronize`` / ``memory_stats_raw`` / ``reset_*`` sources may only be called once
# ``is_initialized`` says so: the raw bindings do not check it themselves.
_TELEMETRY = ("device_memory_used", "utilization", "power_draw", "clock_rate", "temperature")

RUNTIME_SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "cuda": {  # NVIDIA and AMD (ROCm builds of torch call AMD GPUs "cuda")
        "device_count": ("torch.cuda.device_count",),
        "is_initialized": ("torch.cuda.is_initialized",),
        "current_device": ("torch._C._cuda_getDevice", "torch.cuda.current_device"),
        "set_device": ("torch._C._cuda_setDevice", "torch.cuda.set_device"),
        "synchronize": ("torch._C._cuda_synchronize", "torch.cuda.synchronize"),
        "synchronize_device": ("torch._C._accelerator_synchronizeDevice", "torch.cuda.synchronize"),
        "current_stream": ("torch._C._accelerator_getStream", "torch.cuda.current_stream"),
        "set_stream": ("torch._C._accelerator_setStream", "torch.cuda.set_stream"),
        "memory_stats_raw": ("torch._C._cuda_memoryStats", "torch.cuda.memory_stats_as_nested_dict"),
        "reset_peak": ("torch._C._cuda_resetPeakMemoryStats", "torch.cuda.reset_peak_memory_stats"),
        "reset_accumulated": ("torch._C._cuda_resetAccumulatedMemoryStats",
                              "torch.cuda.reset_accumulated_memory_stats"),
        "empty_cache": ("torch.cuda.empty_cache",),
        "empty_host_cache": ("torch._C._host_emptyCache", "torch.accelerator.empty_host_cache"),
        "mem_get_info": ("torch._C._accelerator_getMemoryInfo", "torch.cuda.mem_get_info"),
        **{name: (f"torch.cuda.{name}",) for name in _TELEMETRY},
    },
    "xpu": {
        "device_count": ("torch.xpu.device_count",),
        "is_initialized": ("torch.xpu.is_initialized",),
        "current_device": ("torch._C._xpu_getDevice", "torch.xpu.current_device"),
        "set_device": ("torch._C._xpu_setDevice", "torch.xpu.set_device"),
        "synchronize": ("torch.xpu.synchronize",),
        "synchronize_device": ("torch._C._accelerator_synchronizeDevice", "torch._C._xpu_synchronize",
                               "torch.xpu.synchronize"),
        "current_stream": ("torch._C._accelerator_getStream", "torch.xpu.current_stream"),
        "set_stream": ("torch._C._accelerator_setStream", "torch.xpu.set_stream"),
        "memory_stats_raw": ("torch._C._xpu_memoryStats", "torch.xpu.memory_stats_as_nested_dict"),
        "reset_peak": ("torch._C._xpu_resetPeakMemoryStats", "torch.xpu.reset_peak_memory_stats"),
        "reset_accumulated": ("torch._C._xpu_resetAccumulatedMemoryStats",
                              "torch.xpu.reset_accumulated_memory_stats"),
        "empty_cache": ("torch.xpu.empty_cache",),
        "empty_host_cache": ("torch.accelerator.empty_host_cache",),
        "mem_get_info": ("torch._C._accelerator_getMemoryInfo", "torch._C._xpu_getMemoryInfo", "torch.xpu.mem_get_info"),
        **{name: (f"torch.xpu.{name}",) for name in _TELEMETRY},
    },
    "mps": {  # one device, no lazy initialisation, its own memory counters
        "synchronize": ("torch._C._mps_deviceSynchronize", "torch.mps.synchronize"),
        "current_stream": ("torch._C._accelerator_getStream", "torch.accelerator.current_stream"),
        "set_stream": ("torch._C._accelerator_setStream", "torch.accelerator.set_stream"),
        "current_allocated_memory": ("torch._C._mps_currentAllocatedMemory", "torch.mps.current_allocated_memory"),
        "driver_allocated_memory": ("torch._C._mps_driverAllocatedMemory", "torch.mps.driver_allocated_memory"),
        "recommended_max_memory": ("torch._C._mps_recommendedMaxMemory", "torch.mps.recommended_max_memory"),
        "empty_cache": ("torch.mps.empty_cache",),
    },
}


def _lookup(path: str) -> Any:
    obj: Any = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def resolve(device_type: str, op: str) -> Callable[..., Any] | None:
    """The torch callable for ``op`` on ``device_type`` in the running torch, or ``None``.

    Tries :data:`RUNTIME_SOURCES` ``[device_type][op]`` in order and returns the first
    attribute the running torch has, unchanged (torch's own function, no wrapper).
    Attribute look-ups only: never imports a DSL, never initialises a device.

    Args:
        device_type: a torch device type (``"cuda"``, ``"xpu"``, ``"mps"``).
        op: an operation name from :data:`RUNTIME_SOURCES` (``"current_device"``, ...).

    Returns:
        The callable, or ``None`` when neither the running torch nor the table has it.

    Example:
        >>> from accel import _compat
        >>> _compat.resolve("cpu", "synchronize") is None
        True
    """
    for path in RUNTIME_SOURCES.get(device_type, {}).get(op, ()):
        found = _lookup(path)
        if found is not None:
            return found
    return None


def stream_class() -> type:
    """The generic stream class: ``torch.Stream`` (present in every supported torch)."""
    return torch.Stream


def event_class() -> type:
    """The generic event class: ``torch.Event`` (present in every supported torch)."""
    return torch.Event


def address_reader(cls: type = torch.Tensor):
    """``cls.const_data_ptr`` where the Python binding has it (it reads a copy-on-write tensor's
    address without materialising a copy), else ``cls.data_ptr`` (torch 2.11, the H200's image,
    has no ``const_data_ptr`` method: measured there, session 5)."""
    return getattr(cls, "const_data_ptr", None) or cls.data_ptr
# -- issue 8: compile options, low-precision GEMM, distributed, TunableOp --------------
# These import torch._inductor / torch.distributed lazily, at first call: never at
# ``import accel``.

_MISSING = object()


def inductor_config_get(key: str, default: object = _MISSING) -> object:
    """Value of the dotted Inductor config ``key`` (``"rocm.origami"``) in the running torch.

    Raises:
        KeyError: the running torch has no such key and no ``default`` was given.
    """
    import torch._inductor.config as cfg

    obj: object = cfg
    for part in key.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
    return obj


def inductor_config_has(key: str) -> bool:
    """Whether ``torch._inductor.config`` of the running torch has the dotted ``key``."""
    absent = object()  # not _MISSING: that one means "no default" and would raise
    return inductor_config_get(key, absent) is not absent


def inductor_mode_options(mode: str | None) -> dict[str, object]:
    """The Inductor options ``torch.compile(mode=mode)`` applies (``torch._inductor.list_mode_options``).

    Raises:
        RuntimeError: ``mode`` is not a mode of the running torch (torch's own error).
    """
    import torch._inductor

    return dict(torch._inductor.list_mode_options(mode or "default"))


def _inductor_utils_flag(name: str) -> bool:
    """Call the running torch's own ``torch._inductor.utils.<name>()`` availability check."""
    import torch._inductor.utils as utils

    fn = getattr(utils, name, None)
    if fn is None:
        return False
    try:
        return bool(fn())
    except (ImportError, AttributeError, ValueError, RuntimeError):
        return False


def nvgemm_available() -> bool:
    """Whether the running torch's NVGEMM (NVIDIA Universal GEMM) backend finds its package.

    Asks torch itself (``ensure_cute_available`` and
    ``ensure_nv_universal_gemm_available``): torch 2.13 looks for ``cutlass_api``,
    torch 2.14 for ``cutlass.operators`` (from ``nvidia-cutlass-dsl``).
    """
    return _inductor_utils_flag("ensure_cute_available") and _inductor_utils_flag("ensure_nv_universal_gemm_available")


def cutedsl_available() -> bool:
    """Whether CuTeDSL (``cutlass``, from ``nvidia-cutlass-dsl``) is importable, as torch checks it."""
    return _inductor_utils_flag("ensure_cute_available")


def _find_spec(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def ck_available() -> bool:
    """Whether Composable Kernel for Inductor (``ck4inductor``) is installed. Not imported."""
    return _find_spec("ck4inductor")


def origami_available() -> bool:
    """Whether ``rocm-origami`` (import name ``origami``) is installed. Not imported."""
    return _find_spec("origami")


def has_rdna3_flex_heuristics() -> bool:
    """Whether Inductor picks RDNA3 FlexAttention block sizes by sequence length itself.

    Detected through ``torch._inductor.utils.using_rocm_rdna3`` (added with those
    heuristics, torch 2.14).
    """
    import torch._inductor.utils as utils

    return hasattr(utils, "using_rocm_rdna3")


def has_dtype(name: str) -> bool:
    """Whether the running torch has ``torch.<name>`` (``"float8_e8m0fnu"``, ``"float4_e2m1fn_x2"``)."""
    return isinstance(getattr(torch, name, None), torch.dtype)


def has_scaled_mm() -> bool:
    """``torch._scaled_mm`` (fp8 GEMM with tensor-wise / row-wise scales)."""
    return hasattr(torch, "_scaled_mm")


def has_scaled_mm_v2() -> bool:
    """``torch.nn.functional.scaled_mm`` with ``ScalingType`` / ``SwizzleType`` (block-scaled MX/NVFP4)."""
    import torch.nn.functional as F

    return hasattr(F, "scaled_mm") and hasattr(F, "ScalingType") and hasattr(F, "SwizzleType")


def c10d_backends() -> tuple[str, ...]:
    """c10d backend names the running torch registers (``torch.distributed.Backend.backend_list``).

    Empty when torch was built without distributed support.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return ()
    return tuple(str(b) for b in dist.Backend.backend_list)


def has_symmetric_memory() -> bool:
    """Whether the running torch ships ``torch.distributed._symmetric_memory``. Not imported."""
    return _find_spec("torch.distributed._symmetric_memory")


def has_cuda_tunable() -> bool:
    """``torch.cuda.tunable`` (TunableOp for GEMMs on CUDA and ROCm)."""
    return hasattr(getattr(torch, "cuda", None), "tunable")


def tunable_writer() -> object:
    """The running torch's "write TunableOp results now" function, or ``None``.

    ``torch.cuda.tunable.write_file`` where public, else the binding
    ``torch._C._cuda_tunableop_write_file``; without either, torch writes at exit.
    """
    return getattr(torch.cuda.tunable, "write_file", None) or getattr(torch._C, "_cuda_tunableop_write_file", None)
def library_get_kernel():
    """``torch.library.get_kernel`` (torch 2.9+), or ``None`` where the running torch lacks it.

    accel's own kernel router uses it to capture the ATen kernel it falls back to.
    """
    return getattr(torch.library, "get_kernel", None)


#: What accel uses of the private native DSL registry (``torch._native.registry``).
_NATIVE_REGISTRY_NAMES = (
    "register_op_override",
    "_register_overrides_from_graph",
    "_destroy_aten_override",
    "_graphs",
    "_filter_state",
    "_OverrideNode",
)
#: Fields of ``torch._native.registry._OverrideNode`` accel reads or keeps stable.
_NATIVE_NODE_FIELDS = ("dsl_name", "op_symbol", "dispatch_key", "cond_fn", "impl_fn", "node_id", "active")


@functools.cache
def native_dsl_registry():
    """The native DSL operator registry module (``torch._native.registry``), or ``None``.

    ``torch._native`` (torch 2.13+) is private. It is returned only when it has
    every function and field accel relies on (checked with ``hasattr``), so a
    torch that changes it makes accel degrade to its own router instead of
    failing. Imports ``torch._native`` (torch itself already does at import) but
    no DSL runtime.

    Returns:
        The ``torch._native.registry`` module, or ``None`` when it is missing or changed.
    """
    if not has_native_dsl_registry():
        return None
    try:
        import torch._native.registry as registry
    except ImportError:
        return None
    if not all(hasattr(registry, name) for name in _NATIVE_REGISTRY_NAMES):
        return None
    fields = getattr(registry._OverrideNode, "__dataclass_fields__", {})
    if not all(name in fields for name in _NATIVE_NODE_FIELDS):
        return None
    if not hasattr(registry._filter_state, "check_enabled"):
        return None
    return registry


def native_dsl_registry_reason() -> str:
    """One line saying why :func:`native_dsl_registry` is or is not usable here."""
    if not has_native_dsl_registry():
        return f"torch {torch.__version__} has no torch._native (native DSL registry, torch 2.13+)"
    if native_dsl_registry() is None:
        return (f"torch {torch.__version__} has torch._native, but its registry lacks one of "
                f"{', '.join(_NATIVE_REGISTRY_NAMES)} or node fields {', '.join(_NATIVE_NODE_FIELDS)}")
    return f"torch {torch.__version__}: torch._native.registry usable"
