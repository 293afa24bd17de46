"""Apple MPS backend (Metal Performance Shaders). One device; no float64; no graphs."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from ._base import Backend, Capabilities, always_true, dtypes_for, one_device_runtime

__all__ = ["MpsBackend", "apple_family"]


def apple_family(brand: str) -> str:
    """``"Apple M3 Max"`` -> ``"apple-m3"``; anything else -> ``"apple"``."""
    words = brand.lower().split()
    for w in words:
        if len(w) >= 2 and w[0] == "m" and w[1:].isdigit():
            return f"apple-{w}"
    return "apple"


#: Where each runtime / memory operation of ``torch.mps`` lives, fastest first: one device, no lazy
#: initialisation, Metal's own memory counters.
MPS_SOURCES: dict[str, tuple[str, ...]] = {
    "synchronize": ("torch._C._mps_deviceSynchronize", "torch.mps.synchronize"),
    "current_stream": ("torch._C._accelerator_getStream", "torch.accelerator.current_stream"),
    "set_stream": ("torch._C._accelerator_setStream", "torch.accelerator.set_stream"),
    "current_allocated_memory": ("torch._C._mps_currentAllocatedMemory", "torch.mps.current_allocated_memory"),
    "driver_allocated_memory": ("torch._C._mps_driverAllocatedMemory", "torch.mps.driver_allocated_memory"),
    "recommended_max_memory": ("torch._C._mps_recommendedMaxMemory", "torch.mps.recommended_max_memory"),
    "empty_cache": ("torch.mps.empty_cache",),
}


class MpsBackend(Backend):
    """Apple silicon GPUs through torch's MPS backend."""

    name = "mps"
    vendor = "Apple"
    torch_device_type = "mps"
    dispatch_key = "MPS"
    visible_devices_env = ()
    distributed_backend = "gloo"
    priority = 60
    runtime_sources = MPS_SOURCES
    no_graphs_reason = ("MPS has no graph capture in PyTorch (no MPS graph class, and torch.accelerator.Graph "
                        "has no MPS implementation)")

    @classmethod
    def runtime_functions(cls, count: int) -> dict[str, Callable[..., Any]]:
        """One device (the probe's answer, faked vendors included), no lazy initialisation."""
        from accel import _compat

        acc = torch.accelerator
        sync = _compat.resolve("mps", "synchronize") or acc.synchronize
        return {
            **one_device_runtime(count),
            "is_initialized": always_true,
            "sync": sync,
            "sync_device": lambda index: sync(),
            "get_stream": _compat.resolve("mps", "current_stream") or acc.current_stream,
            "set_stream": _compat.resolve("mps", "set_stream") or acc.set_stream,
        }

    @classmethod
    def memory_counters(cls) -> tuple[dict[str, Any], Callable[[], tuple[int, int]], dict[str, str]]:
        """Metal's counters: allocated is ``current_allocated_memory``, reserved ``driver_allocated_memory``,
        ``(free, total)`` is Metal's recommended working-set size minus what the driver holds, and that size."""
        from accel import _compat

        driver = _compat.resolve("mps", "driver_allocated_memory")
        recommended = _compat.resolve("mps", "recommended_max_memory")

        def memory_info() -> tuple[int, int]:
            total = int(recommended())
            return max(total - int(driver()), 0), total

        read = {"allocated": _compat.resolve("mps", "current_allocated_memory"), "reserved": driver,
                "empty_cache": _compat.resolve("mps", "empty_cache")}
        return read, memory_info, {"allocated_bytes.all.current": "allocated", "reserved_bytes.all.current": "reserved"}

    @classmethod
    def default_generator(cls, index: int | None = None, /) -> torch.Generator:
        """The single MPS generator (``torch.mps`` has no public getter).

        Raises:
            AttributeError: the running torch's ``torch.mps`` has no default-generator getter.
        """
        from accel import _compat

        return _compat.single_default_generator(cls.device_module(), "mps")

    @staticmethod
    def rng_current_index(module: Any) -> int:
        """0: ``torch.mps`` has one device and no ``current_device``."""
        return 0

    @staticmethod
    def rng_states(module: Any, devices: list[Any]) -> list[torch.Tensor]:
        """``torch.mps`` has no ``get_rng_state_all``: one state per device argument."""
        return [module.get_rng_state(d) for d in devices]

    @staticmethod
    def rng_initial_seed(module: Any) -> int | None:
        """``None``: ``torch.mps`` has no ``initial_seed`` (the default generator's answers)."""
        return None

    @staticmethod
    def rng_manual_seed_all(module: Any, seed: int) -> None:
        """``torch.mps.manual_seed`` (one device; no ``manual_seed_all``)."""
        module.manual_seed(seed)

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
