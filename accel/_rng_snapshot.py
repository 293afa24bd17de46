"""Checkpoints of every RNG stream of a process: :func:`snapshot` and :func:`restore` (re-exported by
:mod:`accel.random`, where they are documented for users), as plain dicts that ``torch.save`` and
``torch.load(weights_only=True)`` carry without allow-listing.
"""

from __future__ import annotations

import math
import random as _pyrandom
import warnings
from typing import Any

import torch

from accel import _select
from accel._rng_streams import CPU, CpuStream, DeviceStream, active, check_state, numpy_module, stream_for
from accel.errors import RngRestoreError, RngRestoreWarning, RngSnapshotError, RngSnapshotVersionError, RngStateError

__all__ = ["SNAPSHOT_FORMAT", "SNAPSHOT_VERSION", "restore", "snapshot"]

#: The ``"format"`` entry of every :func:`snapshot`.
SNAPSHOT_FORMAT = "accel.random.snapshot"
#: The snapshot format version this accel writes; :func:`restore` reads this version and older.
SNAPSHOT_VERSION = 1


# -- snapshot / restore ----------------------------------------------------------------------------------------
def _python_state() -> dict[str, Any]:
    version, internal, gauss_next = _pyrandom.getstate()
    return {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": None if gauss_next is None else float(gauss_next)}


def _numpy_state() -> dict[str, Any] | None:
    np = numpy_module()
    if np is None:
        return None
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {"bit_generator": str(name), "key": torch.from_numpy(np.asarray(key, dtype=np.int64).copy()),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def snapshot() -> dict[str, Any]:
    """Every RNG stream of this process as a plain dict, for checkpoints.

    Returns:
        ``{"format", "version", "accel", "torch", "vendor", "device_type",
        "device_count", "python", "numpy", "torch_cpu", "devices"}``: Python
        ``random``'s state (625 words as an ``int64`` tensor), NumPy's global
        ``RandomState`` (``None`` without NumPy; key as an ``int64`` tensor), the torch
        CPU state and one state per device of the active backend (``uint8`` CPU
        tensors), with the backend name (``vendor``) and ``device_count``: the number of
        per-device states in ``devices`` (``0`` on the CPU, whose state is ``torch_cpu``). Only tensors and
        Python primitives: ``torch.save`` then ``torch.load`` (``weights_only=True``)
        need no allow-listing.

    .. note:: Initialises the device runtime of the active accelerator. NumPy
       ``Generator`` objects (``np.random.default_rng()``) have no global state and are
       not included.

    Example:
        >>> import io, random, torch, accel.random
        >>> snap = accel.random.snapshot()
        >>> buf = io.BytesIO(); torch.save(snap, buf); _ = buf.seek(0)
        >>> x, t = random.random(), torch.rand(1)
        >>> _ = accel.random.restore(torch.load(buf, weights_only=True))
        >>> x == random.random() and torch.equal(t, torch.rand(1))
        True
    """
    backend = _select.backend()
    stream = stream_for(backend)
    devices = [] if stream is CPU else [s.clone() for s in stream.get_state_all()]
    from accel._version import __version__

    return {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "accel": str(__version__),
        "torch": str(torch.__version__),
        "vendor": backend.name,
        "device_type": backend.torch_device_type,
        "device_count": len(devices),
        "python": _python_state(),
        "numpy": _numpy_state(),
        "torch_cpu": torch.get_rng_state(),
        "devices": devices,
    }


def _corrupt(part: str, detail: str) -> RngSnapshotError:
    detail = detail.removeprefix(f"{part}: ").rstrip(".")  # a checker's own message may name the part, end in '.'
    return RngSnapshotError(
        f"accel.random.restore: the snapshot is corrupted: {part}: {detail}. Nothing was restored. "
        f"Restore a snapshot made by accel.random.snapshot() and saved unchanged."
    )


def _words(value: object, part: str, n: int) -> list[int]:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 1 or value.numel() != n:
        shown = (f"{value.dtype} tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                 else type(value).__name__)
        raise _corrupt(part, f"expected an int64 tensor of {n} words, got {shown}")
    words = value.tolist()
    if any(w < 0 or w >= 2**32 for w in words):
        raise _corrupt(part, "a word is outside 0 .. 2**32 - 1")
    return words


def _check_mt19937_key(words: list[int], part: str) -> None:
    """Refuse a degenerate MT19937 key: its 19937 state bits (the top bit of word 0 and words 1..623) all zero.

    Python's ``random.setstate`` and NumPy's ``set_state`` accept such a key, and the
    generator then returns 0 forever; seeding never produces one.
    """
    if not words[0] & 0x80000000 and not any(words[1:624]):
        raise _corrupt(part, "degenerate MT19937 state (every state bit of the key is zero: the generator would "
                             "only ever return 0)")


def _plan_python(part: object) -> tuple[Any, ...]:
    if not isinstance(part, dict) or set(part) != {"version", "internal", "gauss_next"}:
        raise _corrupt("python", f"expected a dict with version, internal, gauss_next; got {part!r:.80}")
    gauss, version = part["gauss_next"], part["version"]
    if gauss is not None and not isinstance(gauss, float):
        raise _corrupt("python", f"gauss_next is {type(gauss).__name__}, not a float or None")
    if gauss is not None and not math.isfinite(gauss):  # random.setstate takes it; the next gauss() returns it
        raise _corrupt("python", f"gauss_next is {gauss}, not a finite float (a cached Gaussian sample)")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _corrupt("python", f"version is {type(version).__name__}, not an int")
    words = _words(part["internal"], "python.internal", 625)
    _check_mt19937_key(words, "python.internal")
    state = (version, tuple(words), gauss)
    try:
        _pyrandom.Random().setstate(state)  # dry run on a scratch generator
    except (ValueError, TypeError, OverflowError) as exc:
        raise _corrupt("python", f"random.setstate refuses it: {exc}") from exc
    return state


def _plan_numpy(part: object, np: Any) -> tuple[Any, ...]:
    keys = {"bit_generator", "key", "pos", "has_gauss", "cached_gaussian"}
    if not isinstance(part, dict) or set(part) != keys:
        raise _corrupt("numpy", f"expected a dict with {', '.join(sorted(keys))}; got {part!r:.80}")
    if not isinstance(part["bit_generator"], str) or part["bit_generator"] != "MT19937":
        raise _corrupt("numpy", f"bit generator {part['bit_generator']!r:.60}; NumPy's global state is 'MT19937'")
    words = _words(part["key"], "numpy.key", 624)
    _check_mt19937_key(words, "numpy.key")
    for name, kind in (("pos", int), ("has_gauss", int), ("cached_gaussian", float)):
        if not isinstance(part[name], kind) or isinstance(part[name], bool):
            raise _corrupt("numpy", f"{name} is {type(part[name]).__name__}, not {kind.__name__}")
    if not 0 <= part["pos"] <= 624 or part["has_gauss"] not in (0, 1):
        raise _corrupt("numpy", f"pos {part['pos']} / has_gauss {part['has_gauss']} outside 0..624 / 0..1")
    if not math.isfinite(part["cached_gaussian"]):  # set_state takes it; the next standard_normal() returns it
        raise _corrupt("numpy", f"cached_gaussian is {part['cached_gaussian']}, not a finite float")
    if np is None:
        return ()
    state = ("MT19937", np.asarray(words, dtype=np.uint32), part["pos"], part["has_gauss"], part["cached_gaussian"])
    try:
        np.random.RandomState().set_state(state)  # dry run on a scratch generator
    except (ValueError, TypeError) as exc:
        raise _corrupt("numpy", f"RandomState.set_state refuses it: {exc}") from exc
    return state


def _plan_tensor(state: object, stream: CpuStream | DeviceStream, index: int | None, part: str) -> torch.Tensor:
    try:
        return check_state(state, stream, index, part)
    except RngStateError as exc:
        raise _corrupt(part, str(exc)) from exc


def restore(snapshot: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    """Put back the RNG streams of a :func:`snapshot`, each on its own.

    Everything is checked before anything is set. Streams that cannot apply here
    (NumPy not installed, another vendor, fewer devices, no accelerator) are skipped
    and named in ONE :class:`~accel.errors.RngRestoreWarning`; a stream that fails to
    set does not stop the others.

    Args:
        snapshot: a dict from :func:`snapshot` (also after ``torch.save``/``torch.load``).
        strict: raise instead of skipping: then nothing is set when a stream cannot apply.

    Returns:
        ``{"restored": [part names], "skipped": {part: reason}, "failed": {part: error}}``;
        parts are ``"python"``, ``"numpy"``, ``"torch_cpu"``, ``"<device type>:<index>"``.

    Raises:
        RngSnapshotVersionError: (a ``ValueError``) written by a newer accel; nothing set.
        RngSnapshotError: (a ``ValueError``) not a snapshot, or corrupted (a field of the
            wrong type, a state a generator refuses, a degenerate all-zero MT19937 key in
            the Python or NumPy part, a cached Gaussian that is NaN or inf); nothing set.
        RngRestoreError: (a ``RuntimeError``) ``strict=True`` and a stream cannot apply
            (nothing set) or failed to set (the others were set).

    .. note:: Initialises the device runtime when the snapshot holds device streams of
       the active vendor.
    """
    plan, skipped = _plan(snapshot)
    if strict and skipped:
        raise RngRestoreError(
            "accel.random.restore(strict=True): part(s) of the snapshot cannot apply here:\n"
            + "\n".join(f"  {k}: {v}" for k, v in skipped.items())
            + "\nNothing was restored. Restore on a matching machine, or pass strict=False to restore the rest."
        )
    restored: list[str] = []
    failed: dict[str, str] = {}
    for name, apply in plan:
        try:
            apply()
        except Exception as exc:  # noqa: BLE001 - one stream failing must not stop the others; reported below
            failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            restored.append(name)
    lines = [f"  {k}: skipped: {v}" for k, v in skipped.items()] + [f"  {k}: failed: {v}" for k, v in failed.items()]
    if failed and strict:
        raise RngRestoreError(
            "accel.random.restore(strict=True): part(s) failed to restore:\n" + "\n".join(lines)
            + f"\nRestored: {', '.join(restored) or 'nothing'}. Check the device, then restore again."
        )
    if lines:
        warnings.warn(
            f"accel.random.restore: {len(lines)} part(s) of the snapshot were not restored:\n" + "\n".join(lines)
            + f"\nRestored: {', '.join(restored) or 'nothing'}. Draws from the parts above will differ from the "
            f"run that made the snapshot. Pass strict=True to make this an error.",
            RngRestoreWarning,
            stacklevel=2,
        )
    return {"restored": restored, "skipped": skipped, "failed": failed}


def _plan(snap: object) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """Check the whole snapshot; return (what to set, in order) and (what to skip, why). Sets nothing."""
    fmt = snap.get("format") if isinstance(snap, dict) else None
    if not isinstance(fmt, str) or fmt != SNAPSHOT_FORMAT:  # isinstance first: a NumPy array's != is elementwise
        shown = fmt if isinstance(snap, dict) else type(snap).__name__
        raise RngSnapshotError(
            f"accel.random.restore: not an accel RNG snapshot (format: {shown!r:.80}). It takes the dict "
            f"accel.random.snapshot() returns. Pass that dict (after torch.load if it was saved). Nothing was restored."
        )
    version = snap.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _corrupt("version", f"{version!r} is not a positive int")
    if version > SNAPSHOT_VERSION:
        raise RngSnapshotVersionError(
            f"accel.random.restore: snapshot format version {version} is newer than this accel reads "
            f"(up to {SNAPSHOT_VERSION}). Nothing was restored. Upgrade accel (pip install -U accel-portability)."
        )
    required = ("vendor", "device_type", "device_count", "python", "numpy", "torch_cpu", "devices")
    missing = [k for k in required if k not in snap]
    if missing:
        raise _corrupt("keys", f"missing {', '.join(missing)}")
    vendor, devices, count = snap["vendor"], snap["devices"], snap["device_count"]
    if not isinstance(vendor, str) or not isinstance(snap["device_type"], str):
        raise _corrupt("vendor", f"vendor {vendor!r:.60} / device_type {snap['device_type']!r:.60} are not strings")
    if not isinstance(count, int) or isinstance(count, bool):
        raise _corrupt("device_count", f"{type(count).__name__} {count!r:.60} is not an int")
    if not isinstance(devices, list) or count != len(devices):
        raise _corrupt("devices", f"expected a list of {count!r} states, got {type(devices).__name__}"
                       f"{' of ' + str(len(devices)) if isinstance(devices, list) else ''}")
    for i, s in enumerate(devices):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.uint8 or s.dim() != 1 or not s.is_cpu:
            raise _corrupt(f"devices[{i}]", f"not a 1-D uint8 CPU tensor ({type(s).__name__})")

    plan: list[tuple[str, Any]] = []
    skipped: dict[str, str] = {}
    py_state = _plan_python(snap["python"])
    plan.append(("python", lambda: _pyrandom.setstate(py_state)))
    if snap["numpy"] is not None:
        np = numpy_module()
        np_state = _plan_numpy(snap["numpy"], np)
        if np is None:
            skipped["numpy"] = "NumPy is not installed here"
        else:
            plan.append(("numpy", lambda: np.random.set_state(np_state)))
    cpu_state = _plan_tensor(snap["torch_cpu"], CPU, None, "torch_cpu")
    plan.append(("torch_cpu", lambda: torch.set_rng_state(cpu_state)))

    if devices:
        here = active()
        dtype = snap["device_type"]
        names = f"{dtype}:0..{len(devices) - 1}" if len(devices) > 1 else f"{dtype}:0"
        if here is CPU:
            skipped[names] = f"{len(devices)} {vendor} device stream(s) in the snapshot; no accelerator is active here"
        elif here.name != vendor:
            skipped[names] = (f"the snapshot's streams are from vendor {vendor!r}; the active backend here is "
                              f"{here.name!r} (states of one vendor's generator do not apply to another's)")
        else:
            count = here.count()
            for i, state in enumerate(devices[:count]):
                checked = _plan_tensor(state, here, i, f"devices[{i}] ({here.label(i)})")
                plan.append((f"{here.device_type}:{i}", lambda s=checked, i=i: here.set_state(s, i)))
            if len(devices) > count:
                rest = f"{dtype}:{count}" + (f"..{len(devices) - 1}" if len(devices) - count > 1 else "")
                skipped[rest] = f"the snapshot has {len(devices)} {vendor} device stream(s); this machine has {count}"
    return plan, skipped
