"""What a backend answers with: its probe result, a device's feature flags and kernel limits, dtype names.

Vendor facts as data, shared by every vendor module, and the trivial runtime functions of a
backend with one device (the CPU, MPS). Nothing here reads torch's runtime state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    """The answer of one backend's probe.

    Attributes:
        backend: backend name (``"cuda"``, ``"rocm"``, ...).
        available: whether the backend can be used in this process.
        reason: one line saying why (always set, also when available).
        device_count: number of visible devices (0 when unavailable).
        hidden_by: ``(variable, value)`` of each visible-devices variable that was set when the
            torch build serves this backend but it sees no device: the variables hide them all
            (``CUDA_VISIBLE_DEVICES=""`` or ``"-1"``). Empty otherwise.
    """

    backend: str
    available: bool
    reason: str
    device_count: int = 0
    hidden_by: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Capabilities:
    """Feature flags of one device. Never compare compute capabilities across vendors.

    Attributes:
        dtypes: names of the floating dtypes the device computes with natively
            (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``, ...).
        fp8: fp8 flavour: ``"ocp"`` (``float8_e4m3fn``/``float8_e5m2``),
            ``"fnuz"`` (``float8_e4m3fnuz``/``float8_e5m2fnuz``, AMD gfx942) or ``None``.
        mxfp8, mxfp4: OCP microscaling formats (block 32, e8m0 scales) in hardware.
        nvfp4: NVIDIA FP4 (block 16, e4m3 scales), Blackwell and later.
        float64: float64 supported (False on MPS).
        graph_capture: the device's graph capture (CUDA/HIP/XPU graphs) is usable.
        symmetric_memory: torch symmetric memory can be used.
        flex_attention: ``torch.nn.attention.flex_attention`` compiles for it.
        grouped_gemm: ``torch._grouped_mm`` has a kernel for it.
        tunable_op: ``torch.cuda.tunable`` (TunableOp) applies.
        memory_telemetry: allocator statistics are tracked.
    """

    dtypes: tuple[str, ...]
    fp8: str | None = None
    mxfp8: bool = False
    mxfp4: bool = False
    nvfp4: bool = False
    float64: bool = True
    graph_capture: bool = False
    symmetric_memory: bool = False
    flex_attention: bool = False
    grouped_gemm: bool = False
    tunable_op: bool = False
    memory_telemetry: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The flags as a JSON-ready dict."""
        d = dataclasses.asdict(self)
        d["dtypes"] = list(self.dtypes)
        return d


@dataclass(frozen=True)
class KernelLimits:
    """What a hand-written kernel's launch config must respect on one device (the vendor's facts).

    Attributes:
        arch: the tuning-table arch key (``sm_90``, ``gfx942``, ``gfx1100``, ``pvc``, ...).
        family: the config family: ``"nvidia"``, ``"cdna"`` (AMD wave64), ``"rdna"`` (AMD wave32),
            ``"xe"`` (Intel), ``"host"`` (CPU, MPS, interpreter runs). A Triton ``num_warps`` measured
            for one family is not assumed for another (:func:`accel.kernels.dsl.triton_configs.for_device`).
        wave_size: threads per warp / wavefront / sub-group (32 NVIDIA, 64 CDNA, 32 RDNA, 32 Intel
            Triton's default; 1 on the host).
        shared_memory: bytes of shared memory / LDS one block (work-group) may use, or ``None`` where
            unknown.
        fp8: fp8 flavour for kernels that take fp8 (``"ocp"``, ``"fnuz"`` on gfx942, ``None``).
        source: where the numbers come from (device properties, or the vendor document of the table).
        cache_bytes: the last-level cache the device properties report, bytes (``None``: not reported);
            the benchmark flushes twice this before each timed rep.
    """

    arch: str
    family: str
    wave_size: int
    shared_memory: int | None
    fp8: str | None
    source: str
    cache_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The limits as a JSON-ready dict."""
        return dataclasses.asdict(self)


_FP8_DTYPES = {
    "ocp": ("float8_e4m3fn", "float8_e5m2"),
    "fnuz": ("float8_e4m3fnuz", "float8_e5m2fnuz"),
    None: (),
}


def dtypes_for(*, bf16: bool = True, float64: bool = True, fp8: str | None = None) -> tuple[str, ...]:
    """The dtype names of a device with these features (shared by every vendor)."""
    names = ["float16", "float32"]
    if bf16:
        names.insert(0, "bfloat16")
    if float64:
        names.append("float64")
    return tuple(names) + _FP8_DTYPES[fp8]


#: The telemetry queries a device module may have, each ``query(index)`` (see :class:`accel.memory.Telemetry`).
TELEMETRY_QUERIES = ("device_memory_used", "utilization", "power_draw", "clock_rate", "temperature")

_DEVICE_COUNT_DOC = ("Visible devices of the active backend: ``1`` on the CPU and MPS, else the backend's count "
                     "(from its probe: never initialises a device). Takes no argument, as torch's.")
_CURRENT_INDEX_DOC = "Index of the current device of the active backend: always ``0`` on the CPU and MPS (one device)."


def constant(value: int, name: str, doc: str) -> Callable[[], int]:
    """A function of no arguments returning ``value``, named and documented as the public ``accel.<name>``
    that calls it on this backend (what a traceback through it names)."""

    def constant() -> int:
        return value

    constant.__name__ = constant.__qualname__ = name
    constant.__module__ = "accel"
    constant.__doc__ = doc
    return constant


def always_true() -> bool:
    """``True`` (``is_initialized`` of a device without lazy initialisation)."""
    return True


def always_false() -> bool:
    """``False`` (``is_initialized`` of a device that is never initialised)."""
    return False


def no_op(*_args: object) -> None:
    """Does nothing (the operation has no effect on this backend)."""


def one_device_runtime(count: int) -> dict[str, Callable[..., Any]]:
    """The index functions of a backend with a single device (index 0) and no current-device switch."""
    return {
        "device_count": constant(count, "device_count", _DEVICE_COUNT_DOC),
        "current": constant(0, "current_device_index", _CURRENT_INDEX_DOC),
        "set_device": no_op,
    }
