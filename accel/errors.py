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
    "FakeBackendError",
    "BackendUnavailableError",
    "DeviceIndexError",
    "DeviceMismatchError",
    "InvalidDeviceError",
    "RngStateError",
    "SeedError",
    "RngUnsupportedError",
    "RngSnapshotError",
    "RngSnapshotVersionError",
    "RngRestoreError",
    "RngRestoreWarning",
    "GraphCaptureUnsupported",
    "GraphCaptureError",
    "GraphInputError",
    "GraphStateError",
    "GraphFallbackWarning",
    "InvalidEventError",
    "InvalidStreamError",
    "UnsupportedOperationError",
    "CompileOptionError",
    "UnsupportedFormatError",
    "QuantizationError",
    "NonFiniteInputError",
    "DistributedError",
    "LocalRankError",
    "FeatureUnavailableError",
    "TunableFileError",
    "KernelRegistrationError",
    "TuningTableError",
    "KernelUnavailableError",
    "UnknownKernelError",
    "BenchArgumentError",
    "LossInputError",
    "TargetRangeError",
    "AccelWarning",
    "KernelFallbackWarning",
    "KernelRegistrationWarning",
    "TuningTableWarning",
    "HiddenDevicesWarning",
    "IntegrationWarning",
]


class AccelError(Exception):
    """Base class of every error raised by accel."""


class UnknownBackendError(AccelError, ValueError):
    """A backend or device name that accel does not know (``"cdua"``)."""


class FakeBackendError(AccelError, ValueError):
    """:func:`accel.testing.fake_backend` facts that describe no device: an arch not of the vendor's form
    (``"sm_9"``), a ``device_count`` that is not an int >= 0."""


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


class RngStateError(AccelError, ValueError):
    """An RNG state a generator cannot take: not a tensor, wrong dtype, wrong size, on a device, other vendor."""


class SeedError(AccelError, ValueError):
    """A seed that is not an integer, or outside ``-2**63 .. 2**64 - 1``."""


class RngUnsupportedError(AccelError, RuntimeError):
    """An RNG operation this device's generator does not have (Philox seed/offset on the CPU's mt19937)."""


class RngSnapshotError(AccelError, ValueError):
    """Not an :func:`accel.random.snapshot`, or a corrupted one. Nothing was restored."""


class RngSnapshotVersionError(RngSnapshotError):
    """A snapshot written by a newer accel (a format version this accel does not know). Nothing was restored."""


class RngRestoreError(AccelError, RuntimeError):
    """``restore(..., strict=True)``: a part of the snapshot cannot apply here, or failed to apply."""


class RngRestoreWarning(UserWarning):
    """``restore()`` skipped parts of a snapshot that cannot apply here (one warning lists them all)."""
class GraphCaptureUnsupported(AccelError, RuntimeError):
    """Graph capture was required (``strict=True``, or :class:`accel.graphs.Graph`) where there is none.

    MPS and CPU have no graph capture; nor does a torch build without a graph class
    for its device (an XPU build without ``torch.xpu.XPUGraph``).
    """


class GraphCaptureError(AccelError, RuntimeError):
    """A graph capture was aborted: the captured code ran an operation a graph cannot hold.

    Host synchronisations (``.item()``, ``.cpu()``), host-to-device copies from pageable
    memory, data-dependent shapes. When raised, the capture has been closed, its memory
    pool released and the previous current stream restored: the device is usable.
    """


class GraphInputError(AccelError, ValueError):
    """Arguments that do not match what a graph was captured with (count, shape, dtype, device)."""


class GraphStateError(AccelError, RuntimeError):
    """A graph used out of order: replayed before a capture, or captured twice."""


class GraphFallbackWarning(UserWarning):
    """:func:`accel.graphs.graphed` runs the function eagerly instead of replaying a graph (said once per reason)."""
class InvalidStreamError(AccelError, TypeError):
    """Something that is not a stream where one is required (``accel.set_stream(3)``)."""


class InvalidEventError(AccelError, TypeError):
    """Something that is not an event where one is required (``accel.elapsed_time(0, 1)``)."""


class UnsupportedOperationError(AccelError, RuntimeError):
    """The active backend has no such operation (event timing on the CPU)."""
