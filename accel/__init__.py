"""accel: one PyTorch script, every accelerator.

``import accel`` never imports Triton or Helion and never initialises a device.
"""

from __future__ import annotations

from accel import errors
from accel._probe import clear_cache, probes
from accel._select import backend, device, selection
from accel.backends import Backend, Capabilities, ProbeResult

from accel import kernels  # noqa: E402  (issue 5: DSL kernel overrides; imports no DSL runtime)

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Capabilities",
    "ProbeResult",
    "backend",
    "clear_cache",
    "device",
    "errors",
    "kernels",
    "probes",
    "selection",
]
