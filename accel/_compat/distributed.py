"""c10d backends, symmetric memory and DTensor of the running torch (``torch.distributed`` imported at first call)."""

from __future__ import annotations

import functools

from .inductor import find_spec

__all__ = ["c10d_backends", "dtensor_class", "has_symmetric_memory"]


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
