"""The one place that knows which running torch has which function.

Feature detection with ``hasattr`` on the running torch, never version-string
comparisons. Everything else in accel asks this module. Answers are computed
once, at first use, and never import a DSL runtime or initialise a device.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

__all__ = [
    "accelerator_has",
    "has_accelerator_graph",
    "has_accelerator_random",
    "has_native_dsl_registry",
    "has_xpu_graph",
    "module_version",
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
]


def accelerator_has(name: str) -> bool:
    """Whether ``torch.accelerator.<name>`` exists in the running torch."""
    return hasattr(getattr(torch, "accelerator", None), name)


@functools.cache
def has_accelerator_random() -> bool:
    """``torch.accelerator.random`` (torch 2.14+)."""
    return accelerator_has("random")


@functools.cache
def has_accelerator_graph() -> bool:
    """``torch.accelerator.Graph`` (torch 2.12+)."""
    return accelerator_has("Graph")


@functools.cache
def has_xpu_graph() -> bool:
    """An XPU graph class (``torch.xpu.XPUGraph``) in the running torch."""
    return hasattr(getattr(torch, "xpu", None), "XPUGraph")


@functools.cache
def has_native_dsl_registry() -> bool:
    """``torch._native`` (the native DSL operator registry, torch 2.13+). Not imported here."""
    return importlib.util.find_spec("torch._native") is not None


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
    return inductor_config_get(key, _MISSING) is not _MISSING


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
