"""The one error hierarchy of accel.

Every error accel raises on a user or environment path is an :class:`AccelError`
and also subclasses the matching built-in (``ValueError``, ``RuntimeError``,
``TypeError``), so ``except ValueError`` keeps working in user code.

Message form: *what failed: observed values. The constraint. What to do.*
"""

from __future__ import annotations

__all__ = [
    "AccelError",
    "UnknownBackendError",
    "BackendUnavailableError",
    "DeviceIndexError",
    "DeviceMismatchError",
    "InvalidDeviceError",
    "InvalidEventError",
    "InvalidStreamError",
    "UnsupportedOperationError",
]


class AccelError(Exception):
    """Base class of every error raised by accel."""


class UnknownBackendError(AccelError, ValueError):
    """A backend or device name that accel does not know (``"cdua"``)."""


class BackendUnavailableError(AccelError, RuntimeError):
    """A known backend was asked for but is not usable in this process.

    The message lists every probe and its reason.
    """


class DeviceIndexError(AccelError, ValueError):
    """A device index outside ``0 .. device_count - 1``."""


class DeviceMismatchError(AccelError, ValueError):
    """A device of another vendor than the active backend (``"xpu:0"`` while CUDA is active)."""


class InvalidDeviceError(AccelError, TypeError):
    """Something that is not a device spec (not a ``str``, ``int``, ``torch.device`` or ``None``)."""


class InvalidStreamError(AccelError, TypeError):
    """Something that is not a stream where one is required (``accel.set_stream(3)``)."""


class InvalidEventError(AccelError, TypeError):
    """Something that is not an event where one is required (``accel.elapsed_time(0, 1)``)."""


class UnsupportedOperationError(AccelError, RuntimeError):
    """The active backend has no such operation (event timing on the CPU)."""
