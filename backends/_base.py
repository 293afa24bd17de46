"""Shared logic of every vendor backend.

A backend is the vendor's facts as class attributes plus a few hooks. Vendor
modules (``cuda.py``, ``rocm.py``, ...) only state facts and the one or two
decisions that really differ; everything else lives here, once.

Facts are read from torch at the torch level (``torch.version.*``, availability
functions, device properties), which is exactly what :mod:`accel.testing` fakes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

# a backend's answers (probe result, capabilities, kernel limits) are in _facts, compile plans in _compile_plan
from ._compile_plan import CompilePlan, GemmTemplate, PlanItem, build, template_ok
from ._facts import (  # noqa: F401 - dtypes_for: the vendor modules import it from here
    TELEMETRY_QUERIES,
    Capabilities,
    KernelLimits,
    ProbeResult,
    always_false,
    always_true,
    constant,
    dtypes_for,
    no_op,
    one_device_runtime,
)

__all__ = [
    "Backend",
    "Capabilities",
    "CompilePlan",
    "GemmTemplate",
    "KernelLimits",
    "PlanItem",
    "ProbeResult",
    "TELEMETRY_QUERIES",
    "always_false",
    "always_true",
    "constant",
    "no_op",
    "one_device_runtime",
]


class Backend:
    """One vendor: facts as class attributes, hooks as methods.

    Subclasses set the class attributes and implement :meth:`_probe`,
    :meth:`_device_count`, :meth:`arch` and :meth:`capabilities`.
    Out-of-tree backends subclass this and register through the entry-point
    group ``accel.backends``.

    Attributes:
        name: backend name; also the pytest marker, tox env and ``ACCEL_DEVICE`` value.
        vendor: the hardware vendor (``"NVIDIA"``, ``"AMD"``, ``"Intel"``, ``"Apple"``, ...).
        torch_device_type: the torch device type (``"cuda"`` for ROCm too).
        dispatch_key: the ATen dispatch key kernels register at.
        visible_devices_env: environment variables that restrict visible devices.
        distributed_backend: the c10d backend name.
        block_scale_swizzle: ``torch.nn.functional.SwizzleType`` name of the layout this
            vendor's block-scaled GEMM wants its MX/NVFP4 scales in (``None``: unknown).
        priority: higher wins when several backends are available.
        runtime_sources: where each runtime / memory operation lives in torch, fastest first
            (``{"current_device": ("torch._C._cuda_getDevice", "torch.cuda.current_device"), ...}``);
            :func:`accel._compat.resolve` hands out the first one the running torch has.
        has_events: torch has events for this device type (the CPU has none).
        host_stream: the device's only stream is the host's (``torch.Stream("cpu")``): index 0,
            nothing to switch.
        vendor_graph_class: qualified name of the vendor's graph class (``"torch.cuda.CUDAGraph"``),
            used where torch has no ``torch.accelerator.Graph``; ``None``: the vendor has none.
        no_graphs_reason: why this backend has no graph capture at all (``None``: it may have).
        graph_capture_error_mode: the vendor graph class's default ``capture_error_mode``
            (``None``: its ``capture_begin`` takes no mode).
        allocator_binding_prefix: prefix of the caching allocator's ``torch._C`` bindings
            (``"_cuda"``: ``torch._C._cuda_releasePool``); ``None``: none.
        power_to_watts: factor turning the device module's ``power_draw`` into watts.
        rng_is_host: the backend's random stream is the torch CPU generator.
    """

    name: ClassVar[str]
    vendor: ClassVar[str]
    torch_device_type: ClassVar[str]
    dispatch_key: ClassVar[str]
    visible_devices_env: ClassVar[tuple[str, ...]] = ()
    distributed_backend: ClassVar[str] = "gloo"
    #: newer c10d backends preferred over ``distributed_backend`` where the running torch registers them.
    newer_distributed_backends: ClassVar[tuple[str, ...]] = ()
    block_scale_swizzle: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    runtime_sources: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    has_events: ClassVar[bool] = True
    host_stream: ClassVar[bool] = False
    vendor_graph_class: ClassVar[str | None] = None
    no_graphs_reason: ClassVar[str | None] = None
    graph_capture_error_mode: ClassVar[str | None] = None
    allocator_binding_prefix: ClassVar[str | None] = None
    power_to_watts: ClassVar[float] = 1.0
    rng_is_host: ClassVar[bool] = False

    # -- probing -----------------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """Say whether this backend is usable here, and why. Stateless; never raises.

        .. note:: Does not initialise any device runtime (CUDA counts devices
           through NVML where it can, which does not poison ``fork``).
        """
        try:
            why_not = cls._unavailable_reason()
            if why_not:
                return ProbeResult(cls.name, False, why_not, 0)
            count = cls._device_count()
        except (RuntimeError, OSError, AttributeError, ImportError) as exc:
            return ProbeResult(cls.name, False, f"probe failed: {type(exc).__name__}: {exc}", 0)
        if count <= 0:
            hidden = tuple((k, os.environ[k]) for k in cls.visible_devices_env if k in os.environ)
            env = ", ".join(f"{k}={v!r}" for k, v in hidden)
            return ProbeResult(cls.name, False, f"no device visible (device_count()={count}{'; ' + env if env else ''})",
                               0, hidden)
        return ProbeResult(cls.name, True, cls._available_reason(count), count)

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        """A reason this backend cannot work in this build, or ``None``."""
        raise NotImplementedError

    @classmethod
    def _device_count(cls) -> int:
        """Visible devices, counted without initialising the runtime."""
        raise NotImplementedError

    @classmethod
    def _available_reason(cls, count: int) -> str:
        return f"{count} device(s) visible"

    # -- per-device facts -----------------------------------------------------------
    def arch(self, index: int = 0, /) -> str:
        """The device's architecture name (``sm_90``, ``gfx942``, ``pvc``, ``apple-m3``, ``x86_64``)."""
        raise NotImplementedError

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """The device's :class:`Capabilities` (feature flags)."""
        raise NotImplementedError

    def device_name(self, index: int = 0, /) -> str:
        """The marketing name of the device, as the driver reports it."""
        return self.name

    def arch_supported(self, index: int = 0, /) -> tuple[bool, str]:
        """Whether the installed torch build has kernels for this device, and why."""
        return True, "no per-arch kernels in this build"

    # -- compile options (shared logic; vendor facts are the data in gemm_templates) ----
    #: GEMM template families Inductor may add under max-autotune on this vendor.
    gemm_templates: ClassVar[tuple[GemmTemplate, ...]] = ()

    def compile_plan(self, *, mode: str | None = None, options: dict[str, Any] | None = None,
                     index: int = 0) -> CompilePlan:
        """What ``torch.compile`` should additionally be told on this vendor, arch and torch, and why.

        Every key is checked against ``torch._inductor.config`` of the running torch
        before it is planned; a key the user already set in ``options`` is left to
        the user (the decision moves to :attr:`CompilePlan.skipped`).

        Args:
            mode: a ``torch.compile`` mode (``None`` = ``"default"``, ``"max-autotune"``, ...).
            options: the user's explicit Inductor options; they always win.
            index: the device whose arch decides.

        Returns:
            A :class:`CompilePlan`: the ``(key, value, reason)`` items to set, plus the
            decisions not taken with their reasons.

        Raises:
            CompileOptionError: ``mode`` is not a mode of the running torch; ``options``
                is not ``None`` or a dict with ``str`` keys.

        .. note:: Imports ``torch._inductor`` and reads the device arch (initialises
           the device runtime on real hardware).
        """
        return build(self, mode=mode, options=options, index=index)

    _template_ok = staticmethod(template_ok)  # whether one template family is offered; a vendor may override it

    def _vendor_plan(self, plan: CompilePlan, *, mode_opts: dict[str, Any], options: dict[str, Any],
                     autotune: bool, index: int) -> None:
        """Hook for a vendor's decisions that are not GEMM template families (none by default)."""

    def flex_attention_kernel_options(self, seq_len: int, *, head_dim: int, dtype: torch.dtype,
                                      index: int = 0) -> dict[str, int]:
        """``kernel_options`` for ``flex_attention`` at this shape; ``{}`` (Inductor decides) by default."""
        return {}

    # -- graph capture (accel.graphs asks these) ----------------------------------------
    @classmethod
    def graph_class(cls) -> tuple[str, type] | None:
        """The graph class :mod:`accel.graphs` captures with here, as ``(qualified name, class)``.

        ``torch.accelerator.Graph`` (torch 2.12+) where the vendor has graph capture at all,
        else :attr:`vendor_graph_class` where the running torch has it. ``None`` where the
        running torch has no graph capture for this vendor (MPS, CPU, an XPU build without
        ``torch.xpu.XPUGraph``). Never initialises a device.
        """
        from accel import _compat

        if cls.vendor_graph_class is None:
            return None
        generic = _compat.accelerator_graph()
        if generic is not None:
            return "torch.accelerator.Graph", generic
        found = cls._vendor_graph_type()
        return None if found is None else (cls.vendor_graph_class, found)

    @classmethod
    def _vendor_graph_type(cls) -> type | None:
        """The class at :attr:`vendor_graph_class` in the running torch, or ``None``."""
        from accel import _compat

        return _compat.lookup(cls.vendor_graph_class) if cls.vendor_graph_class else None

    @classmethod
    def graph_pool_functions(cls) -> tuple[Any, Any, Any]:
        """``(graph_pool_handle, end_allocate_to_pool, release_pool)`` of this vendor's allocator
        (see :func:`accel._compat.pool_functions`); each ``None`` where the running torch lacks it."""
        from accel import _compat

        return _compat.pool_functions(cls.torch_device_type, cls.allocator_binding_prefix)

    # -- runtime (accel.runtime asks these) -----------------------------------------------
    @classmethod
    def runtime_functions(cls, count: int) -> dict[str, Callable[..., Any]]:
        """The runtime operations of this backend: ``device_count``, ``is_initialized``, ``current``,
        ``set_device``, ``sync``, ``sync_device``, ``get_stream``, ``set_stream``.

        By default each is the first of :attr:`runtime_sources` the running torch has, else the
        ``torch.accelerator`` function (a caching-allocator device with lazy initialisation).
        ``count`` is the probe's device count.
        """
        from accel import _compat

        t, acc = cls.torch_device_type, torch.accelerator

        def op(name: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
            return _compat.resolve(t, name) or fallback

        return {
            "device_count": op("device_count", acc.device_count),
            "is_initialized": op("is_initialized", always_true),
            "current": op("current_device", acc.current_device_index),
            "set_device": op("set_device", acc.set_device_index),
            "sync": op("synchronize", acc.synchronize),
            "sync_device": op("synchronize_device", acc.synchronize),
            "get_stream": op("current_stream", acc.current_stream),
            "set_stream": op("set_stream", acc.set_stream),
        }

    # -- memory (accel.memory asks these) -------------------------------------------------
    @classmethod
    def memory_counters(cls) -> tuple[dict[str, Any], Callable[[], tuple[int, int]], dict[str, str]] | None:
        """``None``: the caching allocator's statistics answer (the default). Otherwise
        ``(read, memory_info, stats_keys)`` for a backend with fixed counters and one device:
        ``read`` maps ``"allocated"``, ``"reserved"``, ``"empty_cache"`` to functions of no
        arguments (missing: not tracked), ``memory_info()`` gives ``(free, total)`` bytes, and
        ``stats_keys`` maps ``memory_stats`` keys to names in ``read``."""
        return None

    # -- random numbers (accel.random asks these) -----------------------------------------
    @classmethod
    def device_module(cls) -> Any:
        """``torch.<torch_device_type>`` (``torch.cuda`` also for ROCm), or ``None``."""
        from accel import _compat

        return _compat.device_module(cls.torch_device_type)

    @classmethod
    def default_generator(cls, index: int | None = None, /) -> torch.Generator:
        """The default ``torch.Generator`` of device ``index`` (``None``: the current device):
        ``default_generators[index]`` of the device module (``torch.cuda`` incl. ROCm, ``torch.xpu``).

        Raises:
            AttributeError: the device module exposes no default generator.

        .. note:: Initialises the device runtime (the generators exist only after it).
        """
        from accel import _compat

        return _compat.module_default_generator(cls.device_module(), cls.torch_device_type, index)

    @staticmethod
    def rng_current_index(module: Any) -> int:
        """The current device index as the device module's RNG functions count it."""
        return int(module.current_device()) if hasattr(module, "current_device") else 0

    @staticmethod
    def rng_states(module: Any, devices: list[Any]) -> list[torch.Tensor]:
        """The RNG state of every device (``devices``: one device argument per index, in order)."""
        if hasattr(module, "get_rng_state_all"):
            return list(module.get_rng_state_all())
        return [module.get_rng_state(d) for d in devices]

    @staticmethod
    def rng_initial_seed(module: Any) -> int | None:
        """The current device's initial seed from the device module, or ``None`` where it has no
        such function (the caller then reads the default generator's)."""
        return int(module.initial_seed()) if hasattr(module, "initial_seed") else None

    @staticmethod
    def rng_manual_seed_all(module: Any, seed: int) -> None:
        """Seed the default generator of every device of the module."""
        (module.manual_seed_all if hasattr(module, "manual_seed_all") else module.manual_seed)(seed)

    # -- kernels (accel.kernels asks these) -------------------------------------------------
    @classmethod
    def device_arch(cls, device: torch.device, /) -> str:
        """The tuning-table arch key of a concrete device: the device type by default
        (CUDA and ROCm name their arch, ``sm_90`` / ``gfx942``).

        Example:
            >>> from accel.backends import Backend
            >>> Backend.device_arch(torch.device("meta"))
            'meta'
        """
        return device.type

    @classmethod
    def device_kernel_limits(cls, device: torch.device, /) -> KernelLimits:
        """The :class:`KernelLimits` of a concrete device (kernel launch configs ask this, never a vendor
        branch of their own). The base answer is the host's: wave size 1, no shared-memory limit known.

        Example:
            >>> from accel.backends import Backend
            >>> Backend.device_kernel_limits(torch.device("meta")).family
            'host'
        """
        return KernelLimits(cls.device_arch(device), "host", 1, None, None, "no GPU: host execution")

    def kernel_limits(self, index: int = 0, /) -> KernelLimits:
        """:meth:`device_kernel_limits` of device ``index`` of this backend.

        .. note:: Initialises the device runtime where reading device properties does (CUDA, HIP, XPU).
        """
        return self.device_kernel_limits(self.device(index))

    def compile_options(self, *, mode: str | None = None) -> dict[str, Any]:
        """The Inductor options :meth:`compile_plan` would set for ``mode`` (``{key: value}``)."""
        return self.compile_plan(mode=mode).options

    def device(self, index: int | None = None, /) -> torch.device:
        """A ``torch.device`` of this backend (``index=None`` means the current device)."""
        return torch.device(self.torch_device_type, index) if index is not None else torch.device(self.torch_device_type)

    def device_count(self) -> int:
        """Visible devices; 0 when unavailable. Does not initialise the runtime."""
        return self.probe().device_count

    def __repr__(self) -> str:
        return f"<accel backend {self.name!r} ({self.vendor}, torch device type {self.torch_device_type!r})>"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))



