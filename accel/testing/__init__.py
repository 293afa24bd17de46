"""Fake vendors for tests: make this process look like ROCm gfx942 x8, XPU, MPS, ... without the hardware.

The kit patches the torch-level facts accel (and your own code) reads:
``torch.version.cuda/hip/xpu``, availability and device-count functions, device
properties and capability, and the build's arch list. It is a public test kit for
downstream projects too; real selection never consults it.

Example:
    >>> import accel
    >>> from accel.testing import fake_backend
    >>> with fake_backend("rocm", arch="gfx942:sramecc+:xnack-", device_count=8):
    ...     accel.backend().name, accel.backend().arch(), accel.device("cuda:7")
    ('rocm', 'gfx942', device(type='cuda', index=7))

.. note:: Faking only changes facts. Creating tensors on a faked device still
   fails, since no such device exists.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from accel.errors import FakeBackendError, UnknownBackendError
from accel.testing._rng import FakeGenerator, FakeRng, fake_rng
from accel.testing._standin import device_free_patches, stand_in

from accel.testing.graphs import FakeGraph, FakeGraphLog, fake_graph_capture

__all__ = ["FakeDevice", "FakeGenerator", "FakeGraph", "FakeGraphLog", "FakeRng", "VENDORS", "fake_backend",
           "fake_graph_capture", "fake_rng"]


@dataclass(frozen=True)
class FakeDevice:
    """The facts of one faked vendor setup (what :func:`fake_backend` installed)."""

    name: str
    arch: str
    device_count: int
    device_name: str
    properties: Any = field(repr=False)


#: Default facts per vendor: (arch, device name, capability or None, torch build version).
VENDORS: dict[str, dict[str, Any]] = {
    "cuda": {"arch": "sm_90", "device_name": "NVIDIA H200", "build": "13.0"},
    "rocm": {"arch": "gfx942:sramecc+:xnack-", "device_name": "AMD Instinct MI300X", "build": "7.1.0"},
    "xpu": {"arch": "pvc", "device_name": "Intel(R) Data Center GPU Max 1550", "build": "20250301"},
    "mps": {"arch": "apple-m3", "device_name": "Apple M3 Max", "build": None},
    "cpu": {"arch": "x86_64", "device_name": "cpu", "build": None},
}


#: An NVIDIA arch as torch.cuda.get_arch_list() writes it (ASCII digits; 'a'/'f' suffixes).
_SM = re.compile(r"sm_([0-9]{2,3})[af]?", re.ASCII)


def _cc_from_sm(arch: str) -> tuple[int, int]:
    m = _SM.fullmatch(arch)
    if m is None:
        raise FakeBackendError(
            f"fake_backend('cuda'): arch {arch!r} is not of the form 'sm_<major><minor>' (two or three ASCII digits, "
            f"the last one the minor version, optionally an 'a' or 'f' suffix). Pass e.g. 'sm_90', 'sm_90a', 'sm_120'."
        )
    num = m.group(1)
    return int(num[:-1]), int(num[-1])


def _check_facts(arch: object, device_count: object) -> None:
    if arch is not None and not isinstance(arch, str):
        raise FakeBackendError(
            f"fake_backend: arch={arch!r} ({type(arch).__name__}) is not a str. Pass an arch name such as 'sm_90', "
            f"'gfx942' or 'pvc', or None for the vendor's default."
        )
    if isinstance(device_count, bool) or not isinstance(device_count, int) or device_count < 0:
        raise FakeBackendError(
            f"fake_backend: device_count={device_count!r} ({type(device_count).__name__}) is not an int >= 0. "
            f"Pass the number of devices to fake, e.g. device_count=2 (0 fakes a vendor with none visible)."
        )


@contextlib.contextmanager
def fake_backend(
    name: str,
    *,
    arch: str | None = None,
    device_count: int = 1,
    device_name: str | None = None,
    arch_list: list[str] | None = None,
    total_memory: int = 80 * 2**30,
    extra_properties: dict[str, Any] | None = None,
) -> Iterator[FakeDevice]:
    """Make this process look like it has ``device_count`` devices of vendor ``name``.

    Args:
        name: ``"cuda"``, ``"rocm"``, ``"xpu"``, ``"mps"`` or ``"cpu"`` (``"cpu"``
            hides every accelerator).
        arch: ``"sm_90"``-style for cuda, a ``gcnArchName`` such as
            ``"gfx942:sramecc+:xnack-"`` for rocm, a device family for xpu/mps.
        device_count: visible devices (0 makes the vendor's probe say "no device visible").
        device_name: what the driver would call the device.
        arch_list: ``torch.cuda.get_arch_list()`` to report (default: covers ``arch``).
        total_memory: bytes reported in the device properties.
        extra_properties: more device-property attributes (``has_fp64=False`` ...).

    Yields:
        :class:`FakeDevice` with the installed facts.

    Raises:
        UnknownBackendError: ``name`` is not a built-in vendor.
        FakeBackendError: (a ``ValueError``) ``arch`` is not a str or, for cuda, not of
            the form ``"sm_<major><minor>"``; ``device_count`` is not an int >= 0.
            Nothing was patched.

    .. note:: Side effects: patches attributes of ``torch``, ``torch.version``,
       ``torch.cuda``, ``torch.xpu``, ``torch.backends.mps`` and FakeTensorMode's GPU-context
       hook until the block exits, and clears accel's detection cache on entry and exit. Each
       replaced function keeps the original's attributes (``__wrapped__``, ``__name__``, ...),
       which torch reads, e.g. when ``torch._dynamo`` is first imported inside the block.
       Without a real device of the faked type, the device-using functions torch itself calls
       once the device "is available" answer too: device 0 is current, no stream is capturing,
       ``get_rng_state``/``set_rng_state`` keep a state per faked device (:func:`fake_rng`
       fakes and logs every RNG function), and ``FakeTensorMode`` sets up no GPU context, so
       ``torch.compile(backend="aot_eager")`` and ``device="cuda"`` fake tensors work inside
       the block. Not covered there: Inductor under a faked CUDA or ROCm (it prepares CUDA
       code: pattern tables of CUDA tensors, Triton's CUDA driver), and compiled code on a
       torch build with the faked device type compiled in whose Dynamo reads the current
       stream through ``torch.accelerator`` (torch 2.13 and later).
    """
    if name not in VENDORS:
        raise UnknownBackendError(f"fake_backend: unknown vendor {name!r}. Valid: {', '.join(VENDORS)}.")
    _check_facts(arch, device_count)
    from accel._probe import clear_cache

    facts = VENDORS[name]
    arch = arch or facts["arch"]
    device_name = device_name or facts["device_name"]
    props: dict[str, Any] = {"name": device_name, "total_memory": total_memory, "multi_processor_count": 132}
    cuda_count = xpu_count = 0
    mps_ok = False
    cuda_ver = hip_ver = xpu_ver = None
    if name == "cuda":
        major, minor = _cc_from_sm(arch)
        props.update(major=major, minor=minor, gcnArchName="NVIDIA")
        cuda_count, cuda_ver = device_count, facts["build"]
        arch_list = arch_list if arch_list is not None else [arch.rstrip("af")]
    elif name == "rocm":
        # ROCm reports a capability tuple that looks like an NVIDIA one (gfx942 -> 9.4).
        props.update(major=9, minor=4, gcnArchName=arch)
        cuda_count, hip_ver = device_count, facts["build"]
        arch_list = arch_list if arch_list is not None else [arch.split(":")[0]]
    elif name == "xpu":
        props.update(has_fp64=True, driver_version="1.6", platform_name="Intel(R) oneAPI Unified Runtime over Level-Zero")
        xpu_count, xpu_ver = device_count, facts["build"]
    elif name == "mps":
        mps_ok = device_count > 0
    props.update(extra_properties or {})
    ns = SimpleNamespace(**props)

    def _props(device: Any = None) -> SimpleNamespace:
        return ns

    def _capability(device: Any = None) -> tuple[int, int]:
        return ns.major, ns.minor

    def fake(module: Any, name: str, fn: Any) -> Any:
        return mock.patch.object(module, name, stand_in(getattr(module, name, None), fn))

    patches = [
        mock.patch.object(torch.version, "cuda", cuda_ver),
        mock.patch.object(torch.version, "hip", hip_ver),
        mock.patch.object(torch.version, "xpu", xpu_ver, create=True),
        fake(torch.cuda, "device_count", lambda: cuda_count),
        fake(torch.cuda, "is_available", lambda: cuda_count > 0),
        fake(torch.cuda, "get_device_properties", _props),
        fake(torch.cuda, "get_device_capability", _capability),
        fake(torch.cuda, "get_device_name", lambda device=None: ns.name),
        fake(torch.cuda, "get_arch_list", lambda: list(arch_list or [])),
        fake(torch.xpu, "device_count", lambda: xpu_count),
        fake(torch.xpu, "is_available", lambda: xpu_count > 0),
        fake(torch.xpu, "get_device_properties", _props),
        fake(torch.backends.mps, "is_built", lambda: mps_ok),
        fake(torch.backends.mps, "is_available", lambda: mps_ok),
        *device_free_patches(cuda_count, xpu_count, FakeGenerator),
    ]
    if name == "mps":
        patches.append(mock.patch("accel.backends.mps.MpsBackend.device_name", lambda self, index=0: device_name))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        clear_cache()
        try:
            yield FakeDevice(name, arch, device_count, device_name, ns)
        finally:
            clear_cache()
