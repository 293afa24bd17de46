"""The ``cond`` of accel's softmax kernels: vendor, dtype, last dim, layout, row bound, tuning table.

One implementation for every DSL; checks are cheapest first, formatted into a
sentence only by ``why_not`` (shared pieces: :mod:`accel.kernels.ops.conds`).
Rows need not be aligned (the kernels mask), only contiguous.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from accel.kernels.ops.conds import (Limits, conds_from_keys, device_types_for, entry_reason, reason_text,
                                     rows_reason, table_declines, table_reason)

__all__ = ["make_conds"]

_EXTRA = {
    "dim": "softmax over a dim other than the last",
    "scalar": "0-dim input (a softmax of one value is left to ATen)",
    "half_to_float": "half_to_float=True (fp32 output of a half input) is left to ATen",
    "numel_big": "too many elements for the {dsl} kernel (int32 indexing)",
    "grad": "grad_output differs from output in shape/dtype, or is not contiguous, or input_dtype differs",
}


def _last(dim: int, ndim: int) -> bool:
    return dim == -1 or dim == ndim - 1


def make_conds(dsl: str, backends: Sequence[str], limits: Limits,
               extra: Callable[..., str | None] | None = None,
               ) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` for one DSL registered for ``backends`` (each with ``why_not``, ``floor``
    and ``cacheable``: :func:`accel.kernels.ops.conds.conds_from_keys`).

    ``extra``: the DSL's own check, run last: ``(op, tensor, n, *others)`` -> ``None`` or the reason sentence
    (the CuTeDSL kernels' arch, alignment and row-length checks; ``others`` is the backward's ``grad_output``).
    """
    devices = device_types_for(backends)

    def last(op: str, t: torch.Tensor, n: int, max_n: int, *others: torch.Tensor) -> str | None:
        key = rows_reason(t, n, max_n, align=False)
        if key is None and extra is not None and extra(op, t, n, *others) is not None:
            return "extra"
        return key

    def check_fwd(input: torch.Tensor, dim: int, half_to_float: bool) -> str | None:
        numel = input.numel()
        key = entry_reason(input, numel, "softmax_fwd", dsl, devices, limits.max_numel)
        if key is not None:
            return key
        if input.dim() == 0:
            return "scalar"
        if not _last(dim, input.dim()):
            return "dim"
        if half_to_float:
            return "half_to_float"
        n = input.shape[-1] if input.dim() else 1
        if table_declines("softmax_fwd", dsl, input, numel, n):
            return "table"
        return last("softmax_fwd", input, n, limits.max_n_fwd)

    def check_bwd(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> str | None:
        numel = output.numel()
        key = entry_reason(output, numel, "softmax_bwd", dsl, devices, limits.max_numel)
        if key is not None:
            return key
        if output.dim() == 0:
            return "scalar"
        if not _last(dim, output.dim()):
            return "dim"
        n = output.shape[-1] if output.dim() else 1
        if table_declines("softmax_bwd", dsl, output, numel, n):
            return "table"
        if (grad_output.shape != output.shape or grad_output.dtype != output.dtype or input_dtype != output.dtype
                or not grad_output.is_contiguous()):
            return "grad"
        return last("softmax_bwd", output, n, limits.max_n_bwd, grad_output)

    max_n = {"softmax_fwd": limits.max_n_fwd, "softmax_bwd": limits.max_n_bwd}

    def text(key: str, op: str, t: torch.Tensor, *others: torch.Tensor) -> str:
        n = t.shape[-1] if t.dim() else 1
        if key == "table":
            return table_reason(op, dsl, t, n)
        if key == "extra":
            return extra(op, t, n, *others) or "the DSL's own check"  # type: ignore[misc]
        return reason_text(key, input=t, devices=devices, dsl=dsl, n=n, max_n=max_n[op], extra=_EXTRA)

    return conds_from_keys("softmax", dsl, devices, text, check_fwd, check_bwd, subject_fwd="input",
                           subject_bwd=("output", "grad_output"))
