"""RMSNorm forward and backward through the Helion kernels of :mod:`.helion_kernel`.

Importing this module imports no Helion. Where Helion is absent (or too old)
:func:`available` says why and :func:`accel.kernels.install` skips it; the
kernels need a weight (the cond sends ``weight=None`` to ATen).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from accel.kernels.dsl.helion_utils import MIN_VERSION, available
from accel.kernels.dsl.launch import device_guard, empty, empty_like, lazy_module, row_count, rows_view, shaped_like, vector

from . import FAMILY, reference
from .conditions import Limits, make_conds

__all__ = ["DSL", "LIMITS", "MIN_VERSION", "available", "backward", "conds", "forward", "fused_rms_norm",
           "fused_rms_norm_backward", "register"]

DSL = "helion"
#: Rows up to 16384 elements (a whole row per tile), weight required; Helion's
#: generated code indexes with int32, so fewer than 2**31 elements.
LIMITS = Limits(max_n_fwd=16384, max_n_bwd=16384, needs_weight=True, max_numel=(1 << 31) - 1)


_kernels = lazy_module(__package__ + ".helion_kernel")  # imports the DSL at the first launch
_helion = lazy_module("accel.kernels.dsl.helion_utils")


def fused_rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                   eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten::_fused_rms_norm`` in Helion (weight required); results as :func:`.reference.fused_rms_norm`."""
    k = _kernels()
    n = row_count(normalized_shape)
    x = rows_view(input, n)
    eps = torch.finfo(torch.float32).eps if eps is None else float(eps)
    y = empty_like(x)
    rstd = empty(x.shape[0], torch.float32, x.device)
    with device_guard(x.device):
        _helion().call(k.rms_norm_fwd, x, vector(weight, n), eps, y, rstd)
    return shaped_like(y, input), rstd.view(reference.stat_shape(input, normalized_shape))


def fused_rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                            rstd: torch.Tensor, weight: torch.Tensor | None,
                            output_mask: Sequence[bool]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``aten::_fused_rms_norm_backward`` in Helion (weight required); as the reference."""
    if not (output_mask[0] or output_mask[1]):
        return None, None
    k = _kernels()
    n = row_count(normalized_shape)
    x = rows_view(input, n)
    dx = empty_like(x)
    with device_guard(x.device):
        dw = _helion().call(k.rms_norm_bwd, rows_view(grad_out, n), x, vector(weight, n), rstd.view(-1, 1), dx)
    return (shaped_like(dx, input) if output_mask[0] else None,
            dw.view(weight.shape) if output_mask[1] else None)


def conds(backends: Sequence[str]) -> tuple:
    """The forward and backward conds for ``backends`` (:func:`.conditions.make_conds` with :data:`LIMITS`)."""
    return make_conds(DSL, backends, LIMITS)


forward, backward = fused_rms_norm, fused_rms_norm_backward
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
