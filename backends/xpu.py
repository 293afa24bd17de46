"""Intel XPU backend (torch's native XPU build, oneAPI / Level Zero).

Family names (the tuning-table arch keys) follow Intel's code names as the oneAPI device architecture
enum prints them (``intel_gpu_<name>``): ``pvc`` (Data Center GPU Max, Ponte Vecchio), ``bmg`` (Arc
B-series, Battlemage), ``acm`` (Arc A-series, Alchemist; the enum's alias is ``dg2``), ``lnl`` (Lunar
Lake), ``mtl`` (Meteor Lake), ``arl`` (Arrow Lake), ``dg1``. They are read, in order, from what
``torch.xpu.get_device_properties`` exposes:

1. ``architecture`` (int; "device architecture identifier (experimental)" in torch's
   ``torch/xpu/__init__.py`` docstring): the ``sycl::ext::oneapi::experimental::architecture`` value,
   mapped by :data:`SYCL_ARCHITECTURES` (values from intel/llvm
   ``sycl/include/sycl/ext/oneapi/experimental/architectures.def``);
2. ``device_id`` (the PCI product id), mapped by :data:`DEVICE_IDS` (torch's own table in
   ``torch/testing/_internal/common_xpu.py``, from intel-graphics-compiler ``inc/common/igfxfmid.h``);
3. the device name (:func:`xpu_family`); else ``"xpu"`` (no per-arch table can be keyed: the kernels
   decline, saying so).
"""

from __future__ import annotations

from typing import Any

import torch

from accel import _compat

from ._base import TELEMETRY_QUERIES, Backend, Capabilities, KernelLimits, dtypes_for

__all__ = ["DEVICE_IDS", "SYCL_ARCHITECTURES", "XpuBackend", "xpu_arch", "xpu_family"]

_NAME_HINTS = (
    ("max 1", "pvc"), ("data center gpu max", "pvc"), ("b580", "bmg"), ("b570", "bmg"), ("arc(tm) b", "bmg"),
    ("arc(tm) a", "acm"), ("a770", "acm"), ("a750", "acm"), ("lunar lake", "lnl"), ("arc(tm) 140v", "lnl"),
    ("meteor lake", "mtl"), ("arc(tm) graphics", "mtl"), ("flex", "acm"),
)

#: ``sycl::ext::oneapi::experimental::architecture`` value -> family (intel/llvm
#: ``sycl/include/sycl/ext/oneapi/experimental/architectures.def``: ``0x00`` family byte, the GMDID below).
SYCL_ARCHITECTURES: dict[int, str] = {
    0x0000000302800000: "dg1",
    0x000000030DC00800: "acm", 0x000000030E000500: "acm", 0x000000030E400000: "acm",  # Alchemist G10/G11/G12
    0x000000030F000700: "pvc", 0x000000030F400700: "pvc",  # Ponte Vecchio, Ponte Vecchio VG
    0x0000000311800400: "mtl", 0x0000000311C00400: "mtl",  # Meteor Lake U/S, H
    0x0000000312800400: "arl",  # Arrow Lake H
    0x0000000500400400: "bmg",  # Battlemage G21
    0x0000000501000400: "lnl",  # Lunar Lake
}

#: PCI product id -> family: torch's table (``torch/testing/_internal/common_xpu.py``, torch 2.13-2.15).
DEVICE_IDS: dict[int, str] = {
    **{i: "pvc" for i in (0x0BD0, 0x0BD4, 0x0BD5, 0x0BD6, 0x0BD7, 0x0BD8, 0x0BD9, 0x0BDA, 0x0BDB, 0x0B69, 0x0B6E)},
    **{i: "bmg" for i in (0xE202, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE215, 0xE216, 0xE220, 0xE221,
                          0xE222, 0xE223)},
}


def xpu_arch(props: Any) -> str:
    """The family of an XPU device from its ``torch.xpu.get_device_properties`` (see the module docstring
    for the order: ``architecture``, ``device_id``, the name); ``"xpu"`` where none of them is known.

    Example:
        >>> from types import SimpleNamespace
        >>> xpu_arch(SimpleNamespace(architecture=0x0000000500400400, name="?"))
        'bmg'
        >>> xpu_arch(SimpleNamespace(device_id=0x0BD5, name="?"))
        'pvc'
    """
    found = SYCL_ARCHITECTURES.get(getattr(props, "architecture", None))
    if found is None:
        found = DEVICE_IDS.get(getattr(props, "device_id", None))
    return found or xpu_family(str(getattr(props, "name", "")))


def xpu_family(device_name: str) -> str:
    """Intel code name from the driver's device name (``"Intel(R) Data Center GPU Max 1550"`` -> ``"pvc"``)."""
    low = device_name.lower()
    for hint, family in _NAME_HINTS:
        if hint in low:
            return family
    return "xpu"


