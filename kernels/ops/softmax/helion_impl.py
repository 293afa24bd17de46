"""Softmax forward and backward through the Helion kernels of :mod:`.helion_kernel`.

Importing this module imports no Helion. Configs: the tuning table's for the
input's arch, dtype and bucket, else :data:`.helion_kernel.DEFAULT`; never autotuned here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from accel.kernels.ops.conds import Limits, tuned_config
from accel.kernels.dsl.launch import device_guard, lazy_module
from accel.kernels.dsl.helion_utils import available

from . import FAMILY
from ._wrappers import make_ops

_kernels = lazy_module(__package__ + ".helion_kernel")  # imports Helion at the first launch
_helion = lazy_module("accel.kernels.dsl.helion_utils")

__all__ = ["DSL", "LIMITS", "available", "softmax", "softmax_backward_data", "register", "launch_fwd", "launch_bwd"]

DSL = "helion"
#: Whole rows per tile up to 16384 elements; int32 indexing in Helion's generated code.
LIMITS = Limits(max_n_fwd=16384, max_n_bwd=16384, max_numel=(1 << 31) - 1)


def _config(op: str, x: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    return tuned_config(op, DSL, x, m, n, _kernels().DEFAULT)


def launch_fwd(x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the forward on ``x`` (``[M, N]``, or contiguous with ``m``, ``n`` given) into ``y`` with Helion config ``cfg``."""
    h = _helion()
    if m is not None:
        x, y = x.view(m, n), y.view(m, n)
    with device_guard(x.device):
        h.call(h.bind(_kernels().softmax_fwd, cfg), x, y)


def launch_bwd(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the backward on ``[M, N]`` tensors (or contiguous ones with ``m``, ``n``) with Helion config ``cfg``."""
    h = _helion()
    if m is not None:
        dy, y, dx = dy.view(m, n), y.view(m, n), dx.view(m, n)
    with device_guard(y.device):
        h.call(h.bind(_kernels().softmax_bwd, cfg), dy, y, dx)


softmax, softmax_backward_data, conds = make_ops(DSL, LIMITS, launch_fwd, launch_bwd, _config)

forward, backward = softmax, softmax_backward_data
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