class CompileOptionError(AccelError, ValueError):
    """A ``torch.compile`` mode or option that the running torch does not have."""


class UnsupportedFormatError(AccelError, NotImplementedError):
    """A low-precision format (fp8, MXFP8, MXFP4, NVFP4) the device or the running torch lacks.

    ``NotImplementedError`` is a ``RuntimeError``, so ``except RuntimeError`` catches it too.
    """


class QuantizationError(AccelError, ValueError):
    """Bad input to :mod:`accel.quant`: a shape, dtype, scale layout or format name that does not fit."""


class NonFiniteInputError(QuantizationError):
    """:func:`accel.quant.quantize` of a tensor holding ``inf`` or ``NaN``: its scale would be ``inf`` (every
    value dequantizes to NaN) or would ignore the NaN and clip the rest. Nothing was quantized.
    ``nonfinite="saturate"`` stores ``±inf`` as the format's largest magnitude instead; ``NaN`` is refused
    either way."""


class DistributedError(AccelError, RuntimeError):
    """A c10d process group that cannot be set up as asked (backend not registered, bad rank)."""


class LocalRankError(DistributedError, ValueError):
    """A local rank (``local_rank=`` or ``LOCAL_RANK``) that is not a non-negative integer."""


class FeatureUnavailableError(AccelError, RuntimeError):
    """A vendor feature (TunableOp, symmetric memory, ...) asked for on a backend or torch without it."""


class TunableFileError(AccelError, FileNotFoundError):
    """A TunableOp results file that is missing or that torch rejected."""
class KernelRegistrationError(AccelError, ValueError):
    """A kernel override that cannot be registered (unknown op, backend or name; no ATen kernel to fall back to)."""


class TuningTableError(KernelRegistrationError):
    """A tuning-table file or entry accel cannot use: not a format-1 table, an unknown key (``"imp"``), a missing
    one, or an op, dtype or impl it does not know; the message names it and the closest valid names."""


class KernelUnavailableError(AccelError, RuntimeError):
    """A built-in kernel whose DSL runtime or hardware is missing in this process; the message says which."""


class UnknownKernelError(AccelError, LookupError):
    """A kernel registration name or ATen op that accel does not know."""


class BenchArgumentError(AccelError, ValueError):
    """An ``accel bench`` / ``accel bench --tune`` option that is malformed or out of range."""


class LossInputError(AccelError, ValueError, RuntimeError):
    """Input that :mod:`accel.nn`'s losses cannot take (``linear_cross_entropy``): a shape, dtype, device or
    option that does not fit, raised before any kernel runs. Also a ``RuntimeError``: torch raises that type
    for the same input, so ``except RuntimeError`` written for torch's own function catches it too."""


class TargetRangeError(LossInputError, IndexError):
    """A class-index target outside ``[0, C)`` that is not ``ignore_index`` (an ``IndexError``, as torch's
    ``cross_entropy`` raises for it)."""


class AccelWarning(UserWarning):
    """Base class of every warning accel emits."""


class KernelFallbackWarning(AccelWarning):
    """A routed kernel raised or disagreed with ATen; ATen's result was used and that shape now runs ATen."""


class TuningTableWarning(KernelFallbackWarning):
    """A user tuning table refused and ignored as a whole (said once per file and reason): unreadable, of
    another schema, or made for another machine (another arch, another release of a DSL it
    names) or contradicting itself (an entry naming a kernel accel does not have, a floor below one element,
    two entries for one bucket that disagree). The message names the file and why; the shipped table (or ATen)
    routes instead. A :class:`KernelFallbackWarning`, which this warning was before it had its own class."""


class KernelRegistrationWarning(AccelWarning):
    """A kernel registered as asked that leaves something unusable: a forward override whose backward has no
    kernel at that dispatch key (inference works, training through the op fails)."""


class IntegrationWarning(AccelWarning):
    """A patched model's module ran the model's own code for a reason its user can change (e.g. the LM head's
    weight is a sharded ``DTensor`` when the fused loss reads it); said once per process and reason."""


class HiddenDevicesWarning(AccelWarning):
    """The default selection fell back to the CPU (or another backend) because the visible-devices variables
    (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``) hide every
    device of an accelerator build of torch. The message names the variables and their values."""
