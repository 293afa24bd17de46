"""Softmax forward and backward through the CuTeDSL cluster kernels of :mod:`.cutedsl_kernel`.

Importing this module imports no CuTeDSL: the kernel module is imported, and each kernel compiled
(about a second; once per process per dtype, row length and config), at the first launch.
The kernels need SM 9.0+ (thread-block clusters) and rows whose length a config covers exactly
(:func:`.cutedsl_configs.fits`); the cond sends everything else to the next kernel or ATen.

Routing: this DSL runs only where the tuning table names it (a table miss goes to the Triton
kernel or ATen: :data:`accel.kernels.tuning.table.MIN_NUMEL` has no size above which it is trusted
without a measurement).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from accel.kernels.dsl import cutedsl_utils
from accel.kernels.ops.conds import Limits, arch, tuned_config
from accel.kernels.dsl.cutedsl_utils import available
from accel.kernels.dsl.launch import device_guard, lazy_module
from accel.kernels.tuning.table import dtype_name

from . import FAMILY, cutedsl_configs
from ._wrappers import make_ops

__all__ = ["DSL", "LIMITS", "available", "config_reason", "usable", "softmax", "softmax_backward_data", "register",
           "launch_fwd", "launch_bwd"]

DSL = "cutedsl"
#: Rows up to 65536 elements (a cluster of 8 CTAs of 128 threads, 64 elements each), below 2**31 elements
#: in all (32-bit row offsets).
LIMITS = Limits(max_n_fwd=65536, max_n_bwd=65536, max_numel=cutedsl_utils.MAX_NUMEL)

_kernels = lazy_module(__package__ + ".cutedsl_kernel")  # imports CuTeDSL at the first launch
_INPUTS = {"softmax_fwd": 1, "softmax_bwd": 2}


def _config(op: str, x: torch.Tensor, m: int, n: int) -> Mapping[str, Any] | None:
    """The tuning table's config for these rows when it fits them (:func:`accel.kernels.dsl.cutedsl_utils.tuned`), else
    the default config for rows of ``n``, else ``None`` (no config covers them)."""
    size, inputs = x.element_size(), _INPUTS[op]
    default = cutedsl_configs.default_config(n, size, inputs)
    return cutedsl_utils.tuned(tuned_config(op, DSL, x, m, n, default), ("cluster", "threads"),
                          lambda cluster, threads: cutedsl_configs.fits(n, size, cluster, threads, inputs), default)


def config_reason(op: str, t: torch.Tensor, n: int, *others: torch.Tensor) -> str | None:
    """``None`` when the kernels can take rows of ``n`` of ``t`` (``[..., n]``, contiguous) for ``op``
    (``"softmax_fwd"``/``"softmax_bwd"``; ``others``: the backward's ``grad_output``); else why not: arch below
    SM 9.0, a base pointer not 16-byte aligned, or no config (tuned or default) covering rows of ``n``."""
    why = cutedsl_utils.arch_reason(t.device)
    if why is not None:
        return why
    if any(x.data_ptr() % 16 for x in (t, *others)):
        return "a base pointer is not 16-byte aligned (the kernels load 16-byte vectors)"
    if _config(op, t, t.numel() // n if n else 0, n) is None:
        return (f"no CuTeDSL config covers rows of {n} {dtype_name(t.dtype)} elements (N must be a multiple of "
                f"cluster * threads * {cutedsl_configs.vector_elements(t.element_size())}, at most "
                f"{cutedsl_configs.MAX_ELEMENTS_PER_THREAD} elements per thread)")
    return None


def usable(op: str, t: torch.Tensor, n: int, *others: torch.Tensor) -> bool:
    """Whether CuTeDSL is installed and its kernel takes these rows (within :data:`LIMITS`, and
    :func:`config_reason` is ``None``): the benchmark's and the tuner's test before they time it."""
    return available()[0] and n <= LIMITS.max_n_fwd and config_reason(op, t, n, *others) is None


def _launcher(kind: str, cfg: Mapping[str, Any], m: int, n: int) -> Callable[..., None]:
    k = _kernels()
    cluster, threads = int(cfg["cluster"]), int(cfg["threads"])
    compiled: dict[tuple[torch.dtype, int], Any] = {}

    def launch(*tensors: torch.Tensor) -> None:
        if not m:
            return  # an empty grid is a launch error
        t = tensors[0]
        index = t.get_device()
        fn = compiled.get((t.dtype, index))
        if fn is None:
            with device_guard(t.device):  # compiles for the current device
                fn = compiled[(t.dtype, index)] = k.build(kind, dtype_name(t.dtype), n, cluster, threads,
                                                          arch(t.device))
        cutedsl_utils.launch(fn, index, *[x.data_ptr() for x in tensors], m)

    return launch


def fwd_launch(cfg: Mapping[str, Any], m: int, n: int) -> Callable[..., None]:
    """The forward's launch for ``m`` rows of ``n`` with config ``cfg`` (``{"cluster", "threads"}``);
    call it with ``(x, y)``: contiguous CUDA tensors of one dtype, 16-byte aligned."""
    return _launcher("fwd", cfg, m, n)


def bwd_launch(cfg: Mapping[str, Any], m: int, n: int) -> Callable[..., None]:
    """The backward's launch (configs as :func:`fwd_launch`); call it with ``(dy, y, dx)``."""
    return _launcher("bwd", cfg, m, n)


def launch_fwd(x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the forward on ``x`` (``[M, N]``, or any contiguous shape with ``m``, ``n`` given) into ``y``
    with launch config ``cfg`` (the tuner's entry point)."""
    if m is None:
        m, n = x.shape
    if m:
        fwd_launch(cfg, m, n)(x, y)


def launch_bwd(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, cfg: Mapping[str, Any], m: int | None = None,
               n: int | None = None) -> None:
    """Run the backward on ``[M, N]`` tensors (or any contiguous shape with ``m``, ``n``) with config ``cfg``."""
    if m is None:
        m, n = y.shape
    if m:
        bwd_launch(cfg, m, n)(dy, y, dx)


softmax, softmax_backward_data, conds = make_ops(DSL, LIMITS, launch_fwd, launch_bwd, _config,
                                                    plans=(fwd_launch, bwd_launch), extra_reason=config_reason)


def covers(table_op: str, n: int, dtype: str) -> bool:
    """Whether a config of this DSL's ``table_op`` (``"softmax_fwd"``/``"softmax_bwd"``) takes rows of ``n``
    elements of ``dtype`` (a dtype name): the tuning table's partial-DSL check."""
    itemsize = cutedsl_utils.ITEMSIZE.get(dtype)
    return itemsize is not None and bool(cutedsl_configs.candidate_configs(n, itemsize, 1 if table_op == "softmax_fwd" else 2))


availability_note = cutedsl_utils.availability_note
forward, backward = softmax, softmax_backward_data
#: ``register(backends=("cuda",), *, suffix="")``: both kernels as accel overrides (:meth:`OpFamily.register`).
register = FAMILY.registrar(DSL)
