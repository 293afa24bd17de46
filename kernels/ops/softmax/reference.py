"""Softmax over the last dim in eager PyTorch: the oracle every kernel is tested against.

For ``x`` viewed as ``[M, N]``: ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` per
row, in fp32, cast to ``x.dtype``. Backward: ``dx = y * (dy - sum(dy * y))``.
"""

from __future__ import annotations

import torch

__all__ = ["softmax", "softmax_backward_data"]


def softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """``aten::_softmax`` in eager PyTorch (fp32 math).

    Args:
        input: any shape, fp32/bf16/fp16.
        dim: the dim normalized over.
        half_to_float: return fp32 for fp16/bf16 input.

    Returns:
        Like ``input`` (fp32 when ``half_to_float``).
    """
    x = input.float()
    y = torch.exp(x - x.amax(dim, keepdim=True))
    y = y / y.sum(dim, keepdim=True)
    return y if half_to_float else y.to(input.dtype)


def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                          input_dtype: torch.dtype) -> torch.Tensor:
    """``aten::_softmax_backward_data`` in eager PyTorch: ``dx = y * (dy - sum(dy*y, dim))`` in fp32.

    Returns:
        ``dx`` shaped like ``output``, in ``input_dtype``.
    """
    y, dy = output.float(), grad_output.float()
    return (y * (dy - (dy * y).sum(dim, keepdim=True))).to(input_dtype)
