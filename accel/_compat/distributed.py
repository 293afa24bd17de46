"""c10d backends, symmetric memory and DTensor of the running torch (``torch.distributed`` imported at first call)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .inductor import find_spec

__all__ = ["c10d_backends", "dtensor_class", "has_symmetric_memory", "register_dtensor_sharding"]


def c10d_backends() -> tuple[str, ...]:
    """c10d backend names the running torch registers (``torch.distributed.Backend.backend_list``).

    Empty when torch was built without distributed support.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return ()
    return tuple(str(b) for b in dist.Backend.backend_list)


def has_symmetric_memory() -> bool:
    """Whether the running torch ships ``torch.distributed._symmetric_memory``. Not imported."""
    return find_spec("torch.distributed._symmetric_memory")


@functools.cache
def dtensor_class() -> type | None:
    """``torch.distributed.tensor.DTensor``, or ``None`` where torch was built without distributed support or
    without its tensor module.

    .. note:: Imports ``torch.distributed.tensor`` at the first call (never at ``import accel``).
    """
    import torch.distributed as dist

    if not dist.is_available():
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # builds without the distributed package's tensor module
        return None
    return DTensor


def register_dtensor_sharding(op: Any, rule: Callable[..., Any], static_argnum: int) -> None:
    """Register ``rule`` as DTensor's sharding strategy of the custom op ``op`` (an ``OpOverload``), with every
    argument from ``static_argnum`` on in the key of DTensor's sharding-propagation cache.

    ``torch.distributed.tensor.experimental.register_sharding`` (public, experimental since torch 2.5) keys
    that cache on the op's tensors and on its arguments from the first ``int`` one on
    (``_register_sharding.py``, ``derive_schema_info``, torch 2.13 and 2.14): a ``bool`` or ``float``
    argument before any ``int`` one is left out, so a rule whose output placements or shapes depend on such a
    flag (an ``input_grad`` that makes a gradient an empty ``[0]`` tensor) would be answered from the cache
    of another call. The schema info is set again through the sharding propagator's ``register_op_strategy``
    (``DTensor._op_dispatcher.sharding_propagator``, ``torch.distributed.tensor._op_schema.RuntimeSchemaInfo``:
    private names, checked by ``tests/distributed/test_sharding_rules.py``).

    Args:
        op: the op overload (``torch.ops.accel.swiglu.default``).
        rule: as ``register_sharding`` takes it: the op's arguments (tensors as DTensor specs) -> a list of
            ``(output placements, input placements)``, one placement per mesh dimension.
        static_argnum: index of the first non-tensor argument of ``op``'s schema.

    Raises:
        FeatureUnavailableError: this torch has no DTensor, or its sharding propagator lacks the names above.

    .. note:: Imports ``torch.distributed.tensor`` (about 0.6 s on this project's CPU host, torch 2.13).
    """
    from accel.errors import FeatureUnavailableError

    dtensor = dtensor_class()
    prop = getattr(getattr(dtensor, "_op_dispatcher", None), "sharding_propagator", None)
    try:
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
        from torch.distributed.tensor.experimental import register_sharding as upstream
    except ImportError as exc:
        RuntimeSchemaInfo = upstream = None  # noqa: N806 - a class, or None where absent
        missing = str(exc)
    else:
        missing = ""
    if prop is None or upstream is None or not hasattr(prop, "register_op_strategy") \
            or not isinstance(getattr(prop, "op_strategy_funcs", None), dict):
        raise FeatureUnavailableError(
            f"DTensor sharding rule for {op}: this torch (DTensor {'present' if dtensor else 'absent'}; "
            f"{missing or 'no DTensor._op_dispatcher.sharding_propagator.register_op_strategy'}) has no custom-op "
            f"sharding registration accel knows. accel checks torch 2.13 and 2.14's. Call accel's ops on local "
            f"tensors (DTensor.to_local()) there, or use a torch whose registration accel knows.")
    upstream(op)(rule)
    prop.register_op_strategy(op, prop.op_strategy_funcs[op], RuntimeSchemaInfo(static_argnum, needs_pytree=True))
