"""NVIDIA CUDA backend: arch from the compute capability.

Sources: NVIDIA CUDA C Programming Guide, "Compute Capabilities" table (fp8 tensor
cores from 8.9 Ada; MXFP8/MXFP4/NVFP4 block-scaled MMA from 10.0 Blackwell);
``torch.cuda.get_arch_list()`` for what the installed build ships.
"""

from __future__ import annotations

import re

import torch

from ._base import Backend, Capabilities, GemmTemplate, KernelLimits, TorchCudaDevices, dtypes_for

__all__ = ["CudaBackend", "cuda_arch", "arch_family", "arch_covered"]

#: compute capability major -> family name (NVIDIA's marketing families).
_FAMILIES = {
    (7, 0): "Volta", (7, 2): "Volta", (7, 5): "Turing",
    (8, 0): "Ampere", (8, 6): "Ampere", (8, 7): "Ampere", (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell", (10, 3): "Blackwell", (11, 0): "Blackwell", (12, 0): "Blackwell", (12, 1): "Blackwell",
    (10, 7): "Rubin",
}


def cuda_arch(major: int, minor: int) -> str:
    """``sm_<major><minor>`` from a compute capability: ``(9, 0)`` -> ``"sm_90"``, ``(10, 7)`` -> ``"sm_107"``."""
    return f"sm_{major}{minor}"


def arch_family(major: int, minor: int) -> str:
    """NVIDIA family name of a compute capability (``"Hopper"``), ``"unknown"`` if not listed."""
    return _FAMILIES.get((major, minor), "unknown")


_FLAG = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")


def _parse(flag: str) -> tuple[str, int, int] | None:
    """``"sm_90"`` -> ``("sm", 9, 0)``; ``"sm_90a"`` -> ``("exact", 9, 0)``; junk -> ``None``."""
    m = _FLAG.match(flag)
    if m is None:
        return None
    kind, num, suffix = m.groups()
    return ("exact" if suffix else kind), int(num[:-1]), int(num[-1])


def arch_covered(major: int, minor: int, arch_list: list[str]) -> tuple[bool, str]:
    """Whether a build compiled for ``arch_list`` has kernels for ``sm_<major><minor>``.

    SASS (``sm_XY``) runs on the same major with an equal or higher minor; PTX
    (``compute_XY``) is JIT-compiled for any equal or newer capability;
    arch-specific targets (``sm_90a``) run on that arch only.

    Returns:
        ``(covered, reason)``.
    """
    want = (major, minor)
    for flag in arch_list:
        parsed = _parse(flag)
        if parsed is None:
            continue
        kind, fmaj, fmin = parsed
        if kind == "exact" and (fmaj, fmin) == want:
            return True, f"build has {flag}"
        if kind == "sm" and fmaj == major and fmin <= minor:
            return True, f"build has SASS {flag}"
        if kind == "compute" and (fmaj, fmin) <= want:
            return True, f"build has PTX {flag} (JIT-compiled at first use)"
    return False, (
        f"{cuda_arch(major, minor)} is not in this torch build's arch list {arch_list} and no compatible PTX is "
        "present: install a torch build for this GPU (see https://pytorch.org/get-started/locally/)"
    )


def _cc_of(arch: str) -> tuple[int, int] | None:
    parsed = _parse(arch)
    return None if parsed is None else (parsed[1], parsed[2])


def _hopper_or_newer(arch: str) -> tuple[bool, str]:
    cc = _cc_of(arch)
    if cc is not None and cc >= (9, 0):
        return True, f"{arch} is sm_90 or newer"
    return False, "accel adds NVGEMM on sm_90 (Hopper) and newer only, where CUTLASS's Python GEMMs have kernels"


def _blackwell_class(arch: str) -> tuple[bool, str]:
    cc = _cc_of(arch)
    if cc is not None and (10, 0) <= cc < (11, 0):
        return True, f"{arch} is in sm_100..sm_109"
    return False, "torch's CuTeDSL GEMM templates serve sm_100..sm_109 only (torch._inductor.config comment)"


#: Shared memory one thread block may opt into, bytes, by compute capability: NVIDIA CUDA C Programming
#: Guide, "Technical Specifications per Compute Capability" ("Maximum amount of shared memory per thread
#: block": 163 KB on 8.0/8.7, 99 KB on 8.6/8.9/12.x, 227 KB on 9.0/10.x). Used where the device properties
#: lack ``shared_memory_per_block_optin``.
SHARED_MEMORY_OPTIN = {(8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024,
                       (9, 0): 227 * 1024, (10, 0): 227 * 1024, (10, 3): 227 * 1024, (11, 0): 227 * 1024,
                       (12, 0): 99 * 1024, (12, 1): 99 * 1024}

#: GEMM template families for Inductor's max-autotune on NVIDIA (vendor facts as data).
CUDA_GEMM_TEMPLATES = (
    GemmTemplate(
        token="NVGEMM",
        description="NVGEMM: CuTeDSL-generated CUTLASS GEMMs with epilogue fusion",
        config_key="nvgemm_max_profiling_configs",
        package="nvidia-cutlass-dsl",
        install="pip install nvidia-cutlass-dsl",
        available="nvgemm_available",
        arch_ok=_hopper_or_newer,
    ),
    GemmTemplate(
        token="CUTEDSL",
        description="CUTEDSL: CuTeDSL GEMM templates for Blackwell",
        config_key="cutedsl_enable_autotuning",
        package="nvidia-cutlass-dsl",
        install="pip install nvidia-cutlass-dsl",
        available="cutedsl_available",
        arch_ok=_blackwell_class,
    ),
)


class CudaBackend(TorchCudaDevices, Backend):
    """NVIDIA GPUs through a CUDA build of torch."""

    name = "cuda"
    vendor = "NVIDIA"
    torch_device_type = "cuda"
    dispatch_key = "CUDA"
    visible_devices_env = ("CUDA_VISIBLE_DEVICES",)
    distributed_backend = "nccl"
    newer_distributed_backends = ("nccl2",)  # only used where torch registers it
    priority = 100
    gemm_templates = CUDA_GEMM_TEMPLATES
    block_scale_swizzle = "SWIZZLE_32_4_4"  # cuBLAS 128x4 scale tiles
    power_to_watts = 1e-3  # NVML's nvmlDeviceGetPowerUsage reports milliwatts

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        if getattr(torch.version, "hip", None):
            return f"torch is a ROCm build (torch.version.hip={torch.version.hip!r}): AMD GPUs use the 'rocm' backend"
        if not getattr(torch.version, "cuda", None):
            return f"torch {torch.__version__} is not a CUDA build (torch.version.cuda is None)"
        return None

    def capability(self, index: int = 0, /) -> tuple[int, int]:
        """The compute capability ``(major, minor)``.

        .. note:: Initialises the CUDA runtime.
        """
        major, minor = torch.cuda.get_device_capability(index)
        return int(major), int(minor)

    def arch(self, index: int = 0, /) -> str:
        """``sm_XY`` of device ``index`` (``sm_90`` Hopper, ``sm_100`` Blackwell, ``sm_107`` Rubin).

        .. note:: Initialises the CUDA runtime.
        """
        return cuda_arch(*self.capability(index))

    @classmethod
    def device_arch(cls, device: torch.device, /) -> str:
        """``sm_XY`` of a concrete CUDA device, from ``torch.cuda.get_device_capability(device)``.

        .. note:: Initialises the CUDA runtime.
        """
        return cuda_arch(*torch.cuda.get_device_capability(device))

    @classmethod
    def device_kernel_limits(cls, device: torch.device, /) -> KernelLimits:
        """Warp size 32 (``warp_size`` of the device properties where torch has it), the opt-in shared
        memory per block (``shared_memory_per_block_optin``, else :data:`SHARED_MEMORY_OPTIN`), fp8 OCP
        from sm_89.

        .. note:: Initialises the CUDA runtime.
        """
        props = torch.cuda.get_device_properties(device)
        cc = (int(props.major), int(props.minor))
        smem = getattr(props, "shared_memory_per_block_optin", None)
        source = "torch.cuda.get_device_properties"
        if not smem:
            smem = SHARED_MEMORY_OPTIN.get(cc)
            source += "; shared memory: CUDA C Programming Guide, compute capability table"
        return KernelLimits(cuda_arch(*cc), "nvidia", int(getattr(props, "warp_size", 32) or 32), smem,
                            "ocp" if cc >= (8, 9) else None, source,
                            int(getattr(props, "L2_cache_size", 0) or 0) or None)

    def family(self, index: int = 0, /) -> str:
        """NVIDIA family name (``"Hopper"``)."""
        return arch_family(*self.capability(index))

    def arch_supported(self, index: int = 0, /) -> tuple[bool, str]:
        """Whether ``torch.cuda.get_arch_list()`` covers this GPU (SASS or compatible PTX)."""
        return arch_covered(*self.capability(index), list(torch.cuda.get_arch_list()))

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """Feature flags from the compute capability (fp8 from sm_89, MX/NVFP4 from sm_100)."""
        cc = self.capability(index)
        fp8 = "ocp" if cc >= (8, 9) else None
        blackwell_plus = cc >= (10, 0)
        return Capabilities(
            dtypes=dtypes_for(bf16=cc >= (8, 0), fp8=fp8),
            fp8=fp8,
            mxfp8=blackwell_plus,
            mxfp4=blackwell_plus,
            nvfp4=blackwell_plus,
            graph_capture=True,
            symmetric_memory=cc >= (9, 0),
            flex_attention=cc >= (8, 0),
            grouped_gemm=cc >= (9, 0),
            tunable_op=True,
            memory_telemetry=True,
        )
