"""The eager reference of ``accel::rms_norm_hf``: the custom ops' default kernels and the tests' oracle.

Forward, op for op as Hugging Face writes it (``x`` the input, ``rstd = rsqrt(mean(xf**2) + eps)`` with
``xf = x.to(float32)``):

- ``unit_offset=False`` (Llama): ``weight * (xf * rstd).to(x.dtype)`` (dtype ``promote(x, weight)``);
- ``unit_offset=True`` (Gemma): ``((xf * rstd) * (1 + weight.float())).to(x.dtype)``.

Backward in fp32 with the cast taken as the identity (``xhat = xf * rstd``, ``g = dy * w`` with ``w`` the
weight or ``1 + weight``): ``dx = rstd * (g - xhat * mean(g * xhat))`` and ``dw = sum(dy * h)`` over the
rows, ``h`` the forward's rounded ``xhat`` (Llama) or ``xhat`` (Gemma). Outputs are laid out like the
input (the weight, for ``dw``), as ``torch.empty_like`` lays them out; ``rstd`` is a contiguous fp32
tensor of the input's leading shape.
"""

from __future__ import annotations

import torch

__all__ = ["check", "output_dtype", "rms_norm_hf", "rms_norm_hf_backward"]


def output_dtype(input: torch.Tensor, weight: torch.Tensor, unit_offset: bool) -> torch.dtype:
    """The forward's dtype: the input's (``unit_offset``), else ``promote_types(input, weight)`` as Llama's
    ``weight * hidden.to(input_dtype)`` gives."""
    return input.dtype if unit_offset else torch.promote_types(input.dtype, weight.dtype)


def check(input: torch.Tensor, weight: torch.Tensor, where: str = "accel::rms_norm_hf") -> None:
    """What the ops take: floating ``input`` ``[..., N]`` and ``weight`` ``[N]`` on one device (fake tensors too).

    Raises:
        RuntimeError: (``torch._check``) shapes, dtypes or devices that do not fit.
    """
    torch._check(input.dim() >= 1 and weight.dim() == 1 and weight.shape[0] == input.shape[-1],
                 lambda: f"{where}: input {list(input.shape)}, weight {list(weight.shape)}. The weight must be "
                         f"[N] for input [..., N].")
    torch._check(input.dtype.is_floating_point and weight.dtype.is_floating_point,
                 lambda: f"{where}: input {input.dtype}, weight {weight.dtype}. Both must be floating.")
    torch._check(input.device == weight.device,
                 lambda: f"{where}: input on {input.device}, weight on {weight.device}. Move one.")


def rms_norm_hf(input: torch.Tensor, weight: torch.Tensor, eps: float,
                unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)``: the normalised input (:func:`output_dtype`) and ``1/sqrt(mean(x**2) + eps)`` per row (fp32,
    ``input.shape[:-1]``).

    Example:
        >>> import torch
        >>> from accel.kernels.ops.rms_norm_hf import reference
        >>> x, w = torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 0.5])
        >>> y, rstd = reference.rms_norm_hf(x, w, 0.0)
        >>> y, rstd
        (tensor([[0.8485, 0.5657]]), tensor([0.2828]))
        >>> reference.rms_norm_hf(x, w - 1.0, 0.0, unit_offset=True)[0]   # Gemma: 1 + weight
        tensor([[0.8485, 0.5657]])
    """
    xf = input.to(torch.float32)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if unit_offset:
        y = torch.empty_like(input).copy_((xf * rstd) * (1.0 + weight.float()))
    else:
        y = torch.mul(weight, (xf * rstd).to(input.dtype),
                      out=torch.empty_like(input, dtype=output_dtype(input, weight, False)))
    out = torch.empty(input.shape[:-1], dtype=torch.float32, device=input.device)
    return y, out.copy_(rstd.squeeze(-1))


def rms_norm_hf_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                         unit_offset: bool, input_grad: bool = True,
                         weight_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_input, grad_weight)`` of :func:`rms_norm_hf` for ``grad_out``; one not asked for is an empty
    ``[0]`` tensor."""
    n = input.shape[-1]
    xf = input.to(torch.float32)
    r = rstd.unsqueeze(-1)
    xhat = xf * r
    dy = grad_out.to(torch.float32)
    gx = input.new_empty(0)
    gw = weight.new_empty(0)
    if input_grad:
        g = dy * (weight.float() + 1.0 if unit_offset else weight.float())
        gx = torch.empty_like(input).copy_((g - xhat * (g * xhat).mean(-1, keepdim=True)) * r)
    if weight_grad:
        h = xhat if unit_offset else xhat.to(input.dtype).to(torch.float32)
        gw = torch.empty_like(weight).copy_((dy * h).reshape(-1, n).sum(0))
    return gx, gw
