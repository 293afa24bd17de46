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
    "KernelRegistrationError",
    "KernelUnavailableError",
    "UnknownKernelError",
    "AccelWarning",
    "KernelFallbackWarning",
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


class KernelRegistrationError(AccelError, ValueError):
    """A kernel override that cannot be registered (unknown op, backend or name; no ATen kernel to fall back to)."""


class KernelUnavailableError(AccelError, RuntimeError):
    """A built-in kernel whose DSL runtime or hardware is missing in this process; the message says which."""


class UnknownKernelError(AccelError, LookupError):
    """A kernel registration name or ATen op that accel does not know."""


class AccelWarning(UserWarning):
    """Base class of every warning accel emits."""


class KernelFallbackWarning(AccelWarning):
    """A routed kernel raised or disagreed with ATen; ATen's result was used and that shape now runs ATen."""
