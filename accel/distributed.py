"""The c10d backend and device of the active vendor: one ``init_process_group`` for every vendor.

``nccl`` on CUDA and ROCm (RCCL answers to that name), ``xccl`` on Intel XPU,
``gloo`` on CPU and MPS. A vendor's newer backend (``nccl2`` on CUDA) is chosen
only where the running torch registers it. :func:`init_process_group` binds each
rank to its local device (``device_id``), as torch recommends for NCCL-like
backends.

Importing this module imports ``torch.distributed`` lazily and initialises nothing.
"""

from __future__ import annotations

import operator
import os
from typing import Any

import torch

from accel import _compat
from accel._options import check_keys, did_you_mean
from accel._select import index_value
from accel.errors import DistributedError, LocalRankError

__all__ = ["backend_name", "init_process_group", "local_rank", "symmetric_memory_available"]


def _vendor(device: Any = None) -> Any:
    from accel._select import backend

    return backend(device)


def _usable(name: str) -> tuple[bool, str]:
    """Whether the running torch registers and built the c10d backend ``name``."""
    import torch.distributed as dist

    if name not in _compat.c10d_backends():
        return False, f"torch {torch.__version__} does not register c10d backend {name!r} " \
                      f"(registered: {', '.join(_compat.c10d_backends()) or 'none'})"
    check = getattr(dist, f"is_{name}_available", None)
    if check is not None and not check():
        return False, f"torch {torch.__version__} registers {name!r} but was built without it " \
                      f"(torch.distributed.is_{name}_available() is False)"
    return True, f"{name!r} is registered and built"


def backend_name(device: Any = None, /) -> str:
    """The c10d backend for ``device``'s vendor (``None`` = the active device).

    The vendor's newer backend where the running torch registers and built it,
    else its standard one (``Backend.distributed_backend``).

    Raises:
        DistributedError: torch has no distributed support, or lacks the vendor's backend.

    Example:
        >>> import accel.distributed
        >>> accel.distributed.backend_name("cpu")
        'gloo'
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise DistributedError(f"accel.distributed: torch {torch.__version__} was built without distributed "
                               "support (torch.distributed.is_available() is False). Install a torch build with it.")
    vendor = _vendor(device)
    for name in vendor.newer_distributed_backends:
        if _usable(name)[0]:
            return name
    ok, why = _usable(vendor.distributed_backend)
    if not ok:
        raise DistributedError(
            f"accel.distributed: the {vendor.name} backend needs c10d backend {vendor.distributed_backend!r}: {why}. "
            f"Install the torch build for {vendor.vendor} hardware, or select another device (ACCEL_DEVICE=cpu uses gloo)."
        )
    return vendor.distributed_backend


def local_rank() -> int:
    """This process's rank on its node: ``LOCAL_RANK`` (torchrun), else ``0``.

    Raises:
        LocalRankError: (a ``DistributedError`` and ``ValueError``) ``LOCAL_RANK`` is set
            but not a non-negative integer.
    """
    return _env_local_rank()


def _env_local_rank() -> int:
    """``LOCAL_RANK`` or 0.

    Raises:
        DistributedError: ``LOCAL_RANK`` is set but not a non-negative integer.
    """
    raw = os.environ.get("LOCAL_RANK", "0")
    rank = index_value(raw)
    if rank is None:
        raise LocalRankError(f"accel.distributed: LOCAL_RANK={raw!r} is not a non-negative integer (ASCII digits "
                             "without leading zeros). Launch with torchrun, or set LOCAL_RANK to this process's "
                             "index on the node.")
    return rank


def _check_local_rank(value: object) -> int:
    """``local_rank=`` as an int >= 0 (an int or NumPy integer; not a bool, float or str)."""
    if not isinstance(value, bool) and hasattr(type(value), "__index__") and not isinstance(value, torch.Tensor):
        rank = operator.index(value)
        if rank >= 0:
            return rank
    raise LocalRankError(
        f"init_process_group: local_rank={value!r} ({type(value).__name__}) is not a non-negative integer. It is "
        "the index of this process's device on the node. Pass an int >= 0, or None to read LOCAL_RANK."
    )


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    """``kwargs`` are parameters of the running torch's ``torch.distributed.init_process_group``."""
    import inspect

    import torch.distributed as dist

    try:
        params = inspect.signature(dist.init_process_group).parameters.values()
    except (TypeError, ValueError):  # no signature to check against: torch checks the call itself
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    valid = [p.name for p in params if p.name != "backend"]
    check_keys(kwargs, valid, what=f"init_process_group: keyword argument(s) of torch {torch.__version__}'s "
               "torch.distributed.init_process_group", error=DistributedError,
               fix="backend is accel's first argument; local_rank= is accel's own. Nothing was changed.")


