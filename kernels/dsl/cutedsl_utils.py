"""What accel's CuTeDSL kernels share on the host, without importing CuTeDSL: availability, the arch
check, the calling convention of a compiled kernel (:class:`Kernel`: stream, device guard, TVM-FFI).

The kernels themselves (``kernels/ops/*/cutedsl_kernel.py``) share :mod:`.cute_lang`,
which imports CuTeDSL (``cutlass``, from ``nvidia-cutlass-dsl``).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Any

import torch
from packaging.version import Version

from accel._caches import detection_cache
from accel._compat import checked_version, module_version
from .launch import arch

__all__ = ["COMPILE_LOCK", "DISTRIBUTION", "ITEMSIZE", "MAX_NUMEL", "MIN_ARCH", "MIN_VERSION", "Kernel", "available", "arch_reason",
           "availability_note", "ffi_reason", "launch", "tuned", "vector_elements"]

#: The package that provides CuTeDSL (``import cutlass``).
DISTRIBUTION = "nvidia-cutlass-dsl"
#: Oldest nvidia-cutlass-dsl the kernels are checked with (compiled on CPU in tox ``torch214``, run on the H200).
MIN_VERSION = Version("4.8.1")
#: Oldest arch with thread-block clusters and ``cp.async`` (CUDA C++ Programming Guide, "Thread Block Clusters").
MIN_ARCH = 90
#: Most elements a CuTeDSL kernel takes: the kernels index rows with 32-bit offsets.
MAX_NUMEL = 2**31 - 1
#: Bytes per element of the dtype names the tuning table uses.
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
#: Held around every ``cute.compile``: two at once in one process break CuTeDSL's compiler session ("Please
#: start a session before accessing session data", or an abort), e.g. two threads' first backward calls.
COMPILE_LOCK = threading.RLock()


def tuned(cfg: Any, keys: tuple[str, ...], fits: Callable[..., bool], default: Any) -> Any:
    """``cfg`` (a tuning-table config) when it is a dict of ints for ``keys`` that ``fits(**cfg)`` accepts; else
    ``default`` (the kernel's default config for the row, or ``None``): a stale or hand-written entry, or one
    measured on another row length of the bucket, never reaches a kernel."""
    if isinstance(cfg, dict) and all(type(cfg.get(k)) is int for k in keys):
        picked = {k: cfg[k] for k in keys}
        if fits(**picked):
            return picked
    return default


def vector_elements(itemsize: int) -> int:
    """Elements of ``itemsize`` bytes in one 16-byte vector (a 128-bit load or store)."""
    return 16 // itemsize


def available() -> tuple[bool, str]:
    """Whether CuTeDSL (``nvidia-cutlass-dsl``) and CUDA's Python driver bindings are installed (package
    metadata only; nothing imported), and why."""
    if importlib.util.find_spec("cutlass") is None:
        return False, f"{DISTRIBUTION} is not installed (pip install {DISTRIBUTION}, or in your accel clone: " \
                      "pip install '.[cutedsl]')"
    if importlib.util.find_spec("cuda") is None:
        return False, f"{DISTRIBUTION} is installed but cuda-python (its driver bindings) is not"
    return checked_version(DISTRIBUTION, module_version(DISTRIBUTION), MIN_VERSION,
                           f"; pip install -U '{DISTRIBUTION}>={MIN_VERSION}'")


def arch_reason(device: torch.device) -> str | None:
    """``None`` on an NVIDIA GPU of SM 9.0 or newer; else why accel's CuTeDSL kernels do not run there."""
    name = arch(device)
    digits = name.removeprefix("sm_").rstrip("af")
    if not name.startswith("sm_") or not digits.isdigit() or int(digits) < MIN_ARCH:
        return f"the CuTeDSL kernels need an NVIDIA GPU of sm_{MIN_ARCH}+ (clusters, cp.async); this device is {name}"
    return None


@detection_cache
def _ffi_installed() -> bool:
    return importlib.util.find_spec("tvm_ffi") is not None


def ffi_reason() -> str | None:
    """``None`` when accel's CuTeDSL kernels are compiled for TVM-FFI calls (``--enable-tvm-ffi``: the
    ``apache-tvm-ffi`` package is installed and ``ACCEL_CUTEDSL_TVM_FFI`` is not ``0``); else why they use
    CuTeDSL's Python executor, whose per-call argument packing costs tens of µs (:class:`Kernel`).

    Read when a kernel is compiled: a kernel, and the plans and launchers holding it, keep the convention
    they were compiled with for the rest of the process (set the variable before the first call)."""
    if os.environ.get("ACCEL_CUTEDSL_TVM_FFI", "1").strip() == "0":
        return "ACCEL_CUTEDSL_TVM_FFI=0"
    if not _ffi_installed():
        return "apache-tvm-ffi is not installed (pip install apache-tvm-ffi, or '.[cutedsl]')"
    return None


class Kernel:
    """A compiled CuTeDSL kernel with accel's calling convention: ``kernel(index, *addresses, *scalars)``
    launches it on the current stream of CUDA device ``index``, which must be the current device
    (:func:`launch` guards).

    ``addresses``: one ``data_ptr()`` per pointer parameter, 16-byte aligned; ``scalars``: the int parameters.

    Two ways in, fixed at compile time (:func:`ffi_reason`):

    - ``ffi``: ``fn`` is the compiled function's ``tvm_ffi.Function``; addresses, scalars and the raw stream
      go to it as ints, one C call (quack calls its CuTeDSL kernels the same way);
    - otherwise ``fn`` is CuTeDSL's executor, called with ``cute.Pointer`` objects (``pointers(addresses)``)
      and a ``CUstream``. Measured on the H200's host (torch 2.11, CuTeDSL 4.8.1): 33-37 µs per softmax
      launch on ``[4, 1024]`` where ATen's softmax takes 12.5-13.0
      (``ci/gpu/cutedsl_smoke.py`` on the H200).
    """

    __slots__ = ("fn", "ffi", "pointers", "compiled")

    def __init__(self, compiled: Any, fn: Callable[..., Any], ffi: bool,
                 pointers: Callable[[tuple], tuple] | None = None) -> None:
        self.compiled, self.fn, self.ffi, self.pointers = compiled, fn, ffi, pointers

    def __call__(self, index: int, *args: Any) -> None:
        stream = torch._C._cuda_getCurrentRawStream(index)
        if self.ffi:
            self.fn(*args, stream)
        else:
            import cuda.bindings.driver as cuda

            self.fn(*self.pointers(args), cuda.CUstream(stream))


def launch(kernel: Kernel, index: int, *args: Any) -> None:
    """``kernel(index, *args)`` with CUDA device ``index`` current (the launch uses the current context)."""
    if index == torch._C._cuda_getDevice():
        kernel(index, *args)
        return
    with torch.cuda.device(index):
        kernel(index, *args)


def availability_note(extra: str = "") -> str:
    """What ``accel kernels`` says beside a CuTeDSL kernel's availability: where the kernels run (the arch is
    checked per call: knowing it here would initialise the device) and how they are called."""
    ffi = ffi_reason()
    call = "launched through TVM-FFI" if ffi is None else \
        f"launched through CuTeDSL's executor, ~15 µs more host time per call: {ffi}"
    return f"CuTeDSL kernels run on sm_90+ GPUs, only for the shapes a tuning table routes to them{extra}; {call}"
