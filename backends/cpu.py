"""CPU backend: always available; the fallback of every selection."""

from __future__ import annotations

import os
import platform

from ._base import Backend, Capabilities, dtypes_for

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """The host CPU."""

    name = "cpu"
    vendor = "CPU"
    torch_device_type = "cpu"
    dispatch_key = "CPU"
    visible_devices_env = ()
    distributed_backend = "gloo"
    priority = 0

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        return None

    @classmethod
    def _device_count(cls) -> int:
        return 1

    @classmethod
    def _available_reason(cls, count: int) -> str:
        return f"always available ({os.cpu_count()} logical cores)"

    def device_name(self, index: int = 0, /) -> str:
        """``platform.processor()`` or the machine type."""
        return platform.processor() or platform.machine()

    def arch(self, index: int = 0, /) -> str:
        """The machine type (``x86_64``, ``aarch64``, ``arm64``)."""
        return platform.machine()

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """CPU: every dtype in software, no graph capture, memory not tracked; ``flex_attention``
        compiles (Inductor's CPU template; ``torch.compile(flex_attention)`` ran on torch 2.13 here,
        found by the new-user trial)."""
        return Capabilities(dtypes=dtypes_for(), flex_attention=True)
