"""Softmax forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton: the kernel module is imported at the
first call. Launch configs come from the tuning table (:mod:`accel.kernels.tuning.table`)
for the input's arch, dtype and shape bucket, else :func:`.triton_kernel.default_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from accel.kernels.ops.conds import Limits, tuned_config
from accel.kernels.dsl.launch import lazy_module
from accel.kernels.dsl.triton_utils import LaunchPlan, row_launch
from accel.kernels.dsl.triton_utils import available

from . import FAMILY
from ._wrappers import make_ops

__all__ = ["DSL", "LIMITS", "available", "softmax", "softmax_backward_data", "register", "launch_fwd", "launch_bwd"]

DSL = "triton"
#: Rows up to 65536 elements (looped above triton_kernel.MAX_BLOCK_N = 32768).
LIMITS = Limits(max_n_fwd=65536, max_n_bwd=65536)


_kernels = lazy_module(__package__ + ".triton_kernel")  # imports the DSL at the first launch


def _config(op: str, x: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    return tuned_config(op, DSL, x, m, n, _kernels().default_config)


def fwd_launch(cfg: Mapping[str, Any], m: int, n: int) -> LaunchPlan:
    """The forward's launch for ``m`` rows of ``n`` with config ``cfg`` (``looped``, ``block_n``, ``rows``,
    ``num_warps``, and optionally ``hints`` (L2 cache hints, default off) and ``num_stages``
    (Triton's software pipelining of the looped kernels' chunk loads)); call it with ``(x, y)``."""
    k = _kernels()
    return row_launch(k.softmax_fwd_looped, k.softmax_fwd_rows, cfg, m, n, looped_hints=True)


def bwd_launch(cfg: Mapping[str, Any], m: int, n: int) -> LaunchPlan:
    """The backward's launch (configs as :func:`fwd_launch`); call it with ``(dy, y, dx)``."""
    k = _kernels()
    return row_launch(k.softmax_bwd_looped, k.softmax_bwd_rows, cfg, m, n, looped_hints=True)


def launch_fwd(x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the forward on ``x`` (``[M, N]``, or any contiguous shape with ``m``, ``n`` given) into ``y``
    with launch config ``cfg`` (the tuner's entry point)."""
    if m is None:
        m, n = x.shape
    fwd_launch(cfg, m, n)(x, y)


def launch_bwd(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the backward on ``[M, N]`` tensors (or any contiguous shape with ``m``, ``n``) with config ``cfg``."""
    if m is None:
        m, n = y.shape
    bwd_launch(cfg, m, n)(dy, y, dx)


softmax, softmax_backward_data, conds = make_ops(DSL, LIMITS, launch_fwd, launch_bwd, _config,
                                                    plans=(fwd_launch, bwd_launch))

forward, backward = softmax, softmax_backward_data
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
