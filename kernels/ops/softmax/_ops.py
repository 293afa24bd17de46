"""The ATen-signature wrappers every softmax DSL shares: flatten to ``[M, N]``, allocate, launch.

Each DSL module supplies ``launch_fwd``/``launch_bwd`` and a ``config(op, x, m, n)``
lookup; :func:`make_ops` turns them into ``aten::_softmax`` and
``aten::_softmax_backward_data`` implementations and registers the pair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.kernels._launch import empty_like
from accel.kernels._pair import register_pair

from . import BWD_OP, FWD_OP
from .conditions import make_conds

__all__ = ["make_ops"]

Config = Callable[[str, torch.Tensor, int, int], Mapping[str, Any]]


def make_ops(dsl: str, limits: Any, launch_fwd: Callable[..., None], launch_bwd: Callable[..., None],
             config: Config) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], Callable[..., list]]:
    """``(softmax, softmax_backward_data, register)`` for one DSL.

    Shapes: input/output/grad ``[..., N]`` contiguous, softmax over the last dim; fp32 math.
    """

    def softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        """``aten::_softmax`` over the last dim (contiguous input; the cond checks it)."""
        n = input.shape[-1]
        x = input.view(-1, n)
        y = empty_like(x)
        launch_fwd(x, y, config("softmax_fwd", x, x.shape[0], n))
        return y.view(input.shape)

    def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                              input_dtype: torch.dtype) -> torch.Tensor:
        """``aten::_softmax_backward_data`` over the last dim."""
        n = output.shape[-1]
        y = output.view(-1, n)
        dx = empty_like(y)
        launch_bwd(grad_output.view(-1, n), y, dx, config("softmax_bwd", y, y.shape[0], n))
        return dx.view(output.shape)

    def register(backends: Sequence[str] = ("cuda",), *, suffix: str = "") -> list[str]:
        """Register the forward and backward as accel overrides for ``backends``
        (names ``softmax_fwd.<dsl>`` ...).

        Raises:
            KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
        """
        return register_pair("softmax", dsl, (FWD_OP, BWD_OP), (softmax, softmax_backward_data),
                             make_conds(dsl, backends, limits), backends, suffix)

    return softmax, softmax_backward_data, register
