"""The eager reference of ``accel::swiglu``: the custom ops' default kernels and the tests' oracle.

It is the Hugging Face MLP's own arithmetic, op for op (``F.silu(a) * b``; autograd's ``mul`` and
``silu_backward`` for the gradients), so a patched model on a device without an accel kernel computes
bit for bit what the unpatched one computes. Results are written into buffers laid out like the inputs
(``torch.empty_like``), the layout the ops' fake kernels promise to ``torch.compile``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["check", "swiglu", "swiglu_backward"]


def check(a: torch.Tensor, b: torch.Tensor, where: str = "accel::swiglu") -> None:
    """What the ops take: ``a`` and ``b`` of one shape, floating dtype and device (works on fake tensors).

    Raises:
        RuntimeError: (``torch._check``) shapes, dtypes or devices differ, or the dtype is not floating.
    """
    torch._check(a.shape == b.shape, lambda: f"{where}: a is {list(a.shape)}, b is {list(b.shape)}. They must have "
                                             f"one shape (gate and up projections of the same tokens).")
    torch._check(a.dtype == b.dtype and a.dtype.is_floating_point,
                 lambda: f"{where}: a is {a.dtype}, b is {b.dtype}. They must be one floating dtype: cast one.")
    torch._check(a.device == b.device, lambda: f"{where}: a is on {a.device}, b on {b.device}. Move one.")


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` (same shape and dtype as ``a``), rounded as the two eager ops round.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.swiglu import reference
        >>> a, b = torch.tensor([0.0, 1.0]), torch.tensor([2.0, 2.0])
        >>> reference.swiglu(a, b)
        tensor([0.0000, 1.4621])
    """
    return torch.mul(F.silu(a), b, out=torch.empty_like(a))


def swiglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of :func:`swiglu` for ``grad_out`` (shapes and dtypes of ``a`` and ``b``), as eager
    autograd computes them: ``grad_b = grad_out * silu(a)``, ``grad_a = silu_backward(grad_out * b, a)``."""
    grad_b = torch.mul(grad_out, F.silu(a), out=torch.empty_like(b))
    grad_a = torch.ops.aten.silu_backward.grad_input(grad_out * b, a, grad_input=torch.empty_like(a))
    return grad_a, grad_b
