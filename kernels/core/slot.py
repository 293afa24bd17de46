"""A slot: every override of one op at one dispatch key, and the protocol of the paths that install it.

A slot is installed by one of two paths, each a module implementing :class:`InstallPath`:
:mod:`.native` (torch's own native DSL registry, so ``torch.backends.python_native`` switches
accel's kernels like upstream ones) or :mod:`.router` (accel's ``torch.library`` router).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch

from .op import Op
from .override import Override
from .state import LOCK

__all__ = ["SLOTS", "Inside", "InstallPath", "Slot", "dispatch_key", "live_slot"]


class InstallPath(Protocol):
    """What :mod:`.registry` asks of an install path (module-level functions of :mod:`.router` and :mod:`.native`)."""

    NAME: str

    def serves(self, op: Op, key: str, has_aten_kernel: bool) -> bool:
        """Whether this path can install overrides of ``op`` at ``key`` in the running torch."""

    def add(self, slot: Slot, ov: Override) -> None:
        """Prepare ``ov`` in ``slot`` (not yet live)."""

    def remove(self, slot: Slot, ov: Override) -> None:
        """Forget ``ov`` in ``slot`` (the next :meth:`install` drops it)."""

    def install(self, slot: Slot, live: tuple[Override, ...]) -> None:
        """(Re)install ``slot`` so that ``live`` answer in order; none: ATen's kernel alone."""

    def release(self, slot: Slot) -> None:
        """``slot`` has no registration left: drop what the path still holds."""

    def inactive_reason(self, slot: Slot, ov: Override) -> str | None:
        """Why ``ov`` is not running at ``slot`` beyond accel's own filters, or ``None``."""


# ---------------------------------------------------------------------- slots
class Inside(threading.local):
    """Per-thread flag; the class default makes the read cheap in threads that never set it
    (``getattr(local, name, default)`` on a missing name costs ~0.4 us: it raises internally)."""

    on = False


class Slot:
    """Every override of one op at one dispatch key, and the path that installs them."""

    def __init__(self, op: Op, key: str, path: Any) -> None:
        self.op, self.key, self.path = op, key, path
        self.keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
        self.original: Any = None  # the ATen kernel (SafeKernelFunction) under the override, or None
        self.fallback: Callable | None = None  # where ATen has no kernel at this key
        self.live: tuple[Override, ...] = ()
        self.installed = False  # the path installed this slot once (ATen's kernel captured)
        self.composite_only = False  # ATen has only a composite of the op at this key (set at creation)
        self.state: Any = None  # the path's own bookkeeping
        self.top: str | None = None  # the router path: repr of the key's kernel right after installing (its own)
        #: the router path, for an op of accel's own namespace: the installed router itself, called from Python
        #: by :func:`accel.kernels.core.autograd.below_autograd` without the dispatcher's hop; else ``None``
        self.direct: Callable | None = None
        #: Re-entrancy guard per thread: while an impl of this slot runs, a call of the same op from
        #: inside it (an impl handing a case back to ATen) skips accel's overrides: no infinite recursion.
        self.inside = Inside()

    def run_guarded(self, ov: Override, args: tuple, kwargs: dict, fn: Callable | None = None) -> Any:
        """``ov.run`` with :attr:`inside` set for its duration."""
        inside = self.inside
        inside.on = True
        try:
            return ov.run(args, kwargs, self.call_aten, fn)
        finally:
            inside.on = False

    def reentered(self) -> bool:
        """Whether this thread is inside one of this slot's impls."""
        return self.inside.on

    def call_aten(self, *args: Any, **kwargs: Any) -> Any:
        """The ATen result, bypassing every override at this key."""
        if self.original is not None:
            try:
                return self.original.call_boxed(self.keyset, *args, **kwargs)
            except RuntimeError as exc:
                return self.after_invalidated(exc).call_boxed(self.keyset, *args, **kwargs)
        return self.fallback(*args, **kwargs)

    def after_invalidated(self, exc: RuntimeError) -> Any:
        """The kernel to call instead of a captured one whose library was destroyed since (``exc`` says
        it was invalidated): the slot is reinstalled, capturing the kernel now under it. Re-raises
        ``exc`` for every other error of the kernel."""
        if "invalidated" not in str(exc) or self.original is None:
            raise exc
        with LOCK:
            self.path.install(self, self.live)
        if self.original is None:
            raise exc
        return self.original


#: ``(op qualname, dispatch key)`` -> its slot, while any override of the op is registered at the key.
SLOTS: dict[tuple[str, str], Slot] = {}


#: device type -> its dispatch key (``None``: no accel backend runs it, e.g. meta), filled on first use.
_KEYS: dict[str, str | None] = {}


def dispatch_key(device_type: str) -> str | None:
    """The dispatch key of accel's backend for ``device_type`` (``"cuda"`` -> ``"CUDA"``), or ``None`` where no
    accel backend runs it; looked up once per device type (the lookup reads entry points)."""
    key = _KEYS.get(device_type, "")
    if key == "":
        from accel.backends import dispatch_key_for_device_type
        from accel.errors import UnknownBackendError

        try:
            key = dispatch_key_for_device_type(device_type)
        except UnknownBackendError:
            key = None
        _KEYS[device_type] = key
    return key


def live_slot(qualname: str, device_type: str) -> Slot | None:
    """The slot of op ``qualname`` at ``device_type``'s dispatch key where it has a live override, else ``None``
    (no accel backend for the device type, no registration there, or all of them off). For an op's own code
    that picks a faster variant of a call only where a registered kernel would answer it."""
    key = dispatch_key(device_type)
    slot = SLOTS.get((qualname, key)) if key is not None else None
    return slot if slot is not None and slot.live else None
