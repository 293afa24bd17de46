"""The eager reference of ``accel::geglu``: the custom ops' default kernels and the tests' oracle.

It is Gemma's MLP arithmetic, op for op (``F.gelu(a, approximate="tanh") * b``; autograd's ``mul`` and
``gelu_backward`` for the gradients), so a patched model on a device without an accel kernel computes bit for bit
what the unpatched one computes. Results are written into buffers laid out like the inputs (``torch.empty_like``),
the layout the ops' fake kernels promise to ``torch.compile``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from accel.kernels.ops.swiglu.reference import check as _check_pair

__all__ = ["check", "geglu", "geglu_backward"]


def check(a: torch.Tensor, b: torch.Tensor, where: str = "accel::geglu") -> None:
    """What the ops take: ``a`` and ``b`` of one shape, floating dtype and device (works on fake tensors).

    Raises:
        RuntimeError: (``torch._check``) shapes, dtypes or devices differ, or the dtype is not floating.
    """
    _check_pair(a, b, where)


def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``gelu(a, approximate="tanh") * b`` (same shape and dtype as ``a``), rounded as the two eager ops round.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.geglu import reference
        >>> reference.geglu(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 2.0]))
        tensor([0.0000, 1.6824])
    """
    return torch.mul(F.gelu(a, approximate="tanh"), b, out=torch.empty_like(a))


def geglu_backward(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of :func:`geglu` for ``grad_out`` (shapes and dtypes of ``a`` and ``b``), as eager
    autograd computes them: ``grad_b = grad_out * gelu(a)``, ``grad_a = gelu_backward(grad_out * b, a)``."""
    grad_b = torch.mul(grad_out, F.gelu(a, approximate="tanh"), out=torch.empty_like(b))
    grad_a = torch.ops.aten.gelu_backward.grad_input(grad_out * b, a, approximate="tanh",
                                                     grad_input=torch.empty_like(a))
    return grad_a, grad_b
