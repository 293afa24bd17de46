"""Shared logic of every vendor backend.

A backend is the vendor's facts as class attributes plus a few hooks. Vendor
modules (``cuda.py``, ``rocm.py``, ...) only state facts and the one or two
decisions that really differ; everything else lives here, once.

Facts are read from torch at the torch level (``torch.version.*``, availability
functions, device properties), which is exactly what :mod:`accel.testing` fakes.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

__all__ = ["Backend", "Capabilities", "ProbeResult"]


@dataclass(frozen=True)
class ProbeResult:
    """The answer of one backend's probe.

    Attributes:
        backend: backend name (``"cuda"``, ``"rocm"``, ...).
        available: whether the backend can be used in this process.
        reason: one line saying why (always set, also when available).
        device_count: number of visible devices (0 when unavailable).
    """

    backend: str
    available: bool
    reason: str
    device_count: int = 0


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


class Backend:
    """One vendor: facts as class attributes, hooks as methods.

    Subclasses set the class attributes and implement :meth:`_probe`,
    :meth:`_device_count`, :meth:`arch` and :meth:`capabilities`.
    Out-of-tree backends subclass this and register through the entry-point
    group ``accel.backends``.

    Attributes:
        name: backend name; also the pytest marker, tox env and ``ACCEL_DEVICE`` value.
        vendor: the hardware vendor (``"NVIDIA"``, ``"AMD"``, ``"Intel"``, ``"Apple"``, ...).
        torch_device_type: the torch device type (``"cuda"`` for ROCm too).
        dispatch_key: the ATen dispatch key kernels register at.
        visible_devices_env: environment variables that restrict visible devices.
        distributed_backend: the c10d backend name.
        priority: higher wins when several backends are available.
    """

    name: ClassVar[str]
    vendor: ClassVar[str]
    torch_device_type: ClassVar[str]
    dispatch_key: ClassVar[str]
    visible_devices_env: ClassVar[tuple[str, ...]] = ()
    distributed_backend: ClassVar[str] = "gloo"
    priority: ClassVar[int] = 0

    # -- probing -----------------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """Say whether this backend is usable here, and why. Stateless; never raises.

        .. note:: Does not initialise any device runtime (CUDA counts devices
           through NVML where it can, which does not poison ``fork``).
        """
        try:
            why_not = cls._unavailable_reason()
            if why_not:
                return ProbeResult(cls.name, False, why_not, 0)
            count = cls._device_count()
        except (RuntimeError, OSError, AttributeError, ImportError) as exc:
            return ProbeResult(cls.name, False, f"probe failed: {type(exc).__name__}: {exc}", 0)
        if count <= 0:
            env = ", ".join(f"{k}={os.environ[k]!r}" for k in cls.visible_devices_env if k in os.environ)
            return ProbeResult(cls.name, False, f"no device visible (device_count()={count}{'; ' + env if env else ''})", 0)
        return ProbeResult(cls.name, True, cls._available_reason(count), count)

    @classmethod
    def _unavailable_reason(cls) -> str | None:
        """A reason this backend cannot work in this build, or ``None``."""
        raise NotImplementedError

    @classmethod
    def _device_count(cls) -> int:
        """Visible devices, counted without initialising the runtime."""
        raise NotImplementedError

    @classmethod
    def _available_reason(cls, count: int) -> str:
        return f"{count} device(s) visible"

    # -- per-device facts -----------------------------------------------------------
    def arch(self, index: int = 0, /) -> str:
        """The device's architecture name (``sm_90``, ``gfx942``, ``pvc``, ``apple-m3``, ``x86_64``)."""
        raise NotImplementedError

    def capabilities(self, index: int = 0, /) -> Capabilities:
        """The device's :class:`Capabilities` (feature flags)."""
        raise NotImplementedError

    def device_name(self, index: int = 0, /) -> str:
        """The marketing name of the device, as the driver reports it."""
        return self.name

    def arch_supported(self, index: int = 0, /) -> tuple[bool, str]:
        """Whether the installed torch build has kernels for this device, and why."""
        return True, "no per-arch kernels in this build"

    def compile_options(self, *, mode: str | None = None) -> dict[str, Any]:
        """Inductor settings that serve this vendor; empty by default."""
        return {}

    def graph_class(self) -> tuple[str, type] | None:
        """The graph class :mod:`accel.graphs` captures with here, as ``(qualified name, class)``.

        ``None`` where the running torch has no graph capture for this vendor (MPS, CPU,
        an XPU build without ``torch.xpu.XPUGraph``). Never initialises a device.
        """
        from accel import _compat

        return _compat.graph_class(self.torch_device_type)

    def device(self, index: int | None = None, /) -> torch.device:
        """A ``torch.device`` of this backend (``index=None`` means the current device)."""
        return torch.device(self.torch_device_type, index) if index is not None else torch.device(self.torch_device_type)

    def device_count(self) -> int:
        """Visible devices; 0 when unavailable. Does not initialise the runtime."""
        return self.probe().device_count

    def __repr__(self) -> str:
        return f"<accel backend {self.name!r} ({self.vendor}, torch device type {self.torch_device_type!r})>"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))



class TorchCudaDevices:
    """Facts both CUDA and ROCm read through ``torch.cuda`` (ROCm builds reuse it)."""

    @classmethod
    def _device_count(cls) -> int:
        # torch.cuda.device_count() asks NVML / amd-smi first and only falls back
        # to cudaGetDeviceCount when those fail; it never runs torch's lazy init.
        return int(torch.cuda.device_count())

    def _properties(self, index: int) -> Any:
        return torch.cuda.get_device_properties(index)

    def device_name(self, index: int = 0, /) -> str:
        """The device name the driver reports.

        .. note:: Initialises the CUDA/HIP runtime (``torch.cuda.get_device_properties``).
        """
        return str(self._properties(index).name)
