"""Device selection: explicit argument > ``ACCEL_DEVICE`` > best available; the index per rank.

Exactly one backend is active per selection. The index of the device handed out: the
argument's, else ``ACCEL_DEVICE``'s (when it names one), else ``LOCAL_RANK`` (torchrun's
per-node rank) on backends with one device per process (CUDA, ROCm, XPU), unless a
visible-devices variable binds the process to one device (:func:`bound_device`: index 0),
else none (the current device, index 0 unless the program changed it). Results are cached
per ``(spec, ACCEL_DEVICE, LOCAL_RANK)``; :func:`accel.clear_cache` forgets them (and the
probes that read the visible-devices variables).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass

import torch

from accel import _probe
from accel.backends import Backend
from accel.errors import (
    BackendUnavailableError,
    DeviceIndexError,
    HiddenDevicesWarning,
    InvalidDeviceError,
    LocalRankError,
    UnknownBackendError,
)

__all__ = ["device", "backend", "selection", "Selection", "ENV_VAR", "LOCAL_RANK_VAR", "bound_device", "hidden_devices",
           "index_value", "local_rank_index", "parse_index", "per_rank_devices", "split_spec", "visible_entries"]

#: The environment variable that picks the backend when no argument is given.
ENV_VAR = "ACCEL_DEVICE"
#: The launcher's per-node rank (torchrun, SLURM wrappers, ``torch.multiprocessing`` scripts set it).
LOCAL_RANK_VAR = "LOCAL_RANK"


@dataclass(frozen=True)
class Selection:
    """The outcome of one selection.

    Attributes:
        backend: the active :class:`~accel.backends.Backend` instance.
        device: the ``torch.device`` handed to the user.
        source: ``"argument"``, ``"ACCEL_DEVICE"`` or ``"best available"``.
        reason: one line saying why this backend was chosen.
    """

    backend: Backend
    device: torch.device
    source: str
    reason: str


_CACHE: dict[tuple[type, object, str | None, str | None], Selection] = {}
_probe.on_clear(_CACHE.clear)

# accel.device()'s fast path: ACCEL_DEVICE read straight from os.environ's backing dict
# (what os.environ.get reads after encoding the key; 5-10x cheaper than os.environ.get,
# and still sees every os.environ / monkeypatch.setenv change). Falls back to
# os.environ.get where the interpreter's os.environ has no such dict.
_ENV_DATA: dict | None = getattr(os.environ, "_data", None)
try:
    _ENV_KEY: object = os.environ.encodekey(ENV_VAR)  # type: ignore[attr-defined]
    _RANK_KEY: object = os.environ.encodekey(LOCAL_RANK_VAR)  # type: ignore[attr-defined]
except AttributeError:
    _ENV_DATA, _ENV_KEY, _RANK_KEY = None, ENV_VAR, LOCAL_RANK_VAR
if not isinstance(_ENV_DATA, dict):
    _ENV_DATA = None
_DEVICES: dict[tuple[type, object, object, object], torch.device] = {}
_probe.on_clear(_DEVICES.clear)


#: A device index as torch.device writes it: ASCII digits, no leading zero (str.isdigit also takes '²', '٣').
_INDEX = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def index_value(text: str) -> int | None:
    """The index ``text`` spells (``"0"``, ``"12"``), or ``None`` when it spells none.

    Only ASCII digits without leading zeros, as ``torch.device`` takes them. The one
    index parse in accel (device specs, the runtime's device arguments, ``LOCAL_RANK``).
    """
    return int(text) if _INDEX.fullmatch(text) else None


def parse_index(text: str, what: str, fix: str = "Write '<backend>:<index>', e.g. 'cuda:0'.") -> int:
    """The index after ``':'`` in a device spec.

    Args:
        text: what followed the colon.
        what: the start of the message (the call and the spec the user wrote).
        fix: the message's last sentence (what to do).

    Raises:
        DeviceIndexError: (a ``ValueError``) ``text`` is not ASCII digits without leading zeros.
    """
    index = index_value(text)
    if index is None:
        raise DeviceIndexError(
            f"{what}: the index {text!r} is not a non-negative integer written in ASCII digits without leading "
            f"zeros ('0', '1', '12'), as torch.device takes it. {fix}"
        )
    return index


def split_spec(spec: str) -> tuple[str, str | None]:
    """``" CUDA:1 "`` -> ``("cuda", "1")``; ``"xpu"`` -> ``("xpu", None)``. Check the index with :func:`parse_index`."""
    name, sep, idx = spec.strip().lower().partition(":")
    return name, (idx if sep else None)


def _valid_names() -> list[str]:
    return list(_probe.probes())


def _probe_table() -> str:
    return "\n".join(f"  {name}: {'available' if p.available else 'unavailable'} - {p.reason}"
                     for name, p in _probe.probes().items())


def _parse(spec: object, source: str, env: str | None = None) -> tuple[str, int | None, str]:
    """``spec`` -> ``(backend name, index or None, what the user wrote)``; raises typed errors.

    An int index applies to the ``ACCEL_DEVICE`` backend when that is set, else to the best one.
    """
    if isinstance(spec, torch.device):
        return _name_for_device_type(spec.type, repr(spec), source), spec.index, repr(spec)
    if isinstance(spec, bool) or not isinstance(spec, (str, int)):
        raise InvalidDeviceError(
            f"accel.device: got {spec!r} of type {type(spec).__name__}. A device spec is None, a str such as "
            f"'cuda' or 'cuda:1', an int index, or a torch.device. Pass one of those."
        )
    if isinstance(spec, int):
        name = _parse(env, f"{ENV_VAR}=")[0] if env else _best().name
        return name, spec, str(spec)
    name, text = split_spec(spec)
    name = _name_for_device_type(name, repr(spec), source)
    index = None if text is None else parse_index(
        text, f"{source}{spec!r}", f"{_count_text(name)} Write '<backend>' or '<backend>:<index>', e.g. "
                                   f"'{name if name != 'rocm' else 'cuda'}:0'.")
    return name, index, spec


def _count_text(name: str) -> str:
    """How many devices backend ``name`` has, as a sentence for index errors."""
    p = _probe.probes()[name]
    if not p.available:
        return f"Backend {name!r} has no visible device ({p.reason})."
    return (f"Backend {name!r} has {p.device_count} visible device(s), so valid indices are "
            f"0..{p.device_count - 1}.")


#: Words people write for a vendor or a device kind -> the backend name(s) accel uses for it.
_VENDOR_WORDS = {"hip": "'rocm'", "amd": "'rocm'", "nvidia": "'cuda'", "intel": "'xpu'", "apple": "'mps'",
                 "metal": "'mps'", "gpu": "'cuda', 'rocm', 'xpu' or 'mps' (the vendor's name)"}


def _name_for_device_type(name: str, shown: str, source: str = "argument ") -> str:
    names = _valid_names()
    if name in names:
        if name == "cuda" and _probe.torch_build()["hip"]:
            return "rocm"  # ROCm builds of torch call AMD GPUs "cuda": the vendor comes from torch.version.hip
        return name
    alias = _VENDOR_WORDS.get(name.lower())
    raise UnknownBackendError(
        f"{source}{shown}: unknown backend {name!r}. Valid names: {', '.join(names)} "
        f"(optionally with ':<index>'). "
        + (f"Did you mean {alias}? " if alias else "")
        + (f"Fix the spelling, or unset {ENV_VAR} to pick the best available." if source.startswith(ENV_VAR)
           else "Fix the spelling, or pass no device to pick the best available.")
    )


def _best() -> Backend:
    for name, p in _probe.probes().items():
        if p.available:
            return _probe.backend_class(name)()
    raise BackendUnavailableError(  # unreachable with the built-in cpu backend, kept for plug-in registries
        f"accel: no backend is available.\n{_probe_table()}"
    )


def hidden_devices(chosen: Backend | None = None) -> dict[str, tuple[tuple[str, str], ...]]:
    """Backends that the running torch build serves but whose every device the visible-devices variables
    hide, by name -> ``((variable, value), ...)`` (:attr:`~accel.backends.ProbeResult.hidden_by`).

    Args:
        chosen: only those that would have been preferred to this backend (``None``: all).
    """
    probes = _probe.probes()
    names = list(probes)
    stop = names.index(chosen.name) if chosen is not None and chosen.name in names else len(names)
    return {n: probes[n].hidden_by for n in names[:stop] if probes[n].hidden_by}


def _hidden_text(hidden: dict[str, tuple[tuple[str, str], ...]]) -> str:
    """``"the cuda devices of this torch build are all hidden by CUDA_VISIBLE_DEVICES=''"``."""
    parts = [f"{name} devices of this torch build are all hidden by "
             + ", ".join(f"{k}={v!r}" for k, v in variables) for name, variables in hidden.items()]
    return "the " + "; the ".join(parts)


def per_rank_devices(b: Backend) -> bool:
    """Whether backend ``b`` gives each process on a node its own device, so that ``LOCAL_RANK`` picks the
    index (CUDA, ROCm, XPU). The CPU and MPS have one device that every process of the node shares."""
    return b.torch_device_type not in ("cpu", "mps")


def local_rank_index(raw: str | None) -> int | None:
    """``LOCAL_RANK``'s value ``raw`` as an index; ``None`` when it is unset (``raw is None``).

    Raises:
        LocalRankError: (a ``DistributedError`` and ``ValueError``) ``raw`` is set but is not a
            non-negative integer in ASCII digits without leading zeros (an empty value included).
    """
    if raw is None:
        return None
    rank = index_value(raw)
    if rank is None:
        raise LocalRankError(f"accel: {LOCAL_RANK_VAR}={raw!r} is not a non-negative integer (ASCII digits "
                             "without leading zeros). Launch with torchrun, or set LOCAL_RANK to this process's "
                             "index on the node (or unset it in a single-process run).")
    return rank


def visible_entries(value: str) -> tuple[str, ...]:
    """The devices a visible-devices variable's ``value`` names, in order (``"3"`` -> ``("3",)``,
    ``"GPU-8f2c...,1"`` -> two entries).

    The list is read as the CUDA runtime reads ``CUDA_VISIBLE_DEVICES`` (HIP and Level Zero
    read theirs alike): comma-separated indices, UUIDs (``GPU-...``, ``MIG-...``) or, for
    ``ZE_AFFINITY_MASK``, ``device.subdevice``; it ends at the first empty or negative entry
    (``""`` and ``"-1"`` name none; ``"0,-1,2"`` names ``0`` only). CUDA C Programming Guide,
    "CUDA Environment Variables".
    """
    entries: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        entries.append(item)
    return tuple(entries)


def bound_device(b: Backend, count: int) -> tuple[str, str] | None:
    """``(variable, value)`` of the visible-devices variable that binds this process to one device of
    backend ``b``, or ``None``.

    A launcher that gives each process one GPU (Slurm ``--gpus-per-task=1``, a Kubernetes device
    plugin) sets ``CUDA_VISIBLE_DEVICES=3`` (``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, a GPU
    UUID) and may leave ``LOCAL_RANK=3``: that rank then names the node's GPU, not an index among this
    process's visible ones, and the process's device is index 0. Each variable filters the devices
    (ROCm applies ``ROCR_VISIBLE_DEVICES``, then ``HIP_VISIBLE_DEVICES``), so one that names exactly
    one device leaves at most one visible.

    Args:
        b: the backend (its :attr:`~accel.backends.Backend.visible_devices_env`).
        count: the devices its probe sees. Only ``1`` can be bound: a variable naming one device while
            more are visible did not take effect (it was set after the runtime counted the devices).
    """
    if count != 1:
        return None
    for var in b.visible_devices_env:
        value = os.environ.get(var)
        if value is not None and len(visible_entries(value)) == 1:
            return var, value
    return None


def _rank_device(b: Backend, p: object, rank_raw: str | None, label: str) -> tuple[int | None, str]:
    """The index ``LOCAL_RANK`` gives on backend ``b`` (``None``: not set, or a shared device), and the
    reason's suffix. ``p`` is ``b``'s probe result; ``label`` says where the backend came from. Where a
    visible-devices variable binds the process to one device (:func:`bound_device`), index 0."""
    if rank_raw is None or not per_rank_devices(b):
        return None, ""
    rank = local_rank_index(rank_raw)
    count = p.device_count  # type: ignore[attr-defined]
    bound = bound_device(b, count)
    if bound is not None:
        var, value = bound
        return 0, (f"; index 0: {var}={value!r} binds this process to one device, so {LOCAL_RANK_VAR}={rank_raw!r} "
                   f"is not an index here")
    if rank is not None and not rank < count:
        raise DeviceIndexError(
            f"accel.device: {LOCAL_RANK_VAR}={rank_raw!r} names device {rank} of backend {b.name!r} ({label}), "
            f"which has {count} visible device(s), so valid indices are 0..{count - 1}. Start at most one process "
            f"per visible device (torchrun --nproc-per-node={count}), check the visible-devices variables, or pin "
            f"each process with {ENV_VAR}={b.name}:<index>."
        )
    return rank, f"; index {rank} from {LOCAL_RANK_VAR}"


def _resolve(spec: object, env: str | None, rank_raw: str | None = None) -> Selection:
    """The selection for ``spec`` with ``ACCEL_DEVICE=env``; ``rank_raw`` is ``LOCAL_RANK`` (``None``: unset,
    or not to be consulted: :func:`backend` chooses a vendor, not a device)."""
    if spec is not None:
        source, raw = "argument", spec
    elif env:
        source, raw = ENV_VAR, env
    else:
        b = _best()
        p = _probe.probes()[b.name]
        reason = f"best available: {b.name} ({p.reason})"
        hidden = hidden_devices(b)
        if hidden:
            said = _hidden_text(hidden)
            reason += f"; {said}"
            warnings.warn(
                f"accel: {said}, so accel falls back to {b.name}. Unset the variable(s), or set them to the "
                f"device indices to use (e.g. {next(iter(hidden.values()))[0][0]}=0), then call "
                f"accel.clear_cache(); or set {ENV_VAR}={b.name} to choose {b.name} on purpose (no warning). "
                f"`accel doctor` checks this.",
                HiddenDevicesWarning, stacklevel=4)
        index, said = _rank_device(b, p, rank_raw, "best available")
        return Selection(b, b.device(index), "best available", reason + said)
    label = "argument " if source == "argument" else f"{ENV_VAR}="
    name, index, shown = _parse(raw, label, env)
    p = _probe.probes()[name]
    if not p.available:
        raise BackendUnavailableError(
            f"{label}{shown!r}: backend {name!r} is not available: {p.reason}.\nEvery probe:\n{_probe_table()}\n"
            f"Pick an available backend (e.g. {'ACCEL_DEVICE=cpu' if source == ENV_VAR else repr('cpu')}), or install "
            f"the torch build for this hardware (https://pytorch.org/get-started/locally/)."
        )
    if index is not None and not 0 <= index < p.device_count:
        raise DeviceIndexError(
            f"{label}{shown!r}: device index {index} is out of range: backend {name!r} has {p.device_count} "
            f"visible device(s), so valid indices are 0..{p.device_count - 1}. "
            + ("Indices count from 0: pass 0 or leave the index out." if index < 0 else
               "Use a smaller index or check the visible-devices variables.")
        )
    b = _probe.backend_class(name)()
    said = ""
    if index is None and source == ENV_VAR:  # an argument is taken as written; ACCEL_DEVICE's own index wins
        index, said = _rank_device(b, p, rank_raw, f"{ENV_VAR}={shown!r}")
    return Selection(b, b.device(index), source, f"{source}: {shown!r} -> {name} ({p.reason}){said}")


def selection(spec: object = None, /) -> Selection:
    """The full :class:`Selection` for ``spec`` (cached), with the reason it was made.

    Raises:
        The errors of :func:`device`.
    """
    return _selection(spec, os.environ.get(ENV_VAR), os.environ.get(LOCAL_RANK_VAR))


def _selection(spec: object, env: str | None, rank_raw: str | None) -> Selection:
    key = (spec.__class__, spec, env, rank_raw)  # the class too: 0 == False and 1 == 1.0 must not share an entry
    try:
        return _CACHE[key]
    except KeyError:
        pass
    except TypeError:  # unhashable spec: not cacheable, and never a valid spec
        return _resolve(spec, env, rank_raw)
    sel = _resolve(spec, env, rank_raw)
    _CACHE[key] = sel
    return sel


def device(spec: object = None, /) -> torch.device:
    """The ``torch.device`` to run on.

    The backend: ``spec`` if given, else the ``ACCEL_DEVICE`` environment variable (empty
    means unset), else the best available backend (cuda or rocm, then xpu, then mps,
    then cpu). ``"cuda"`` on a ROCm build of torch selects the ``rocm`` backend
    (torch calls AMD GPUs ``cuda``).

    The index, on a backend with one device per process (CUDA, ROCm, XPU): ``spec``'s
    when a ``spec`` is given (taken as written: ``"cuda"`` stays the current device); else
    ``ACCEL_DEVICE``'s when it names one (``ACCEL_DEVICE=cuda:1`` wins over ``LOCAL_RANK``);
    else ``LOCAL_RANK`` (set by torchrun for each process on a node: process 1 gets
    ``cuda:1``), except where the backend's visible-devices variable names exactly one
    device (``CUDA_VISIBLE_DEVICES=3`` from Slurm ``--gpus-per-task=1`` or a Kubernetes device
    plugin): that process's one device, index 0, whatever ``LOCAL_RANK`` says
    (:func:`bound_device`; :func:`selection`'s reason says so); else none, the current device
    (index 0 unless the program changed it). On the CPU and MPS, whose one device every
    process shares, ``LOCAL_RANK`` is not read.

    Cached per ``(spec, ACCEL_DEVICE, LOCAL_RANK)``; a cached call costs well under 1 µs.
    :func:`accel.clear_cache` forgets the cache.

    Args:
        spec: ``None``, a backend name with an optional index (``"cpu"``, ``"cuda"``,
            ``"rocm:1"``, ``"xpu"``, ``"mps"``), an ``int`` index (on the ``ACCEL_DEVICE``
            backend when that is set, else on the best one), or a ``torch.device``.

    Returns:
        ``torch.device`` of the backend's torch device type (``cuda`` for ROCm), with
        the index chosen as above, or without one (the current device).

    Raises:
        UnknownBackendError: (a ``ValueError``) unknown name; the message lists valid names.
        BackendUnavailableError: (a ``RuntimeError``) the backend is not usable; lists every probe.
        DeviceIndexError: (a ``ValueError``) index outside ``0 .. device_count - 1``, the
            ``LOCAL_RANK`` index included (more processes on the node than visible devices,
            where no visible-devices variable binds the process to one device).
        LocalRankError: (a ``ValueError``) ``LOCAL_RANK`` is read (no spec, an accelerator)
            and is not a non-negative integer.
        InvalidDeviceError: (a ``TypeError``) ``spec`` is not a device spec.

    .. note:: Never initialises a device runtime: device counts come from NVML /
       amd-smi, so ``fork()`` afterwards is safe. Does not make the device current:
       :func:`accel.distributed.init_process_group` does that for a rank.

    Example:
        >>> import accel
        >>> accel.device("cpu")
        device(type='cpu')
        >>> import os
        >>> from unittest import mock
        >>> from accel.testing import fake_backend
        >>> with mock.patch.dict(os.environ, {"LOCAL_RANK": "1"}), fake_backend("cuda", device_count=2):
        ...     accel.device(), accel.device("cuda")
        (device(type='cuda', index=1), device(type='cuda'))
    """
    if _ENV_DATA is not None:
        env, rank_raw = _ENV_DATA.get(_ENV_KEY), _ENV_DATA.get(_RANK_KEY)
    else:
        env, rank_raw = os.environ.get(ENV_VAR), os.environ.get(LOCAL_RANK_VAR)
    try:
        return _DEVICES[spec.__class__, spec, env, rank_raw]
    except KeyError:
        pass
    except TypeError:  # unhashable spec: never a valid spec; _resolve raises the typed error
        return _selection(spec, os.environ.get(ENV_VAR), os.environ.get(LOCAL_RANK_VAR)).device
    # straight to _selection (not through selection()): the hidden-devices warning's stacklevel names our caller
    dev = _selection(spec, os.environ.get(ENV_VAR), os.environ.get(LOCAL_RANK_VAR)).device
    _DEVICES[spec.__class__, spec, env, rank_raw] = dev
    return dev


def backend(spec: object = None, /) -> Backend:
    """The active :class:`~accel.backends.Backend` for ``spec``, chosen like :func:`device`.

    ``LOCAL_RANK`` is not read: it picks a device of the backend, not the backend.

    Raises:
        The same errors as :func:`device`, except those of ``LOCAL_RANK``.

    Example:
        >>> import accel
        >>> accel.backend("cpu").dispatch_key
        'CPU'
    """
    return _selection(spec, os.environ.get(ENV_VAR), None).backend
