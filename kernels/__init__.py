"""accel.kernels: DSL kernels (Triton, Helion, ...) installed as ATen op overrides.

A user's unchanged model calls ``F.rms_norm``; where accel has a faster kernel for
that vendor, dtype and shape, ATen's kernel is replaced at the backend dispatch key
by it; everywhere else ATen runs as before.

- :func:`register` / :func:`unregister`: install any impl for any ATen op.
- :func:`enable` / :func:`disable` / :func:`disabled`: by op, DSL, backend or name.
- :func:`overrides`: what is installed, with routed / fallback counters.
- :func:`explain`: which kernel would run for given inputs, and why.
- :func:`install`: register accel's built-in kernels (RMSNorm, softmax and
  LayerNorm, forward and backward, in Triton and Helion; softmax and the LayerNorm
  backward in CuTeDSL) where their DSL and
  hardware are present; which one runs per shape comes from the tuning table
  (:mod:`accel.kernels.tuning.table`: shipped per-arch defaults + ``accel bench --tune``);
  :func:`availability` says which are usable here and why not.

Importing this package imports no DSL runtime and initialises no device.

Under ``torch.compile`` the compiled graph does not call these overrides:
Inductor generates its own code for the op (tested). Eager code around compiled
regions, and every eager model, is routed.
"""

from __future__ import annotations

from .catalog import Availability, availability, families, install, tuning_state
from .core.explain import Explanation, explain
from .core.override import OverrideInfo, set_verify
from .core.registry import (
    disable,
    disabled,
    enable,
    overrides,
    register,
    registry_mode,
    registry_path,
    reset_counters,
    unregister,
    use_registry,
)
from .ops import sharding as _sharding

families()  # declares every built-in family's tuning-table ops and backward pairs (imports no DSL)
_sharding.install()  # DTensor rules of accel's custom ops, registered once torch.distributed.tensor is imported

__all__ = [
    "Availability",
    "Explanation",
    "OverrideInfo",
    "availability",
    "disable",
    "disabled",
    "enable",
    "explain",
    "families",
    "install",
    "overrides",
    "register",
    "registry_mode",
    "registry_path",
    "reset_counters",
    "tuning_state",
    "set_verify",
    "unregister",
    "use_registry",
]
