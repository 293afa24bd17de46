"""Softmax forward and backward through the Triton kernels of :mod:`.triton_kernel`.

Importing this module imports no Triton: the kernel module is imported at the
first call. Launch configs come from the tuning table (:mod:`accel.kernels._tuning`)
for the input's arch, dtype and shape bucket, else :func:`.triton_kernel.default_config`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accel.kernels import _tuning
from accel.kernels._conds import Limits, arch
from accel.kernels._launch import device_guard, empty_like
from accel.kernels._pair import register_pair
from accel.kernels.ops.rms_norm.triton_impl import available

from . import BWD_OP, FWD_OP
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "softmax", "softmax_backward_data", "register", "launch_fwd", "launch_bwd"]

DSL = "triton"
#: Rows up to 65536 elements (looped above triton_kernel.MAX_BLOCK_N = 32768).
LIMITS = Limits(max_n_fwd=65536, max_n_bwd=65536)


def _kernels():
    from . import triton_kernel

    return triton_kernel


def _config(op: str, x: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    cfg = _tuning.config(op, DSL, arch(x.device), _tuning.dtype_name(x.dtype), m, n)
    return cfg if cfg is not None else _kernels().default_config(n)


def launch_fwd(x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any]) -> None:
    """Run the forward on ``x [M, N]`` into ``y`` with launch config ``cfg`` (used by the tuner too)."""
    k = _kernels()
    m, n = x.shape
    with device_guard(x.device):
        if cfg["looped"]:
            k.softmax_fwd_looped[(m,)](x, y, n, BLOCK_N=cfg["block_n"], num_warps=cfg["num_warps"])
        else:
            rows = cfg["rows"]
            k.softmax_fwd_rows[(-(-m // rows),)](x, y, m, n, BLOCK_N=max(cfg["block_n"], k.triton.next_power_of_2(n)),
                                                  ROWS=rows, num_warps=cfg["num_warps"])


def launch_bwd(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, cfg: Mapping[str, Any]) -> None:
    """Run the backward on ``[M, N]`` tensors with launch config ``cfg``."""
    k = _kernels()
    m, n = y.shape
    with device_guard(y.device):
        if cfg["looped"]:
            k.softmax_bwd_looped[(m,)](dy, y, dx, n, BLOCK_N=cfg["block_n"], num_warps=cfg["num_warps"])
        else:
            rows = cfg["rows"]
            k.softmax_bwd_rows[(-(-m // rows),)](dy, y, dx, m, n, BLOCK_N=max(cfg["block_n"], k.triton.next_power_of_2(n)),
                                                  ROWS=rows, num_warps=cfg["num_warps"])


def softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """``aten::_softmax`` over the last dim in Triton (contiguous input; the cond checks it)."""
    n = input.shape[-1]
    x = input.view(-1, n)
    y = empty_like(x)
    launch_fwd(x, y, _config("softmax_fwd", x, x.shape[0], n))
    return y.view(input.shape)


def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                          input_dtype: torch.dtype) -> torch.Tensor:
    """``aten::_softmax_backward_data`` over the last dim in Triton."""
    n = output.shape[-1]
    y = output.view(-1, n)
    dx = empty_like(y)
    launch_bwd(grad_output.view(-1, n), y, dx, _config("softmax_bwd", y, y.shape[0], n))
    return dx.view(output.shape)


def register(backends: Sequence[str] = ("cuda",), *, suffix: str = "") -> list[str]:
    """Register the forward and backward as accel overrides for ``backends`` (names ``softmax_fwd.triton`` ...).

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    return register_pair("softmax", DSL, (FWD_OP, BWD_OP), (softmax, softmax_backward_data),
                         make_conds(DSL, backends, LIMITS), backends, suffix)
