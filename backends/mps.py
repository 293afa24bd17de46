"""Apple MPS backend (Metal Performance Shaders). One device; no float64; no graphs."""

from __future__ import annotations

import platform
import subprocess

import torch

from ._base import Backend, Capabilities, dtypes_for

__all__ = ["MpsBackend", "apple_family"]


def apple_family(brand: str) -> str:
    """``"Apple M3 Max"`` -> ``"apple-m3"``; anything else -> ``"apple"``."""
    words = brand.lower().split()
    for w in words:
        if len(w) >= 2 and w[0] == "m" and w[1:].isdigit():
            return f"apple-{w}"
    return "apple"


class MpsBackend(Backend):
    """Apple silicon GPUs through torch's MPS backend."""

    name = "mps"
    vendor = "Apple"
    torch_device_type = "mps"
    dispatch_key = "MPS"
    visible_devices_env = ()
    distributed_backend = "gloo"
    priority = 60

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        if not torch.backends.mps.is_built():
            return f"torch {torch.__version__} is not built with MPS (only macOS arm64 wheels are)"
        if not torch.backends.mps.is_available():
            return "MPS is built but not available (needs macOS 12.3+ on Apple silicon)"
        return None

    @classmethod
    def _device_count(cls) -> int:
        return 1

    def device_name(self, index: int = 0, /) -> str:
        """The chip's brand string (``sysctl machdep.cpu.brand_string``), e.g. ``"Apple M3 Max"``."""
        if platform.system() == "Darwin":
            try:
                out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                     timeout=5, check=False)
                if out.stdout.strip():
                    return out.stdout.strip()
            except OSError:
                pass  # sysctl missing: fall through to the generic name
        return "Apple silicon"

    def arch(self, index: int = 0, /) -> str:
        """``apple-m1`` .. ``apple-m4``, or ``apple``."""
        return apple_family(self.device_name(index))

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """MPS: bf16 (macOS 14+), no float64, no fp8, no graph capture."""
        return Capabilities(dtypes=dtypes_for(float64=False), float64=False, memory_telemetry=True)
