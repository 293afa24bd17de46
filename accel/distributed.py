"""The c10d backend and device of the active vendor: one ``init_process_group`` for every vendor.

``nccl`` on CUDA and ROCm (RCCL answers to that name), ``xccl`` on Intel XPU,
``gloo`` on CPU and MPS. A vendor's newer backend (``nccl2`` on CUDA) is chosen
only where the running torch registers it. :func:`init_process_group` binds each
rank to its local device (``device_id``), as torch recommends for NCCL-like
backends; :func:`launch_env` reads what the launcher (torchrun) told this process;
:func:`check_backend` refuses a backend that cannot take the tensors' device
(``nccl`` with CPU tensors) before the first collective does so obscurely.

The device of a rank is :func:`accel.device` (``LOCAL_RANK`` is its index on CUDA,
ROCm and XPU unless ``ACCEL_DEVICE`` names one); ``docs/distributed.md`` shows a
whole torchrun script with FSDP2 and an exact per-rank resume.

Importing this module imports ``torch.distributed`` lazily and initialises nothing.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any

import torch

from accel import _compat
from accel._options import check_keys, did_you_mean
from accel._select import LOCAL_RANK_VAR, index_value, local_rank_index, per_rank_devices, selection
from accel.errors import DeviceIndexError, DistributedError, LocalRankError

__all__ = ["Launch", "backend_name", "check_backend", "init_process_group", "launch_env", "local_rank",
           "symmetric_memory_available"]


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
    """``LOCAL_RANK`` or 0 (:func:`accel._select.local_rank_index`'s parse and error)."""
    rank = local_rank_index(os.environ.get(LOCAL_RANK_VAR))
    return 0 if rank is None else rank


#: The launcher's variables :func:`launch_env` reads: (field, variable, default when unset).
_LAUNCH_VARS = (("rank", "RANK", 0), ("world_size", "WORLD_SIZE", 1), ("local_rank", "LOCAL_RANK", 0),
                ("local_world_size", "LOCAL_WORLD_SIZE", 1))


@dataclass(frozen=True)
class Launch:
    """What the launcher told this process (:func:`launch_env`).

    Attributes:
        rank: global rank, ``0 .. world_size - 1`` (``RANK``; ``0`` when not launched).
        world_size: number of processes in the job (``WORLD_SIZE``; ``1``).
        local_rank: rank on this node (``LOCAL_RANK``; ``0``): the device index on CUDA, ROCm, XPU.
        local_world_size: processes on this node (``LOCAL_WORLD_SIZE``; ``1``).
        master_addr: ``MASTER_ADDR`` or ``None``; ``master_port``: ``MASTER_PORT`` as an int or ``None``.
        launched: ``RANK`` and ``WORLD_SIZE`` are both set (torchrun, or a script that sets them):
            ``torch.distributed.init_process_group()`` then needs no ``rank=``/``world_size=``.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None
    launched: bool


def launch_env() -> Launch:
    """The job's shape from the launcher's environment variables (torchrun sets them all).

    Returns:
        A :class:`Launch`; unset variables take a single-process default.

    Raises:
        DistributedError: a variable is set but is not a non-negative integer (``MASTER_PORT``:
            ``1 .. 65535``), ``RANK >= WORLD_SIZE``, ``LOCAL_RANK >= LOCAL_WORLD_SIZE``, or only
            one of ``RANK`` and ``WORLD_SIZE`` is set. ``LocalRankError`` (a ``DistributedError``)
            for ``LOCAL_RANK``.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> import accel.distributed as ad
        >>> env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
        >>> with mock.patch.dict(os.environ, env):
        ...     launch = ad.launch_env()
        >>> launch.rank, launch.world_size, launch.local_rank, launch.launched
        (3, 4, 1, True)
    """
    values: dict[str, int] = {}
    for field, var, default in _LAUNCH_VARS:
        raw = os.environ.get(var)
        if raw is None:
            values[field] = default
            continue
        value = local_rank_index(raw) if var == LOCAL_RANK_VAR else index_value(raw)
        if value is None or (var.endswith("SIZE") and value == 0):
            raise DistributedError(f"accel.distributed.launch_env: {var}={raw!r} is not "
                                   f"{'a positive' if var.endswith('SIZE') else 'a non-negative'} integer. Launch with "
                                   "torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), or fix the "
                                   "variable.")
        values[field] = value
    has_rank, has_world = "RANK" in os.environ, "WORLD_SIZE" in os.environ
    if has_rank != has_world:
        raise DistributedError(f"accel.distributed.launch_env: {'RANK' if has_rank else 'WORLD_SIZE'} is set but "
                               f"{'WORLD_SIZE' if has_rank else 'RANK'} is not. Set both (torchrun does), or neither "
                               "for a single-process run.")
    for a, b in (("rank", "world_size"), ("local_rank", "local_world_size")):
        if values[a] >= values[b]:
            raise DistributedError(f"accel.distributed.launch_env: {a.upper()}={values[a]} is not below "
                                   f"{b.upper()}={values[b]}. Ranks count from 0: fix the launcher's variables.")
    raw_port = os.environ.get("MASTER_PORT")
    port = None if raw_port is None else index_value(raw_port)
    if raw_port is not None and (port is None or not 0 < port < 65536):
        raise DistributedError(f"accel.distributed.launch_env: MASTER_PORT={raw_port!r} is not a TCP port "
                               "(1 .. 65535). Set a free port, or let torchrun choose one (--master-port).")
    return Launch(master_addr=os.environ.get("MASTER_ADDR"), master_port=port, launched=has_rank and has_world,
                  **values)


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


#: c10d backends that run collectives on the host and take CPU tensors whatever the vendor's device is.
_HOST_BACKENDS = ("gloo", "mpi")


def _served_types(name: str) -> frozenset[str] | None:
    """The torch device types whose tensors c10d backend ``name`` takes, from the vendors' facts
    (``Backend.distributed_backend`` / ``newer_distributed_backends``); ``None``: not known (a host
    backend such as gloo, or one no vendor names)."""
    from accel.backends import registered

    if name in _HOST_BACKENDS:
        return None
    types = {cls.torch_device_type for cls in registered().values()
             if name == cls.distributed_backend or name in cls.newer_distributed_backends}
    return frozenset(types) if types else None


def _device_types(where: Any) -> list[str]:
    """The device types of ``where``: a module's parameters and buffers, a tensor, a device or spec."""
    if isinstance(where, torch.nn.Module):
        return sorted({t.device.type for t in (*where.parameters(), *where.buffers())})
    if isinstance(where, torch.Tensor):
        return [where.device.type]
    return [where.type if isinstance(where, torch.device) else selection(where).device.type]


def _backend_for_type(backend: str, device_type: str) -> tuple[str | None, str]:
    """The c10d backend a (possibly per-device, ``'cpu:gloo,cuda:nccl'``) backend string uses for
    ``device_type``, with the string shown in messages."""
    if ":" not in backend:
        return backend, repr(backend)
    pairs = dict(part.split(":", 1) for part in backend.split(",") if ":" in part)
    return pairs.get(device_type), repr(backend)


def check_backend(where: Any = None, /, backend: str | None = None) -> str:
    """That c10d backend ``backend`` can run collectives on ``where``'s tensors; returns the backend checked.

    ``nccl`` (and ``nccl2``) takes CUDA tensors only (ROCm's are ``cuda`` too), ``xccl`` XPU tensors
    only; ``gloo`` and ``mpi`` run on the host and take CPU tensors (gloo also CUDA tensors, staged
    through host memory). A backend no vendor names is not judged. Without this check a mismatch
    surfaces at the first collective, as torch's own error from inside the process group (or, for FSDP2,
    from its first all-gather).

    Args:
        where: ``None`` (:func:`accel.device`), a device spec or ``torch.device``, a tensor, or an
            ``nn.Module`` (each of its parameters' and buffers' device types).
        backend: a c10d backend name (or torch's per-device form ``'cpu:gloo,cuda:nccl'``); ``None``:
            the default process group's when one is initialised, else :func:`backend_name`.

    Returns:
        The backend name checked (``backend`` or the one chosen for it).

    Raises:
        DistributedError: the backend cannot take tensors of ``where``'s device type(s); nothing is
            changed. Also :func:`backend_name`'s errors, and :func:`accel.device`'s for a bad spec.

    Example:
        >>> import accel.distributed as ad
        >>> ad.check_backend("cpu", backend="gloo")
        'gloo'
        >>> ad.check_backend("cpu", backend="nccl")
        Traceback (most recent call last):
        ...
        accel.errors.DistributedError: accel.distributed: c10d backend 'nccl' runs collectives on cuda tensors only, ...
    """
    import torch.distributed as dist

    if backend is None:
        if dist.is_available() and dist.is_initialized():
            backend = str(dist.get_backend())
        else:
            backend = backend_name(where if isinstance(where, (str, torch.device)) else None)
    if not isinstance(backend, str):
        raise DistributedError(f"check_backend: backend={backend!r} ({type(backend).__name__}) is not a c10d backend "
                               "name. Pass a name such as 'gloo', or None for the process group's or the vendor's.")
    for device_type in _device_types(where):
        used, shown = _backend_for_type(backend, device_type)
        if used is None:
            raise DistributedError(
                f"accel.distributed: c10d backend {shown} names no backend for {device_type} tensors. Initialise the "
                f"process group with a backend for {device_type} (accel.distributed.backend_name({device_type!r})), "
                f"or move the tensors to a device it serves.")
        served = _served_types(used)
        if served is not None and device_type not in served:
            fix = _fit_fix(device_type)
            raise DistributedError(
                f"accel.distributed: c10d backend {used!r} runs collectives on {' and '.join(sorted(served))} tensors "
                f"only, and these tensors are on {device_type}. {fix}")
    return backend


def _fit_fix(device_type: str) -> str:
    """What to do when a backend does not fit ``device_type``'s tensors."""
    try:
        right = backend_name(device_type)
    except (DistributedError, ValueError, RuntimeError) as exc:  # the vendor's own backend is missing here too
        return f"The backend for {device_type} is not usable here either ({exc})."
    return (f"Use the backend for {device_type} ({right!r}: accel.distributed.init_process_group() picks it for "
            f"accel.device()), or move the model and tensors to a device the backend serves.")


def init_process_group(backend: str | None = None, /, *, local_rank: int | None = None,
                       **kwargs: Any) -> torch.device:
    """``torch.distributed.init_process_group`` with the vendor's backend and this rank's device.

    On an accelerator (CUDA, ROCm, XPU) the rank's device is ``local_rank=`` when given, else
    :func:`accel.device`'s (``ACCEL_DEVICE``'s index when it names one, else ``LOCAL_RANK``, else 0):
    it becomes the current device and is passed as ``device_id`` (eager NCCL/XCCL communicator
    setup bound to that device). On CPU and MPS (one device shared by every process) no
    ``device_id`` is passed. The backend is checked against the device (:func:`check_backend`):
    ``"nccl"`` on a CPU machine is refused here, not at the first collective.

    Args:
        backend: a c10d backend name; ``None`` = :func:`backend_name`.
        local_rank: index of this process's device on the node; ``None`` = as :func:`accel.device`.
        **kwargs: passed to ``torch.distributed.init_process_group`` (``rank``,
            ``world_size``, ``init_method``, ``timeout``, ...).

    Returns:
        The ``torch.device`` this rank computes on.

    Raises:
        DistributedError: a keyword of ``**kwargs`` is not a parameter of
            ``torch.distributed.init_process_group`` (the message names the closest), a process
            group is already initialised, the backend is not usable (or not a str) or cannot take
            the device's tensors (``nccl`` with CPU tensors), or the local rank is outside the
            visible devices. Nothing is changed then.
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
    check_backend(torch.device(vendor.torch_device_type), backend=name)
    device = torch.device("cpu")
    if per_rank_devices(vendor):
        rank = explicit if explicit is not None else _selected_index()
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


def _selected_index() -> int:
    """The index :func:`accel.device` gives (``ACCEL_DEVICE``'s, ``LOCAL_RANK``, else 0), its range error
    as a ``DistributedError``."""
    try:
        index = selection().device.index
    except DeviceIndexError as exc:
        raise DistributedError(f"init_process_group: {exc}") from exc
    return 0 if index is None else index


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
