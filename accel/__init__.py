"""accel: one PyTorch script, every accelerator.

``import accel`` never imports Triton or Helion and never initialises a device.
"""

from __future__ import annotations

import os as _os

# Python started in a source checkout (the repository root on sys.path) finds this folder as
# ``accel`` while ``backends/`` and ``kernels/`` sit beside it instead of inside it, as the
# installed layout has them. Point the package at the checkout too, so ``accel.backends`` and
# ``accel.kernels`` resolve the same way in both.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "backends")) and _os.path.isfile(
        _os.path.join(_root, "backends", "__init__.py")):
    __path__.append(_root)
del _root

from accel import errors  # noqa: E402
from accel._probe import clear_cache, probes
from accel._select import backend, device, selection
from accel.backends import Backend, Capabilities, ProbeResult

# Public submodules: accel.random (portable RNG state), accel.graphs (portable graph capture),
# accel.memory and accel.runtime (device runtime, resolved once per backend; see accel.runtime).
# accel.kernels: DSL kernels as ATen overrides (imports no DSL runtime).
from accel import _resolve, graphs, kernels, memory, random, runtime
from accel.runtime import Event, Stream, device_index, elapsed_time, stream

# Vendor features behind one vocabulary. accel.compile is the function; the module stays
# importable as ``from accel.compile import ...``.
from accel import distributed, quant, tunable
from accel.compile import compile, compile_plan, flex_attention_kernel_options

__getattr__ = _resolve.lazy_exports(globals(), runtime.RESOLVED, lambda: {n: getattr(runtime, n) for n in runtime.RESOLVED})

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Capabilities",
    "ProbeResult",
    "Event",
    "Stream",
    "current_device_index",
    "current_stream",
    "device_count",
    "device_index",
    "elapsed_time",
    "memory",
    "runtime",
    "set_device_index",
    "set_stream",
    "stream",
    "synchronize",
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
    "graphs",
    "kernels",
    "probes",
    "random",
    "selection",
]
