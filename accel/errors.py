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
    "CompileOptionError",
    "UnsupportedFormatError",
    "QuantizationError",
    "DistributedError",
    "FeatureUnavailableError",
    "TunableFileError",
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


class CompileOptionError(AccelError, ValueError):
    """A ``torch.compile`` mode or option that the running torch does not have."""


class UnsupportedFormatError(AccelError, NotImplementedError):
    """A low-precision format (fp8, MXFP8, MXFP4, NVFP4) the device or the running torch lacks.

    ``NotImplementedError`` is a ``RuntimeError``, so ``except RuntimeError`` catches it too.
    """


class QuantizationError(AccelError, ValueError):
    """Bad input to :mod:`accel.quant`: a shape, dtype, scale layout or format name that does not fit."""


class DistributedError(AccelError, RuntimeError):
    """A c10d process group that cannot be set up as asked (backend not registered, bad rank)."""


class FeatureUnavailableError(AccelError, RuntimeError):
    """A vendor feature (TunableOp, symmetric memory, ...) asked for on a backend or torch without it."""


class TunableFileError(AccelError, FileNotFoundError):
    """A TunableOp results file that is missing or that torch rejected."""
