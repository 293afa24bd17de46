"""Registering a DSL's forward and backward together (a CPU forward override needs the backward too)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    from accel.kernels import register, unregister

    fwd_cond, bwd_cond = make_conds(dsl, backends, limits)
    first = register(FWD_OP, impl=fwd, cond=fwd_cond, backends=backends, dsl=dsl,
                     name=f"rms_norm_fwd.{dsl}{suffix}", fallback=reference.fused_rms_norm)
    try:
        second = register(BWD_OP, impl=bwd, cond=bwd_cond, backends=backends, dsl=dsl,
                          name=f"rms_norm_bwd.{dsl}{suffix}", fallback=reference.fused_rms_norm_backward)
    except BaseException:
        unregister(first)
        raise
    return [first, second]
