"""accel.nn: torch's ``linear_cross_entropy`` (torch 2.15's signatures and semantics) on every torch accel supports.

- :func:`accel.nn.functional.linear_cross_entropy`, :class:`LinearCrossEntropyLoss` and
  :class:`LinearCrossEntropyOptions`. Where the running torch has all three (detected with ``hasattr``:
  torch 2.13, 2.14 and 2.15 builds have them) they *are* torch's own objects; elsewhere (torch 2.9-2.12)
  they are accel's (:mod:`accel.nn.linear_cross_entropy`, torch 2.15's semantics), whose chunked path is the
  custom op ``torch.ops.accel.linear_cross_entropy`` (fake kernel and autograd: it runs under
  ``torch.compile``). accel's function, its fp32 variant and its module take either class of options: on
  torch 2.13+ the ``LinearCrossEntropyOptions`` handed out here is torch's, read field by field
  (:func:`accel.nn.options.as_options`).
- The fused kernel: ``accel.kernels.install()`` on a GPU registers accel's Triton implementation of that
  op and of torch's own chunked ops (``torch_nn::_linear_cross_entropy_batch_chunked`` and
  ``..._no_reduction``, where torch has them; the first declines what torch 2.15's CuTeDSL override takes),
  so ``options=LinearCrossEntropyOptions()`` runs it on either torch.

Importing :mod:`accel.nn` defines accel's two custom ops (``accel::linear_cross_entropy``,
``accel::linear_cross_entropy_backward``) and imports no DSL runtime.

Example:
    >>> import torch, accel.nn
    >>> head = accel.nn.LinearCrossEntropyLoss(16, 50, options=accel.nn.LinearCrossEntropyOptions())
    >>> loss = head(torch.randn(8, 16), torch.randint(0, 50, (8,)))
    >>> loss.shape
    torch.Size([])
"""

from __future__ import annotations

from accel._compat import nn as _compat_nn

from . import functional
from . import linear_cross_entropy as _accel

__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions", "functional"]

_torch = _compat_nn.torch_linear_cross_entropy()
if _torch is not None:
    LinearCrossEntropyLoss, LinearCrossEntropyOptions = _torch[1], _torch[2]
else:
    LinearCrossEntropyLoss, LinearCrossEntropyOptions = _accel.LinearCrossEntropyLoss, _accel.LinearCrossEntropyOptions
del _torch
