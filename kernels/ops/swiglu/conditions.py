"""The ``cond`` of accel's SwiGLU kernel: vendor, dtype, shapes, row layout, tuning table.

Each check returns a reason key when the kernel must not run, ``None`` when it may; ``why_not`` turns the
key into a sentence for :func:`accel.kernels.explain`. Shapes, strides, dtypes and devices only (works on
meta and fake tensors). The tuning table is keyed by ``[M, N] = [rows, last dim]``
(``swiglu_fwd`` / ``swiglu_bwd``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
from accel.kernels.ops.conds import DEVICE_REASONS, conds_from_keys, device_types_for, entry_reason, table_declines

__all__ = ["MAX_N", "make_conds", "row_stride"]

#: Longest last dim the kernel's grid takes (``cdiv(N, BLOCK_N)`` programs on grid axis 1, at most 65535).
MAX_N = 1 << 26

_REASONS = {
    **DEVICE_REASONS,
    "numel_big": "too many elements for the {dsl} kernel",
    "shape": "a and b differ in shape, dtype or device, or are empty",
    "layout": "a, b or the gradient is not rows of unit stride (the leading dims must merge into one row stride)",
    "long_row": "last dim > 2**26",
}


def row_stride(t: torch.Tensor) -> int | None:
    """The stride between rows of ``t`` read as ``[numel // N, N]`` (``N`` its last dim) without a copy, or
    ``None`` where it is not such a view (last stride not 1, or leading dims that do not merge).

    Example:
        >>> import torch
        >>> from accel.kernels.ops.swiglu.conditions import row_stride
        >>> x = torch.empty(2, 3, 8)
        >>> row_stride(x), row_stride(x[..., :4]), row_stride(x.transpose(0, 1))
        (8, 8, None)
    """
    if t.dim() == 0:
        return None
    sizes, strides = t.shape, t.stride()
    if sizes[-1] != 1 and strides[-1] != 1:
        return None
    leading = [(sizes[i], strides[i]) for i in range(t.dim() - 1) if sizes[i] != 1]  # size-1 dims: any stride
    if not leading:
        return sizes[-1]
    for (_, outer), (size, inner) in itertools.pairwise(leading):
        if outer != inner * size:  # the dims do not merge into one
            return None
    return leading[-1][1]


def _check(a: torch.Tensor, b: torch.Tensor, devices: dict[str, str | None], dsl: str, op: str) -> str | None:
    numel = a.numel()
    key = entry_reason(a, numel, op, dsl, devices, 1 << 62)
    if key is not None:
        return key
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or numel == 0:
        return "shape"
    n = a.shape[-1]
    if n > MAX_N:
        return "long_row"
    if table_declines(op, dsl, a, numel, n):
        return "table"
    if row_stride(a) is None or row_stride(b) is None:
        return "layout"
    return None


def make_conds(dsl: str, backends: Sequence[str], family: str = "swiglu",
               ) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` with the two ops' signatures, each with ``why_not``, ``floor`` and
    ``cacheable`` (:func:`accel.kernels.ops.conds.conds_from_keys`; the sentences name ``a``'s device and dtype).
    ``family``: ``"swiglu"`` or ``"geglu"`` (the same kernels and layouts; the tuning tables are the family's)."""
    devices = device_types_for(backends)

    def key_fwd(a, b):
        return _check(a, b, devices, dsl, f"{family}_fwd")

    def key_bwd(grad_out, a, b):
        key = _check(a, b, devices, dsl, f"{family}_bwd")
        if key is None and (grad_out.shape != a.shape or grad_out.dtype != a.dtype or grad_out.device != a.device):
            return "shape"
        if key is None and row_stride(grad_out) is None:
            return "layout"
        return key

    return conds_from_keys(family, dsl, devices, _REASONS, key_fwd, key_bwd, subject_fwd="a", subject_bwd="a")
