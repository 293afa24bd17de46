"""accel.nn.functional: :func:`linear_cross_entropy`, torch's own where torch has it (2.13+ builds), accel's elsewhere;
and :func:`lm_head_loss`, accel's own on every torch (softcapping, z-loss, ``num_items_in_batch``).

See :func:`accel.nn.linear_cross_entropy.linear_cross_entropy` for the arguments (torch 2.15's), the chunked
path and how the fused kernel is reached, and :func:`accel.nn.lm_head.lm_head_loss` for the options torch's
signature has no room for.

Example:
    >>> import torch
    >>> from accel.nn.functional import linear_cross_entropy
    >>> x, w = torch.ones(2, 3), torch.zeros(4, 3)
    >>> round(linear_cross_entropy(x, w, torch.tensor([0, 3])).item(), 4)   # log(4)
    1.3863
"""

from __future__ import annotations

from accel._compat import nn as _compat_nn

from . import linear_cross_entropy as _accel
from .lm_head import lm_head_loss

__all__ = ["linear_cross_entropy", "lm_head_loss"]

_torch = _compat_nn.torch_linear_cross_entropy()
linear_cross_entropy = _accel.linear_cross_entropy if _torch is None else _torch[0]
del _torch
