"""RMSNorm in eager PyTorch: the oracle every kernel is tested against.

Formula, for input ``x`` viewed as ``[M, N]`` with ``N = prod(normalized_shape)``:
``rstd = 1 / sqrt(mean(x**2, -1) + eps)`` and ``y = x * rstd * w``, computed in
fp32 and cast to ``x.dtype``; ``rstd`` is fp32 of shape ``x.shape[:-k] + (1,) * k``
(``k = len(normalized_shape)``), as ATen returns it. ``eps=None`` means
``torch.finfo(torch.float32).eps`` (ATen picks the accumulation type's epsilon).
"""

from __future__ import annotations

import math

import torch

__all__ = ["fused_rms_norm", "fused_rms_norm_backward", "stat_shape"]


def stat_shape(input: torch.Tensor, normalized_shape: list[int]) -> list[int]:
    """Shape of ``rstd``: the leading dims of ``input`` followed by ``len(normalized_shape)`` ones."""
    k = len(normalized_shape)
    return list(input.shape[: input.dim() - k]) + [1] * k


def fused_rms_norm(
    input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None, eps: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten::_fused_rms_norm`` in eager PyTorch.

    Args:
        input: ``[..., *normalized_shape]``, fp32/bf16/fp16.
        normalized_shape: trailing dims normalized over.
        weight: ``normalized_shape``, same dtype as ``input``, or ``None``.
        eps: added to the mean square; ``None`` -> fp32 epsilon.

    Returns:
        ``(y, rstd)``: ``y`` like ``input``; ``rstd`` fp32 of :func:`stat_shape`.
    """
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    n = math.prod(normalized_shape)
    x = input.reshape(-1, n).float()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    y = x * rstd
    if weight is not None:
        y = y * weight.reshape(n).float()
    return y.to(input.dtype).reshape(input.shape), rstd.reshape(stat_shape(input, normalized_shape))


def fused_rms_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: list[int],
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``aten::_fused_rms_norm_backward`` in eager PyTorch (fp32 math).

    ``dx = rstd * (dy*w - xhat * mean(xhat * dy*w, -1))`` with ``xhat = x * rstd``;
    ``dw = sum over rows of dy * xhat``.

    Args:
        grad_out: ``dy``, shaped like ``input``.
        input: the forward's input.
        normalized_shape: as in the forward.
        rstd: the forward's ``rstd``.
        weight: the forward's weight or ``None``.
        output_mask: ``[want dx, want dw]``.

    Returns:
        ``(dx, dw)``; an entry is ``None`` when not asked for (``dw`` also when ``weight`` is ``None``).
    """
    n = math.prod(normalized_shape)
    x = input.reshape(-1, n).float()
    dy = grad_out.reshape(-1, n).float()
    r = rstd.reshape(-1, 1).float()
    xhat = x * r
    wdy = dy * weight.reshape(n).float() if weight is not None else dy
    dx = dw = None
    if output_mask[0]:
        dx = ((wdy - xhat * (xhat * wdy).mean(-1, keepdim=True)) * r).to(input.dtype).reshape(input.shape)
    if output_mask[1] and weight is not None:
        dw = (dy * xhat).sum(0).to(weight.dtype).reshape(weight.shape)
    return dx, dw
