"""Intel XPU backend (torch's native XPU build, oneAPI / Level Zero).

Family names follow Intel's code names as the oneAPI device architecture enum and
``sycl-ls`` print them: ``pvc`` (Data Center GPU Max), ``bmg`` (Arc B-series,
Battlemage), ``dg2`` (Arc A-series), ``lnl`` (Lunar Lake), ``mtl`` (Meteor Lake).
"""

from __future__ import annotations

from typing import Any

import torch

from accel import _compat

from ._base import Backend, Capabilities, dtypes_for

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