#: Where each runtime / memory operation of ``torch.xpu`` lives, fastest first (raw bindings first,
#: as for ``torch.cuda`` in :data:`accel.backends._base.TORCH_CUDA_SOURCES`).
XPU_SOURCES: dict[str, tuple[str, ...]] = {
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
    "reset_accumulated": ("torch._C._xpu_resetAccumulatedMemoryStats", "torch.xpu.reset_accumulated_memory_stats"),
    "empty_cache": ("torch.xpu.empty_cache",),
    "empty_host_cache": ("torch.accelerator.empty_host_cache",),
    "mem_get_info": ("torch._C._accelerator_getMemoryInfo", "torch._C._xpu_getMemoryInfo", "torch.xpu.mem_get_info"),
    **{name: (f"torch.xpu.{name}",) for name in TELEMETRY_QUERIES},
}


class XpuBackend(Backend):
    """Intel GPUs through torch's native XPU build."""

    name = "xpu"
    vendor = "Intel"
    torch_device_type = "xpu"
    dispatch_key = "XPU"
    visible_devices_env = ("ZE_AFFINITY_MASK",)
    distributed_backend = "xccl"
    block_scale_swizzle = "NO_SWIZZLE"  # oneDNN: unswizzled, unpadded (torch/_meta_registrations.py)
    priority = 80
    runtime_sources = XPU_SOURCES
    vendor_graph_class = "torch.xpu.XPUGraph"
    graph_capture_error_mode = None  # torch.xpu.XPUGraph.capture_begin takes no mode
    allocator_binding_prefix = "_xpu"
    power_to_watts = 1.0  # torch.xpu's Level Zero energy-counter ratio reports watts

    @classmethod
    def _vendor_graph_type(cls) -> type | None:
        """``torch.xpu.XPUGraph`` where the running torch's XPU build has it."""
        return torch.xpu.XPUGraph if _compat.has_xpu_graph() else None

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        if not hasattr(torch, "xpu") or not getattr(torch.version, "xpu", None):
            return f"torch {torch.__version__} is not an XPU build (torch.version.xpu is None)"
        return None

    @classmethod
    def _device_count(cls) -> int:
        return int(torch.xpu.device_count())

    def _properties(self, index: int) -> Any:
        return torch.xpu.get_device_properties(index)

    def device_name(self, index: int = 0, /) -> str:
        """The device name the Level Zero driver reports. .. note:: Initialises the XPU runtime."""
        return str(self._properties(index).name)

    def arch(self, index: int = 0, /) -> str:
        """Intel family (``pvc``, ``bmg``, ``acm``, ``lnl``, ...) from the device properties (:func:`xpu_arch`).

        .. note:: Initialises the XPU runtime.
        """
        return xpu_arch(self._properties(index))

    @classmethod
    def device_arch(cls, device: torch.device, /) -> str:
        """The family of a concrete XPU device (:func:`xpu_arch`), the tuning-table arch key.

        .. note:: Initialises the XPU runtime.
        """
        return xpu_arch(torch.xpu.get_device_properties(device))

    @classmethod
    def device_kernel_limits(cls, device: torch.device, /) -> KernelLimits:
        """Sub-group size 32 where the device offers it (Intel's Triton compiles with
        ``threads_per_warp=32`` by default; ``sub_group_sizes`` of the properties), else the largest it
        offers; the work-group's local memory (``local_mem_size``); fp8 OCP.

        .. note:: Initialises the XPU runtime.
        """
        props = torch.xpu.get_device_properties(device)
        sizes = [int(s) for s in (getattr(props, "sub_group_sizes", None) or [])]
        wave = 32 if not sizes or 32 in sizes else max(sizes)
        local = getattr(props, "local_mem_size", None)
        return KernelLimits(xpu_arch(props), "xe", wave, int(local) if local else None, "ocp",
                            "torch.xpu.get_device_properties (sub_group_sizes, local_mem_size)",
                            int(getattr(props, "last_level_cache_size", 0) or 0) or None)

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """Feature flags from the device properties (``has_fp64``) and the running torch."""
        props = self._properties(index)
        has_fp64 = bool(getattr(props, "has_fp64", True))
        return Capabilities(
            dtypes=dtypes_for(float64=has_fp64, fp8="ocp"),
            fp8="ocp",
            # torch's XPU scaled_mm (oneDNN) takes MX block scales (torch/_meta_registrations.py)
            mxfp8=True,
            mxfp4=True,
            float64=has_fp64,
            graph_capture=_compat.has_xpu_graph(),
            flex_attention=True,
            memory_telemetry=True,
        )
