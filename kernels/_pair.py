"""Registering a DSL's forward and backward of one op family together: both or neither."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["register_pair"]


def register_pair(family: str, dsl: str, ops: tuple[str, str], impls: tuple[Callable, Callable],
                  conds: tuple[Callable, Callable], backends, suffix: str = "",
                  fallbacks: tuple[Callable | None, Callable | None] = (None, None)) -> list[str]:
    """Register ``impls`` for the forward and backward ATen ``ops`` (the backward first); both or neither.

    Names are ``<family>_fwd.<dsl><suffix>`` and ``<family>_bwd.<dsl><suffix>``.

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    from accel.kernels import register, unregister

    # the backward first: a forward kernel where ATen's forward is only a composite needs it in place
    # (accel.kernels.register warns otherwise, KernelRegistrationWarning: training would fail)
    second = register(ops[1], impl=impls[1], cond=conds[1], backends=backends, dsl=dsl,
                      name=f"{family}_bwd.{dsl}{suffix}", fallback=fallbacks[1])
    try:
        first = register(ops[0], impl=impls[0], cond=conds[0], backends=backends, dsl=dsl,
                         name=f"{family}_fwd.{dsl}{suffix}", fallback=fallbacks[0])
    except BaseException:
        unregister(second)
        raise
    return [first, second]
