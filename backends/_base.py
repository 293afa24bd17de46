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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

__all__ = ["Backend", "Capabilities", "CompilePlan", "GemmTemplate", "PlanItem", "ProbeResult"]


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


class PlanItem(NamedTuple):
    """One Inductor setting: ``key`` (dotted, as in ``torch._inductor.config``), ``value``, ``reason``."""

    key: str
    value: Any
    reason: str


class CompilePlan(list):
    """The :class:`PlanItem` s to set (the list itself) plus :attr:`skipped` decisions with reasons.

    Attributes:
        skipped: items considered but not set (``value`` is what would have been set).
    """

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[PlanItem] = []

    @property
    def options(self) -> dict[str, Any]:
        """The items as a ``{key: value}`` dict for ``torch.compile(options=...)``."""
        return {item.key: item.value for item in self}

    def propose(self, key: str, value: Any, reason: str, user_options: dict[str, Any]) -> None:
        """Plan ``key = value`` unless the running torch lacks the key or the user set it."""
        from accel import _compat

        if not _compat.inductor_config_has(key):
            self.skip(key, value, f"the running torch has no Inductor config key {key!r} ({reason})")
        elif key in user_options:
            self.skip(key, value, f"you set {key}={user_options[key]!r}; yours wins (accel would: {reason})")
        else:
            self.append(PlanItem(key, value, reason))

    def skip(self, key: str, value: Any, reason: str) -> None:
        """Record a decision not taken."""
        self.skipped.append(PlanItem(key, value, reason))


