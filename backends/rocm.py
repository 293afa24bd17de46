"""AMD ROCm backend: arch from ``gcnArchName``, never from the capability tuple.

ROCm builds of torch report device type ``cuda`` and a capability tuple such as
``(9, 4)`` for gfx942; accel reads the vendor from ``torch.version.hip`` and the arch
from ``gcnArchName`` so an AMD GPU is never mistaken for an NVIDIA arch.

Sources: AMD ROCm docs, "Precision support" (fp8 ``fnuz`` on gfx942 MI300; OCP fp8
on gfx950 MI350 and gfx12 RDNA4; MXFP8/MXFP4 on gfx950) and the LLVM AMDGPU
processor table for the families.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from ._base import Backend, Capabilities, CompilePlan, GemmTemplate, KernelLimits, TorchCudaDevices, dtypes_for

__all__ = ["RocmBackend", "gfx_arch", "gfx_family", "lds_bytes", "wave_size"]


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


def wave_size(arch: str) -> int:
    """Threads per wavefront as Triton compiles for ``arch``: 64 on GCN/CDNA (gfx9xx: gfx90a, gfx942,
    gfx950), 32 on RDNA (gfx10xx, gfx11xx, gfx12xx).

    Sources: AMD "CDNA3 Instruction Set Architecture" (wave64) and "RDNA3 Instruction Set
    Architecture" (wave32 native); Triton's HIP backend (``third_party/amd/backend``) targets
    ``GPUTarget("hip", "gfx942", 64)`` and ``("gfx1100", 32)``, as accel's AOT compile of its kernels
    reports (``.wavefront_size`` in ``.asm["amdgcn"]``; ``benchmarks/results/aot/``).
    """
    return 32 if arch.startswith(("gfx10", "gfx11", "gfx12")) else 64


def lds_bytes(arch: str) -> int:
    """LDS (shared memory) one work-group may use, bytes: 160 KiB on gfx950 (CDNA4), 64 KiB elsewhere.

    Sources: AMD "AMD Instinct MI300 / CDNA3 ISA" (64 KiB LDS per CU), "AMD CDNA4 ISA" (160 KiB LDS on
    MI350/MI355X), "RDNA3 ISA" (64 KiB per work-group). Used where the device properties lack
    ``shared_memory_per_block``.
    """
    return 160 * 1024 if arch == "gfx950" else 64 * 1024


def _fp8_flavour(arch: str) -> str | None:
    if arch in ("gfx940", "gfx941", "gfx942"):
        return "fnuz"
    if arch == "gfx950" or arch.startswith("gfx120"):
        return "ocp"
    return None


def _ck_arch_ok(arch: str) -> tuple[bool, str]:
    from accel import _compat

    supported = list(_compat.inductor_config_get("rocm.ck_supported_arch", []))
    if arch in supported:
        return True, f"{arch} is in torch._inductor.config.rocm.ck_supported_arch"
    return False, f"torch._inductor.config.rocm.ck_supported_arch lists {supported}"


#: GEMM template families for Inductor's max-autotune on AMD (vendor facts as data).
ROCM_GEMM_TEMPLATES = (
    GemmTemplate(
        token="CK",
        description="CK: Composable Kernel GEMM templates",
        config_key="rocm.ck_supported_arch",
        package="Composable Kernel for Inductor (import name ck4inductor)",
        install="pip install git+https://github.com/rocm/composable_kernel@develop",
        available="ck_available",
        arch_ok=_ck_arch_ok,
    ),
)

#: Modules that hold Inductor's import-time ``origami`` handle (torch 2.14, torch 2.13).
_ORIGAMI_HOLDERS = ("torch._inductor.heuristics.template.triton", "torch._inductor.template_heuristics.triton")

#: RDNA3 (gfx11xx) FlexAttention forward blocks by sequence length: (upper bound, options).
#: Source: torch 2.14 ``ROCmConfigHeuristic`` (``rdna3_*_seq_flex_config``), profiled by
#: AMD on gfx1151 with head_dim 256 for bf16/fp16; accel supplies them on older torch.
RDNA3_FLEX_TIERS: tuple[tuple[float, dict[str, int]], ...] = (
    (128, {"BLOCK_M": 16, "BLOCK_N": 16, "num_stages": 1, "num_warps": 4, "waves_per_eu": 2}),
    (512, {"BLOCK_M": 32, "BLOCK_N": 16, "num_stages": 1, "num_warps": 4, "waves_per_eu": 2,
           "matrix_instr_nonkdim": 16}),
    (float("inf"), {"BLOCK_M": 64, "BLOCK_N": 16, "num_stages": 1, "num_warps": 4, "waves_per_eu": 2}),
)


class RocmBackend(TorchCudaDevices, Backend):
    """AMD GPUs through a ROCm (HIP) build of torch."""

    name = "rocm"
    vendor = "AMD"
    torch_device_type = "cuda"
    dispatch_key = "CUDA"
    visible_devices_env = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    distributed_backend = "nccl"  # RCCL answers to the name "nccl" in c10d
    priority = 100
    gemm_templates = ROCM_GEMM_TEMPLATES
    block_scale_swizzle = "NO_SWIZZLE"  # hipBLASLt takes plain row-major scales (not verified on gfx950 here)
    power_to_watts = 1.0  # amdsmi's average_socket_power reports watts

    def _vendor_plan(self, plan: CompilePlan, *, mode_opts: dict[str, Any], options: dict[str, Any],
                     autotune: bool, index: int) -> None:
        """Origami tile selection: reported, never set (Inductor reads it once, when it loads)."""
        from accel import _compat

        key = "rocm.origami"
        if not _compat.inductor_config_has(key):
            plan.skip(key, True, "the running torch has no Origami tile selection (no Inductor config key 'rocm.origami')")
            return
        if not autotune:
            plan.skip(key, True, "Origami only preselects GEMM tiles while autotuning (use mode='max-autotune')")
            return
        if not _compat.origami_available():
            plan.skip(key, True, "Origami needs the package rocm-origami: pip install rocm-origami")
            return
        loaded = [sys.modules[m] for m in _ORIGAMI_HOLDERS if m in sys.modules]
        if any(getattr(m, "origami", None) is not None for m in loaded):
            plan.skip(key, True, "Origami is already active in this process (enabled when Inductor loaded)")
            return
        plan.skip(key, True, "Inductor reads rocm.origami once, when it loads, and ignores it in compile options: "
                             "start the process with TORCHINDUCTOR_MAX_AUTOTUNE=1 TORCHINDUCTOR_ORIGAMI=1 to use it")

    def flex_attention_kernel_options(self, seq_len: int, *, head_dim: int, dtype: torch.dtype,
                                      index: int = 0) -> dict[str, int]:
        """FlexAttention forward block sizes for RDNA3 (gfx11xx) by sequence length; ``{}`` elsewhere.

        Only in the domain AMD profiled (bf16/fp16, ``head_dim`` 256), and only where
        the running torch does not already pick these tiers itself.
        """
        from accel import _compat

        if (gfx_family(self.arch(index)) != "RDNA3" or head_dim != 256
                or dtype not in (torch.bfloat16, torch.float16) or _compat.has_rdna3_flex_heuristics()):
            return {}
        return next(dict(opts) for bound, opts in RDNA3_FLEX_TIERS if seq_len < bound)

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

    @classmethod
    def device_arch(cls, device: torch.device, /) -> str:
        """``gfxNNN`` of a concrete ROCm device, from ``get_device_properties(device).gcnArchName``.

        .. note:: Initialises the HIP runtime.
        """
        return gfx_arch(str(torch.cuda.get_device_properties(device).gcnArchName))

    @classmethod
    def device_kernel_limits(cls, device: torch.device, /) -> KernelLimits:
        """Wave size by family (:func:`wave_size`: 64 on CDNA, 32 on RDNA; the device properties'
        ``warp_size`` where torch has it), LDS per work-group (``shared_memory_per_block``, else
        :func:`lds_bytes`), fp8 flavour (fnuz on gfx942, OCP on gfx950 / gfx12).

        .. note:: Initialises the HIP runtime.
        """
        props = torch.cuda.get_device_properties(device)
        arch = gfx_arch(str(props.gcnArchName))
        family = "rdna" if gfx_family(arch).startswith("RDNA") or wave_size(arch) == 32 else "cdna"
        wave = int(getattr(props, "warp_size", 0) or wave_size(arch))
        lds = getattr(props, "shared_memory_per_block", None)
        source = "torch.cuda.get_device_properties"
        if not lds:
            lds = lds_bytes(arch)
            source += "; wave size and LDS: AMD ISA documents (accel.backends.rocm.wave_size, lds_bytes)"
        return KernelLimits(arch, family, wave, int(lds), _fp8_flavour(arch), source,
                            int(getattr(props, "L2_cache_size", 0) or 0) or None)

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
