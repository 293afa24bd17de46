"""AMD ROCm backend: arch from ``gcnArchName``, never from the capability tuple.

ROCm builds of torch report device type ``cuda`` and a capability tuple such as
``(9, 4)`` for gfx942; accel reads the vendor from ``torch.version.hip`` and the arch
from ``gcnArchName`` so an AMD GPU is never mistaken for an NVIDIA arch.

Sources: AMD ROCm docs, "Precision support" (fp8 ``fnuz`` on gfx942 MI300; OCP fp8
on gfx950 MI350 and gfx12 RDNA4; MXFP8/MXFP4 on gfx950) and the LLVM AMDGPU
processor table for the families.
"""

from __future__ import annotations

import torch

from ._base import Backend, Capabilities, TorchCudaDevices, dtypes_for

__all__ = ["RocmBackend", "gfx_arch", "gfx_family"]


def gfx_arch(gcn_arch_name: str) -> str:
    """Strip feature suffixes: ``"gfx942:sramecc+:xnack-"`` -> ``"gfx942"``."""
    return gcn_arch_name.split(":", 1)[0].strip()


def gfx_family(arch: str) -> str:
    """AMD family of a gfx arch: CDNA2/3/4, RDNA3/4, or ``"unknown"``."""
    if arch in ("gfx90a",):
        return "CDNA2"
    if arch in ("gfx940", "gfx941", "gfx942"):
        return "CDNA3"
    if arch == "gfx950":
        return "CDNA4"
    if arch.startswith("gfx110") or arch.startswith("gfx115"):
        return "RDNA3"
    if arch.startswith("gfx120"):
        return "RDNA4"
    return "unknown"


def _fp8_flavour(arch: str) -> str | None:
    if arch in ("gfx940", "gfx941", "gfx942"):
        return "fnuz"
    if arch == "gfx950" or arch.startswith("gfx120"):
        return "ocp"
    return None


class RocmBackend(TorchCudaDevices, Backend):
    """AMD GPUs through a ROCm (HIP) build of torch."""

    name = "rocm"
    vendor = "AMD"
    torch_device_type = "cuda"
    dispatch_key = "CUDA"
    visible_devices_env = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    distributed_backend = "nccl"  # RCCL answers to the name "nccl" in c10d
    priority = 100

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        if not getattr(torch.version, "hip", None):
            return f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)"
        return None

    def arch(self, index: int = 0, /) -> str:
        """``gfxNNN`` of device ``index`` with feature suffixes stripped.

        .. note:: Initialises the HIP runtime.
        """
        return gfx_arch(str(self._properties(index).gcnArchName))

    def family(self, index: int = 0, /) -> str:
        """CDNA2/3/4 or RDNA3/4."""
        return gfx_family(self.arch(index))

    def arch_supported(self, index: int = 0, /) -> tuple[bool, str]:
        """Whether ``torch.cuda.get_arch_list()`` has code objects for this gfx arch."""
        arch = self.arch(index)
        archs = [gfx_arch(a) for a in torch.cuda.get_arch_list()]
        if arch in archs:
            return True, f"build has {arch}"
        return False, (
            f"{arch} is not in this torch build's arch list {archs}: install the ROCm torch wheel "
            "that lists it (https://pytorch.org/get-started/locally/)"
        )

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """Feature flags by the actual gfx arch (fp8 flavour: fnuz on gfx942, OCP on gfx950/gfx12)."""
        arch = self.arch(index)
        family = gfx_family(arch)
        fp8 = _fp8_flavour(arch)
        cdna3_plus = family in ("CDNA3", "CDNA4")
        return Capabilities(
            dtypes=dtypes_for(fp8=fp8),
            fp8=fp8,
            mxfp8=family == "CDNA4",
            mxfp4=family == "CDNA4",
            graph_capture=True,
            symmetric_memory=cdna3_plus,
            flex_attention=True,
            grouped_gemm=cdna3_plus,
            tunable_op=True,
            memory_telemetry=True,
        )
