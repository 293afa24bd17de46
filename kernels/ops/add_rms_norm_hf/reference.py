"""The eager reference of ``accel::add_rms_norm_hf``: the custom ops' default kernels and the tests' oracle.

Forward: ``sum = input + residual`` (one dtype: torch's add, rounded to it), then
:func:`accel.kernels.ops.rms_norm_hf.reference.rms_norm_hf` of ``sum``. Backward: that op's backward at ``sum``
for ``grad_y``, then ``grad_sum`` (the gradient that reached ``sum`` itself) added to the input gradient in the
dtype (``dx + grad_sum``: what autograd computes where ``sum`` has the two uses). ``sum`` and the input gradient
are laid out like ``input`` / ``sum`` (``torch.empty_like``).
"""

from __future__ import annotations

import torch

from accel.kernels.ops.rms_norm_hf import reference as rn_reference

__all__ = ["add_rms_norm_hf", "add_rms_norm_hf_backward", "check", "check_backward"]


def check(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
          where: str = "accel::add_rms_norm_hf") -> None:
    """What the forward takes: ``input`` and ``residual`` of one shape ``[..., N]``, floating dtype and device, and
    ``weight`` ``[N]`` on that device (fake tensors too).

    Raises:
        RuntimeError: (``torch._check``) shapes, dtypes or devices that do not fit.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.add_rms_norm_hf import reference
        >>> x, r = torch.ones(2, 4), torch.ones(2, 4, dtype=torch.bfloat16)
        >>> reference.check(x, r, torch.ones(4))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        RuntimeError: accel::add_rms_norm_hf: input [2, 4] torch.float32 on cpu, residual [2, 4] torch.bfloat16 on ...
    """
    _same(input, residual, "input", "residual", where, "the sum is rounded to that one dtype")
    rn_reference.check(input, weight, where)


def check_backward(grad_sum: torch.Tensor | None, sum: torch.Tensor, weight: torch.Tensor,
                   where: str = "accel::add_rms_norm_hf_backward") -> None:
    """What the backward takes: :func:`accel.kernels.ops.rms_norm_hf.reference.check` of ``sum`` and ``weight``,
    and ``grad_sum`` (where given) of ``sum``'s shape, dtype and device.

    Raises:
        RuntimeError: (``torch._check``) shapes, dtypes or devices that do not fit.
    """
    rn_reference.check(sum, weight, where)
    if grad_sum is not None:
        _same(sum, grad_sum, "sum", "grad_sum", where, "it is added to the input gradient in that dtype")


def _same(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str, where: str, why: str) -> None:
    torch._check(a.shape == b.shape and a.dtype == b.dtype and a.device == b.device,
                 lambda: f"{where}: {name_a} {list(a.shape)} {a.dtype} on {a.device}, {name_b} {list(b.shape)} "
                         f"{b.dtype} on {b.device}. The {name_b} must have the {name_a}'s shape, dtype and device "
                         f"({why}). Cast, reshape or move one of them.")


def add_rms_norm_hf(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    unit_offset: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum, y, rstd)``: ``sum = input + residual`` (the input's dtype and layout) and
    ``(y, rstd) = rms_norm_hf(sum, weight, eps, unit_offset)`` (:func:`accel.kernels.ops.rms_norm_hf.reference.
    rms_norm_hf`: ``y`` like ``sum``, of :func:`~accel.kernels.ops.rms_norm_hf.reference.output_dtype`; ``rstd``
    fp32 ``input.shape[:-1]``).

    Example:
        >>> import torch
        >>> from accel.kernels.ops.add_rms_norm_hf import reference
        >>> s, y, rstd = reference.add_rms_norm_hf(torch.tensor([[1.0, 4.0]]), torch.tensor([[2.0, 0.0]]),
        ...                                        torch.tensor([1.0, 0.5]), 0.0)
        >>> s, y, rstd
        (tensor([[3., 4.]]), tensor([[0.8485, 0.5657]]), tensor([0.2828]))
    """
    s = torch.add(input, residual, out=torch.empty_like(input))
    y, rstd = rn_reference.rms_norm_hf(s, weight, eps, unit_offset)
    return s, y, rstd


def add_rms_norm_hf_backward(grad_y: torch.Tensor, grad_sum: torch.Tensor | None, sum: torch.Tensor,
                             weight: torch.Tensor, rstd: torch.Tensor, unit_offset: bool, input_grad: bool = True,
                             weight_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_input, grad_weight)`` of :func:`add_rms_norm_hf` for ``grad_y`` (of ``y``) and ``grad_sum`` (of
    ``sum``; ``None``: none): with ``(dx, dw) = rms_norm_hf_backward(grad_y, sum, weight, rstd, ...)``,
    ``grad_input = dx + grad_sum`` in ``sum``'s dtype (``dx`` rounded first; ``dx`` alone without ``grad_sum``),
    the gradient of ``input`` and of ``residual`` alike; ``grad_weight = dw``. One not asked for is an empty
    ``[0]`` tensor."""
    gx, gw = rn_reference.rms_norm_hf_backward(grad_y, sum, weight, rstd, unit_offset, input_grad, weight_grad)
    if input_grad and grad_sum is not None:
        gx.add_(grad_sum)  # the bits of gx + grad_sum, in gx's layout
    return gx, gw
