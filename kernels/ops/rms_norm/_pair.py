"""Registering a DSL's RMSNorm forward and backward together (a CPU forward override needs the backward too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from accel.kernels._pair import register_pair as _register

from . import BWD_OP, FWD_OP, reference
from .conditions import Limits, make_conds

__all__ = ["register_pair"]


def register_pair(dsl: str, fwd: Callable, bwd: Callable, limits: Limits, backends: Sequence[str],
                  suffix: str = "") -> list[str]:
    """Register ``fwd``/``bwd`` for ``aten::_fused_rms_norm`` and its backward; both or neither.

    Names are ``rms_norm_fwd.<dsl><suffix>`` and ``rms_norm_bwd.<dsl><suffix>``;
    the reference is the fallback where ATen has no kernel (the backward on CPU).

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    return _register("rms_norm", dsl, (FWD_OP, BWD_OP), (fwd, bwd), make_conds(dsl, backends, limits), backends,
                     suffix, (reference.fused_rms_norm, reference.fused_rms_norm_backward))
