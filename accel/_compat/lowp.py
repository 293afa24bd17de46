"""Low-precision dtypes and scaled GEMMs of the running torch."""

from __future__ import annotations

import torch

__all__ = ["has_dtype", "has_scaled_mm", "has_scaled_mm_v2"]


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
