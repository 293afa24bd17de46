"""LayerNorm forward and backward through the Helion kernels of :mod:`.helion_kernel`.

Importing this module imports no Helion. Needs weight and bias (the cond sends
other calls to ATen). Configs: the tuning table's, else the kernel module's
fixed defaults; never autotuned here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accel.kernels.ops.conds import Limits, tuned_config
from accel.kernels.dsl.launch import device_guard, empty, empty_like, lazy_module, row_count, rows_view, shaped_like, vector
from accel.kernels.dsl.helion_utils import available

from . import FAMILY, reference
from .conditions import make_conds

_kernels = lazy_module(__package__ + ".helion_kernel")  # imports Helion at the first launch
_helion = lazy_module("accel.kernels.dsl.helion_utils")

__all__ = ["DSL", "LIMITS", "available", "native_layer_norm", "native_layer_norm_backward", "register",
           "launch_fwd", "launch_bwd"]

DSL = "helion"
#: Whole rows up to 16384 elements; weight and bias required; int32 indexing.
LIMITS = Limits(max_n_fwd=16384, max_n_bwd=16384, needs_weight=True, max_numel=(1 << 31) - 1)


def _cfg(op: str, x: torch.Tensor, m: int, n: int, default: Mapping[str, Any]) -> Mapping[str, Any]:
    return tuned_config(op, DSL, x, m, n, default)


def launch_fwd(x, w, b, y, mean, rstd, eps: float, cfg: Mapping[str, Any]) -> None:
    """Run the forward on ``x [M, N]`` with the Helion config ``cfg``."""
    h = _helion()
    with device_guard(x.device):
        h.call(h.bind(_kernels().layer_norm_fwd, cfg), x, w, b, eps, y, mean, rstd)


def launch_bwd(dy, x, w, mean, rstd, dx, cfg: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the backward; returns fp32 ``(dw [N], db [N])``."""
    h = _helion()
    with device_guard(x.device):
        return h.call(h.bind(_kernels().layer_norm_bwd, cfg, h.ignore_wrapper_tensor_ops()), dy, x, w, mean, rstd, dx)


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``aten::native_layer_norm`` in Helion (weight and bias required); results as the reference."""
    n = row_count(normalized_shape)
    x = rows_view(input, n)
    m = x.shape[0]
    y = empty_like(x)
    sdt = reference.stat_dtype(input, weight, bias)
    mean, rstd = empty(m, sdt, x.device), empty(m, sdt, x.device)
    launch_fwd(x, vector(weight, n), vector(bias, n), y, mean, rstd, float(eps),
               _cfg("layer_norm_fwd", x, m, n, _kernels().DEFAULT_FWD))
    shape = reference.stat_shape(input, normalized_shape)
    return shaped_like(y, input), mean.view(shape), rstd.view(shape)


def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    """``aten::native_layer_norm_backward`` in Helion (weight and bias required)."""
    if not any(output_mask):
        return None, None, None
    n = row_count(normalized_shape)
    x = rows_view(input, n)
    m = x.shape[0]
    dx = empty_like(x)
    dw, db = launch_bwd(rows_view(grad_out, n), x, vector(weight, n), mean.view(-1), rstd.view(-1), dx,
                        _cfg("layer_norm_bwd", x, m, n, _kernels().DEFAULT_BWD))
    return (shaped_like(dx, input) if output_mask[0] else None,
            dw.to(weight.dtype).view(weight.shape) if output_mask[1] else None,
            db.to(bias.dtype).view(bias.shape) if output_mask[2] else None)


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds` with :data:`LIMITS`)."""
    return make_conds(DSL, backends, LIMITS)


forward, backward = native_layer_norm, native_layer_norm_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
