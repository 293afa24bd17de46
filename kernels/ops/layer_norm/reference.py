"""LayerNorm in eager PyTorch: the oracle every kernel is tested against.

For ``x`` viewed as ``[M, N]`` (``N = prod(normalized_shape)``), in fp32:
``mean = sum(x)/N``, ``rstd = 1/sqrt(sum((x-mean)^2)/N + eps)``,
``y = (x - mean) * rstd * w + b``, cast to ``x.dtype``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["native_layer_norm", "native_layer_norm_backward", "stat_dtype", "stat_shape"]


def stat_shape(input: torch.Tensor, normalized_shape) -> list[int]:
    """Shape of ``mean``/``rstd``: the leading dims of ``input`` then ``len(normalized_shape)`` ones."""
    k = len(normalized_shape)
    return list(input.shape[: input.dim() - k]) + [1] * k


def stat_dtype(input: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
               ) -> torch.dtype:
    """dtype of ``mean``/``rstd`` as ATen gives it: fp32 on CUDA; elsewhere the input dtype, except fp32
    for a bf16/fp16 input with fp32 ``weight``/``bias`` (the CPU kernel's mixed-type case, measured on
    torch 2.13: ATen's backward then expects fp32 statistics)."""
    if input.is_cuda:
        return torch.float32
    param = weight if weight is not None else bias
    if param is not None and param.dtype == torch.float32 and input.dtype != torch.float32:
        return torch.float32
    return input.dtype


def native_layer_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten::native_layer_norm`` in eager PyTorch.

    Args:
        input: ``[..., *normalized_shape]``, fp32/bf16/fp16.
        normalized_shape: trailing dims normalized over.
        weight: ``normalized_shape`` or ``None``.
        bias: ``normalized_shape`` or ``None``.
        eps: added to the variance.

    Returns:
        ``(y, mean, rstd)``: ``y`` like ``input``; ``mean``, ``rstd`` of :func:`stat_shape` in :func:`stat_dtype`.
    """
    n = math.prod(normalized_shape)
    x = input.reshape(-1, n).float()
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    rstd = torch.rsqrt((xc * xc).mean(-1, keepdim=True) + eps)
    y = xc * rstd
    if weight is not None:
        y = y * weight.reshape(n).float()
    if bias is not None:
        y = y + bias.reshape(n).float()
    shape, dt = stat_shape(input, normalized_shape), stat_dtype(input, weight, bias)
    return y.to(input.dtype).reshape(input.shape), mean.to(dt).reshape(shape), rstd.to(dt).reshape(shape)


def native_layer_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape, mean: torch.Tensor,
                               rstd: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                               output_mask) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``aten::native_layer_norm_backward`` in eager PyTorch (fp32 math).

    ``xhat = (x-mean)*rstd``, ``g = dy*w``: ``dx = rstd*(g - mean(g) - xhat*mean(g*xhat))``,
    ``dw = sum_rows(dy*xhat)``, ``db = sum_rows(dy)``.

    Returns:
        ``(dx, dw, db)``; an entry is ``None`` when not asked for (or its parameter is ``None``).
    """
    n = math.prod(normalized_shape)
    x = input.reshape(-1, n).float()
    dy = grad_out.reshape(-1, n).float()
    xhat = (x - mean.reshape(-1, 1).float()) * rstd.reshape(-1, 1).float()
    g = dy * weight.reshape(n).float() if weight is not None else dy
    dx = dw = db = None
    if output_mask[0]:
        dx = (rstd.reshape(-1, 1).float() * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)))
        dx = dx.to(input.dtype).reshape(input.shape)
    if output_mask[1] and weight is not None:
        dw = (dy * xhat).sum(0).to(weight.dtype).reshape(weight.shape)
    if output_mask[2] and bias is not None:
        db = dy.sum(0).to(bias.dtype).reshape(bias.shape)
    return dx, dw, db