@dataclass(frozen=True)
class GemmTemplate:
    """A GEMM template family Inductor adds under max-autotune (vendor facts as data).

    Attributes:
        token: its name in ``max_autotune_gemm_backends`` (``"NVGEMM"``, ``"CK"``).
        description: one line saying what it is.
        config_key: an Inductor config key that exists exactly when the running torch
            has this backend (``"nvgemm_max_profiling_configs"``).
        package: what provides it (for the reason text), e.g. ``"nvidia-cutlass-dsl"``.
        install: how to install it (``"pip install nvidia-cutlass-dsl"``).
        available: name of the :mod:`accel._compat` function that says whether torch finds it.
        arch_ok: ``arch -> (ok, reason)``.
    """

    token: str
    description: str
    config_key: str
    package: str
    install: str
    available: str
    arch_ok: Callable[[str], tuple[bool, str]]


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
        block_scale_swizzle: ``torch.nn.functional.SwizzleType`` name of the layout this
            vendor's block-scaled GEMM wants its MX/NVFP4 scales in (``None``: unknown).
        priority: higher wins when several backends are available.
    """

    name: ClassVar[str]
    vendor: ClassVar[str]
    torch_device_type: ClassVar[str]
    dispatch_key: ClassVar[str]
    visible_devices_env: ClassVar[tuple[str, ...]] = ()
    distributed_backend: ClassVar[str] = "gloo"
    #: newer c10d backends preferred over ``distributed_backend`` where the running torch registers them.
    newer_distributed_backends: ClassVar[tuple[str, ...]] = ()
    block_scale_swizzle: ClassVar[str | None] = None
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

    # -- compile options (shared logic; vendor facts are the data in gemm_templates) ----
    #: GEMM template families Inductor may add under max-autotune on this vendor.
    gemm_templates: ClassVar[tuple[GemmTemplate, ...]] = ()

    def compile_plan(self, *, mode: str | None = None, options: dict[str, Any] | None = None,
                     index: int = 0) -> CompilePlan:
        """What ``torch.compile`` should additionally be told on this vendor, arch and torch, and why.

        Every key is checked against ``torch._inductor.config`` of the running torch
        before it is planned; a key the user already set in ``options`` is left to
        the user (the decision moves to :attr:`CompilePlan.skipped`).

        Args:
            mode: a ``torch.compile`` mode (``None`` = ``"default"``, ``"max-autotune"``, ...).
            options: the user's explicit Inductor options; they always win.
            index: the device whose arch decides.

        Returns:
            A :class:`CompilePlan`: the ``(key, value, reason)`` items to set, plus the
            decisions not taken with their reasons.

        Raises:
            CompileOptionError: ``mode`` is not a mode of the running torch; ``options``
                is not ``None`` or a dict with ``str`` keys.

        .. note:: Imports ``torch._inductor`` and reads the device arch (initialises
           the device runtime on real hardware).
        """
        from collections.abc import Mapping

        from accel import _compat
        from accel.errors import CompileOptionError

        if options is not None and not isinstance(options, Mapping):
            raise CompileOptionError(
                f"compile plan: options is {type(options).__name__} {options!r:.60}, not a dict. options maps "
                f"Inductor option names to values, as torch.compile(options=...) takes. Pass a dict or None."
            )
        bad_key = next((k for k in options or {} if not isinstance(k, str)), None)
        if bad_key is not None:
            raise CompileOptionError(
                f"compile plan: options has key {bad_key!r} ({type(bad_key).__name__}); Inductor option names are "
                f"str (torch._inductor.config attributes). Pass e.g. {{'max_autotune': True}}."
            )
        options = dict(options or {})
        try:
            mode_opts = _compat.inductor_mode_options(mode)
        except RuntimeError as exc:
            raise CompileOptionError(
                f"compile plan: unknown torch.compile mode {mode!r} ({exc}). Use one of the modes the running "
                f"torch lists in torch._inductor.list_mode_options(), or None."
            ) from exc
        plan = CompilePlan()
        autotune = bool(options.get("max_autotune", mode_opts.get("max_autotune", False))
                        or options.get("max_autotune_gemm", False))
        if self.gemm_templates:
            arch = self.arch(index)
            tokens = [t.token for t in self.gemm_templates if self._template_ok(t, arch, autotune, mode, plan)]
            if tokens:
                key = "max_autotune_gemm_backends"
                base = str(options.get(key, _compat.inductor_config_get(key)))
                have = [x.strip().upper() for x in base.split(",") if x.strip()]
                added = [t for t in tokens if t not in have]
                value = ",".join(have + added)
                why = f"add {', '.join(added)} to the GEMM autotuning candidates on {arch} (" + "; ".join(
                    t.description for t in self.gemm_templates if t.token in added) + ")"
                if added:
                    plan.propose(key, value, why, options)
        self._vendor_plan(plan, mode_opts=mode_opts, options=options, autotune=autotune, index=index)
        return plan

    @staticmethod
    def _template_ok(t: GemmTemplate, arch: str, autotune: bool, mode: str | None, plan: CompilePlan) -> bool:
        from accel import _compat

        def skip(reason: str) -> bool:
            plan.skip("max_autotune_gemm_backends", t.token, reason)
            return False

        if not autotune:
            return skip(f"{t.token} is only used while autotuning GEMMs (mode={mode!r} does not autotune; "
                        "use mode='max-autotune' or 'max-autotune-no-cudagraphs')")
        if not _compat.inductor_config_has(t.config_key):
            return skip(f"the running torch has no {t.token} GEMM backend (no Inductor config key {t.config_key!r})")
        ok, why = t.arch_ok(arch)
        if not ok:
            return skip(f"{t.token} does not serve {arch}: {why}")
        if not getattr(_compat, t.available)():
            return skip(f"{t.token} needs {t.package}, which the running torch cannot find: {t.install}")
        return True

    def _vendor_plan(self, plan: CompilePlan, *, mode_opts: dict[str, Any], options: dict[str, Any],
                     autotune: bool, index: int) -> None:
        """Hook for a vendor's decisions that are not GEMM template families (none by default)."""

    def flex_attention_kernel_options(self, seq_len: int, *, head_dim: int, dtype: torch.dtype,
                                      index: int = 0) -> dict[str, int]:
        """``kernel_options`` for ``flex_attention`` at this shape; ``{}`` (Inductor decides) by default."""
        return {}

    def graph_class(self) -> tuple[str, type] | None:
        """The graph class :mod:`accel.graphs` captures with here, as ``(qualified name, class)``.

        ``None`` where the running torch has no graph capture for this vendor (MPS, CPU,
        an XPU build without ``torch.xpu.XPUGraph``). Never initialises a device.
        """
        from accel import _compat

        return _compat.graph_class(self.torch_device_type)

    def compile_options(self, *, mode: str | None = None) -> dict[str, Any]:
        """The Inductor options :meth:`compile_plan` would set for ``mode`` (``{key: value}``)."""
        return self.compile_plan(mode=mode).options

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
