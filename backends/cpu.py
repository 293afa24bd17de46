"""CPU backend: always available; the fallback of every selection."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import torch

from ._base import Backend, Capabilities, always_false, dtypes_for, no_op, one_device_runtime

#: The CPU's one stream (torch has no other for the CPU).
_CPU_STREAM = torch.Stream("cpu")


def _cpu_stream(index: int = 0) -> torch.Stream:
    return _CPU_STREAM

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
    has_events = False  # torch: "cpu backend doesn't support events"
    host_stream = True
    no_graphs_reason = "CPU has no graph capture: CPU operators run eagerly on the host"
    rng_is_host = True

    @classmethod
    def runtime_functions(cls, count: int) -> dict[str, Callable[..., Any]]:
        """One device, never initialised; synchronising and stream switching do nothing."""
        return {
            **one_device_runtime(1),
            "is_initialized": always_false,
            "sync": no_op,
            "sync_device": no_op,
            "get_stream": _cpu_stream,
            "set_stream": no_op,
        }

    @classmethod
    def memory_counters(cls) -> tuple[dict[str, Any], Callable[[], tuple[int, int]], dict[str, str]]:
        """Not tracked: no counters, ``(0, 0)`` memory info, no statistics."""
        return {}, lambda: (0, 0), {}

    @classmethod
    def default_generator(cls, index: int | None = None, /) -> torch.Generator:
        """``torch.default_generator``: the CPU has one."""
        return torch.default_generator

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
