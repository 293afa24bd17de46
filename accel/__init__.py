"""accel: one PyTorch script, every accelerator.

``import accel`` never imports Triton or Helion and never initialises a device.
"""

from __future__ import annotations

import importlib.util as _ilu
import os as _os
import sys as _sys


def _map_checkout_subpackages() -> None:
    """Python started in a source checkout finds this folder as ``accel`` while ``backends/`` and
    ``kernels/`` sit beside it instead of inside it, as the installed layout has them. Load those two
    under their installed names (``accel.backends``, ``accel.kernels``) so both layouts import alike."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    root = _os.path.dirname(here)
    for name in ("backends", "kernels"):
        init = _os.path.join(root, name, "__init__.py")
        if _os.path.isdir(_os.path.join(here, name)) or not _os.path.isfile(init) or f"accel.{name}" in _sys.modules:
            continue
        spec = _ilu.spec_from_file_location(f"accel.{name}", init,
                                            submodule_search_locations=[_os.path.dirname(init)])
        if spec is None or spec.loader is None:  # pragma: no cover - a file that exists always has a spec
            continue
        _sys.modules[spec.name] = globals()[name] = module = _ilu.module_from_spec(spec)
        spec.loader.exec_module(module)


_map_checkout_subpackages()
del _map_checkout_subpackages

from accel import errors  # noqa: E402
from accel._probe import clear_cache, probes
from accel._select import backend, device, selection
from accel.backends import Backend, Capabilities, ProbeResult

# Public submodules: accel.random (portable RNG state), accel.graphs (portable graph capture),
# accel.memory and accel.runtime (device runtime, resolved once per backend; see accel.runtime).
# accel.kernels: DSL kernels as ATen overrides (imports no DSL runtime).
from accel import graphs, kernels, memory, random, runtime
from accel.runtime import (Event, Stream, current_device_index, current_stream, device_count, device_index,
                           elapsed_time, set_device_index, set_stream, stream, synchronize)

# Vendor features behind one vocabulary. accel.compile is the function; the module stays
# importable as ``from accel.compile import ...``.
from accel import distributed, quant, tunable
from accel.compile import compile, compile_plan, flex_attention_kernel_options, loss_pass_report

from accel._version import __version__  # noqa: E402

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
    "loss_pass_report",
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