#: Where each runtime / memory operation of ``torch.cuda`` lives, fastest first. Raw ``torch._C``
#: bindings come first where they answer exactly what the public function does minus its Python
#: argument handling (accel validates arguments itself); the public functions follow as the
#: portable fallback. ``synchronize`` / ``memory_stats_raw`` / ``reset_*`` may only be called once
#: ``is_initialized`` says so: the raw bindings do not check it themselves.
TORCH_CUDA_SOURCES: dict[str, tuple[str, ...]] = {
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
    "reset_accumulated": ("torch._C._cuda_resetAccumulatedMemoryStats", "torch.cuda.reset_accumulated_memory_stats"),
    "empty_cache": ("torch.cuda.empty_cache",),
    "empty_host_cache": ("torch._C._host_emptyCache", "torch.accelerator.empty_host_cache"),
    "mem_get_info": ("torch._C._accelerator_getMemoryInfo", "torch.cuda.mem_get_info"),
    **{name: (f"torch.cuda.{name}",) for name in TELEMETRY_QUERIES},
}


class TorchCudaDevices:
    """Facts both CUDA and ROCm read through ``torch.cuda`` (ROCm builds reuse it)."""

    runtime_sources: ClassVar[Mapping[str, tuple[str, ...]]] = TORCH_CUDA_SOURCES
    vendor_graph_class: ClassVar[str | None] = "torch.cuda.CUDAGraph"
    graph_capture_error_mode: ClassVar[str | None] = "global"
    allocator_binding_prefix: ClassVar[str | None] = "_cuda"

    @classmethod
    def _device_count(cls) -> int:
        # torch.cuda.device_count() asks NVML / amd-smi first and only falls back
        # to cudaGetDeviceCount when those fail; it never runs torch's lazy init.
        return int(torch.cuda.device_count())

    def _properties(self, index: int) -> Any:
        return torch.cuda.get_device_properties(index)

    def device_name(self, index: int = 0, /) -> str:
        """The device name the driver reports.

        .. note:: Initialises the CUDA/HIP runtime (``torch.cuda.get_device_properties``).
        """
        return str(self._properties(index).name)
