"""Softmax forward and backward through the Helion kernels of :mod:`.helion_kernel`.

Importing this module imports no Helion. Configs: the tuning table's for the
input's arch, dtype and bucket, else :data:`.helion_kernel.DEFAULT`; never autotuned here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from accel.kernels import _tuning
from accel.kernels._conds import Limits, arch
from accel.kernels._launch import device_guard, empty_like
from accel.kernels._pair import register_pair
from accel.kernels.ops.rms_norm.helion_impl import available

from . import BWD_OP, FWD_OP
from .conditions import make_conds

__all__ = ["DSL", "LIMITS", "available", "softmax", "softmax_backward_data", "register", "launch_fwd", "launch_bwd"]

DSL = "helion"
#: Whole rows per tile up to 16384 elements; int32 indexing in Helion's generated code.
LIMITS = Limits(max_n_fwd=16384, max_n_bwd=16384, max_numel=(1 << 31) - 1)


def _config(op: str, x: torch.Tensor, m: int, n: int) -> Mapping[str, Any]:
    from . import helion_kernel

    cfg = _tuning.config(op, DSL, arch(x.device), _tuning.dtype_name(x.dtype), m, n)
    return cfg if cfg is not None else helion_kernel.DEFAULT


def launch_fwd(x: torch.Tensor, y: torch.Tensor, cfg: Mapping[str, Any]) -> None:
    """Run the forward on ``x [M, N]`` into ``y`` with the Helion config ``cfg``."""
    from accel.kernels._helion import bind

    from . import helion_kernel

    with device_guard(x.device):
        bind(helion_kernel.softmax_fwd, cfg)(x, y)


def launch_bwd(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, cfg: Mapping[str, Any]) -> None:
    """Run the backward on ``[M, N]`` tensors with the Helion config ``cfg``."""
    from accel.kernels._helion import bind

    from . import helion_kernel

    with device_guard(y.device):
        bind(helion_kernel.softmax_bwd, cfg)(dy, y, dx)


def softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """``aten::_softmax`` over the last dim in Helion."""
    n = input.shape[-1]
    x = input.view(-1, n)
    y = empty_like(x)
    launch_fwd(x, y, _config("softmax_fwd", x, x.shape[0], n))
    return y.view(input.shape)


def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                          input_dtype: torch.dtype) -> torch.Tensor:
    """``aten::_softmax_backward_data`` over the last dim in Helion."""
    n = output.shape[-1]
    y = output.view(-1, n)
    dx = empty_like(y)
    launch_bwd(grad_output.view(-1, n), y, dx, _config("softmax_bwd", y, y.shape[0], n))
    return dx.view(output.shape)


def register(backends: Sequence[str] = ("cuda",), *, suffix: str = "") -> list[str]:
    """Register the forward and backward as accel overrides for ``backends`` (names ``softmax_fwd.helion`` ...).

    Raises:
        KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
    """
    return register_pair("softmax", DSL, (FWD_OP, BWD_OP), (softmax, softmax_backward_data),
                         make_conds(DSL, backends, LIMITS), backends, suffix)