def init_process_group(backend: str | None = None, /, *, local_rank: int | None = None,
                       **kwargs: Any) -> torch.device:
    """``torch.distributed.init_process_group`` with the vendor's backend and this rank's device.

    On an accelerator the rank's device is ``<device type>:<local_rank>``: it becomes
    the current device and is passed as ``device_id`` (eager NCCL/XCCL
    communicator setup bound to that device). On CPU and MPS no ``device_id`` is
    passed.

    Args:
        backend: a c10d backend name; ``None`` = :func:`backend_name`.
        local_rank: index of this process's device on the node; ``None`` = ``LOCAL_RANK`` or 0.
        **kwargs: passed to ``torch.distributed.init_process_group`` (``rank``,
            ``world_size``, ``init_method``, ``timeout``, ...).

    Returns:
        The ``torch.device`` this rank computes on.

    Raises:
        DistributedError: a keyword of ``**kwargs`` is not a parameter of
            ``torch.distributed.init_process_group`` (the message names the closest), a process
            group is already initialised, the backend is not usable (or not a str), or
            ``local_rank`` is outside the visible devices. Nothing is changed then.
        LocalRankError: (a ``DistributedError`` and ``ValueError``) ``local_rank`` (or
            ``LOCAL_RANK``) is not a non-negative integer; nothing is changed.

    .. note:: Initialises the device runtime (sets the current device) on accelerators.
    """
    import torch.distributed as dist

    explicit = None if local_rank is None else _check_local_rank(local_rank)
    _check_kwargs(kwargs)
    if backend is not None and not isinstance(backend, str):
        raise DistributedError(f"init_process_group: backend={backend!r} ({type(backend).__name__}) is not a c10d "
                               f"backend name. Pass a name such as 'gloo', or None for the vendor's.")
    name = backend or backend_name()
    ok, why = _usable(name)
    if not ok:
        raise DistributedError(f"init_process_group: backend {name!r} is not usable: {why}."
                               f"{did_you_mean(name, _compat.c10d_backends())} "
                               f"Pass backend=None to use the vendor's ({backend_name()!r}).")
    if dist.is_initialized():
        raise DistributedError("init_process_group: the default process group is already initialised "
                               f"(backend {dist.get_backend()!r}). Call torch.distributed.destroy_process_group() first.")
    vendor = _vendor()
    rank = _env_local_rank() if explicit is None else explicit
    device = torch.device("cpu")
    if vendor.torch_device_type not in ("cpu", "mps"):
        count = vendor.device_count()
        if not 0 <= rank < count:
            raise DistributedError(
                f"init_process_group: local rank {rank} has no device: {count} {vendor.name} device(s) visible. "
                "Start at most one process per visible device (torchrun --nproc-per-node)."
            )
        device = torch.device(vendor.torch_device_type, rank)
        if _compat.accelerator_has("set_device_index"):
            torch.accelerator.set_device_index(rank)
        else:
            getattr(torch, vendor.torch_device_type).set_device(rank)
        kwargs.setdefault("device_id", device)
    dist.init_process_group(backend=name, **kwargs)
    return device


def symmetric_memory_available(device: Any = None, /) -> bool:
    """Whether torch symmetric memory can be used on ``device`` (``None`` = active).

    Needs the device's capability flag (``Capabilities.symmetric_memory``: CUDA
    sm_90+, AMD CDNA3+) and ``torch.distributed._symmetric_memory`` in the running torch.

    Example:
        >>> import accel.distributed
        >>> accel.distributed.symmetric_memory_available("cpu")
        False
    """
    vendor = _vendor(device)
    index = device.index if isinstance(device, torch.device) and device.index is not None else 0
    if not vendor.capabilities(index).symmetric_memory:
        return False
    import torch.distributed as dist

    return dist.is_available() and _compat.has_symmetric_memory()
