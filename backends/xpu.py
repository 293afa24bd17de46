"""Intel XPU backend (torch's native XPU build, oneAPI / Level Zero).

Family names follow Intel's code names as the oneAPI device architecture enum and
``sycl-ls`` print them: ``pvc`` (Data Center GPU Max), ``bmg`` (Arc B-series,
Battlemage), ``dg2`` (Arc A-series), ``lnl`` (Lunar Lake), ``mtl`` (Meteor Lake).
"""

from __future__ import annotations

from typing import Any

import torch

from accel import _compat

from ._base import TELEMETRY_QUERIES, Backend, Capabilities, dtypes_for

__all__ = ["XpuBackend", "xpu_family"]

_NAME_HINTS = (
    ("max 1", "pvc"), ("data center gpu max", "pvc"), ("b580", "bmg"), ("b570", "bmg"), ("arc(tm) b", "bmg"),
    ("arc(tm) a", "dg2"), ("a770", "dg2"), ("a750", "dg2"), ("lunar lake", "lnl"), ("arc(tm) 140v", "lnl"),
    ("meteor lake", "mtl"), ("arc(tm) graphics", "mtl"), ("flex", "dg2"),
)


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
        """Intel code name (``pvc``, ``bmg``, ``dg2``, ...) from the device name."""
        return xpu_family(self.device_name(index))

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
