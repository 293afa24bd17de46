"""accel: one PyTorch script, every accelerator.

``import accel`` never imports Triton or Helion and never initialises a device.
"""

from __future__ import annotations

from accel import errors
from accel._probe import clear_cache, probes
from accel._select import backend, device, selection
from accel.backends import Backend, Capabilities, ProbeResult

# issue 8: vendor features behind one vocabulary (accel.compile is the function;
# the module stays importable as ``from accel.compile import ...``)
from accel import distributed, quant, tunable  # noqa: E402
from accel.compile import compile, compile_plan, flex_attention_kernel_options  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Capabilities",
    "ProbeResult",
    "backend",
    "clear_cache",
    "compile",
    "compile_plan",
    "distributed",
    "flex_attention_kernel_options",
    "quant",
    "tunable",
    "device",
    "errors",
    "probes",
    "selection",
]
