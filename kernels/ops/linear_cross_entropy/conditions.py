"""The ``cond`` of accel's linear cross-entropy kernel: vendor, dtypes, shapes, arguments, tuning table.

Each check returns a reason key when the kernel must not run, ``None`` when it may; ``why_not`` turns the
key into a sentence for :func:`accel.kernels.explain`. Shapes, dtypes and devices only (works on meta and
fake tensors, reads no values). Input the ops reject (:func:`.reference.check_op_args`) is declined here,
so the op's default kernel raises its typed error instead of the kernel failing. The tuning table is
keyed by ``[M, N] = [tokens, classes]`` (``linear_cross_entropy_fwd`` / ``_bwd``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from accel.kernels.ops.conds import (
    DEVICE_REASONS,
    arch,
    conds_from_keys,
    device_types_for,
    entry_reason,
    key_text,
    table_declines,
)
from accel.kernels.tuning import table

from .reference import LOW_PRECISION

__all__ = ["MAX_CLASSES", "check_forward", "make_conds", "make_torch_nn_conds", "table_text", "upstream_takes"]

#: Most classes a row may have (the kernel's column offsets are int32 within a row).
MAX_CLASSES = 2**31 - 1

_REASONS = {
    **DEVICE_REASONS,
    "numel_big": "too many elements for the {dsl} kernel",
    "shape": "input not [N, D] or linear_weight not [C, D] with 1 <= C <= 2**31 - 1",
    "linear_weight": "linear_weight differs from input in dtype or device",
    "bias": "linear_bias is not a floating [C] tensor on the input's device",
    "weight": "weight (class weight) is not a floating [C] tensor on the input's device",
    "target": "target is neither int64 [N] nor a row-contiguous [N, C] of the input's dtype, on the input's device",
    "args": "reduction, label_smoothing, batch_chunk_size, acc_policy, acc_dtype, softcap or z_loss outside what "
            "the op takes",
    "grad_loss": "grad_loss is not a floating [N] tensor on the input's device",
    "upstream": "torch's own CuTeDSL override of this op takes the call (accel's kernel leaves it to upstream)",
}


def _vector_ok(t: torch.Tensor | None, c: int, device: torch.device) -> bool:
    return t is None or (t.dim() == 1 and t.shape[0] == c and t.dtype.is_floating_point and t.device == device)


def check_forward(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                  linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                  label_smoothing: float, batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype,
                  devices: dict[str, str | None], dsl: str, op: str, softcap: float = 0.0,
                  z_loss: float = 0.0) -> str | None:
    """The reason key for one call (``None``: the kernel takes it); cheapest rejections first."""
    key = entry_reason(input, input.numel(), op, dsl, devices, 1 << 62)
    if key is not None:
        return key
    if input.dim() != 2 or linear_weight.dim() != 2 or linear_weight.shape[1] != input.shape[1]:
        return "shape"
    n, c = input.shape[0], linear_weight.shape[0]
    if not 1 <= c <= MAX_CLASSES:
        return "shape"
    if linear_weight.dtype != input.dtype or linear_weight.device != input.device:
        return "linear_weight"
    device = input.device
    if not _vector_ok(linear_bias, c, device):
        return "bias"
    if not _vector_ok(weight, c, device):
        return "weight"
    if target.device != device:
        return "target"
    if target.dtype.is_floating_point:
        if target.dim() != 2 or tuple(target.shape) != (n, c) or target.dtype != input.dtype or target.stride(1) != 1:
            return "target"
    elif target.dtype != torch.int64 or target.dim() != 1 or target.shape[0] != n:
        return "target"
    if (reduction not in ("mean", "sum", "none") or not 0.0 <= label_smoothing <= 1.0
            or not isinstance(batch_chunk_size, (int, torch.SymInt)) or batch_chunk_size < 1
            or acc_policy not in ("compact", "accurate")
            or not (acc_dtype == input.dtype or (input.dtype in LOW_PRECISION and acc_dtype == torch.float32))
            or not (math.isfinite(softcap) and softcap >= 0.0) or not math.isfinite(z_loss)):
        return "args"
    if table_declines(op, dsl, input, n * c, c):
        return "table"
    return None


def table_text(op: str, dsl: str, input: torch.Tensor, linear_weight: torch.Tensor) -> str:
    """The sentence for reason key ``"table"``: under the size floor (the input's elements), or what the tuning
    table says for ``[tokens, classes]``."""
    least = table.floor(op, dsl)
    n, c = input.shape[0], linear_weight.shape[0]
    why = table.route(op, dsl, arch(input.device), table.dtype_name(input.dtype), n, c)
    if input.numel() < least:
        return (f"{input.numel()} input elements < {least}, the {dsl} kernel's floor (the least over every arch's"
                f" tuning table, tuning.floor): the op's eager chunked loop runs" + (f"; here: {why}" if why else ""))
    return why or "tuning table"


#: The parameters the sentences are about (:func:`_texts`).
_SUBJECTS = ("input", "linear_weight")


def _texts(dsl: str, devices: dict[str, str | None], table_op: str | None = None) -> Callable[..., str]:
    """``text(key, op, input, linear_weight)``: the sentence for a reason key of ``dsl``'s conds
    (:func:`table_text` for ``"table"``, read for ``table_op`` where given, else for ``op``)."""

    def text(key: str, op: str, input: torch.Tensor, linear_weight: torch.Tensor) -> str:
        if key == "table":
            return table_text(table_op or op, dsl, input, linear_weight)
        return key_text(key, input, op, dsl, devices, _REASONS)

    return text


def make_conds(dsl: str, backends: Sequence[str]) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(forward cond, backward cond)`` with the two ops' signatures, each with ``why_not``, ``floor`` and
    ``cacheable`` (:func:`accel.kernels.ops.conds.conds_from_keys`; the sentences name ``input``'s device and
    dtype, the tuning table's ``[tokens, classes]`` of ``input`` and ``linear_weight``)."""
    devices = device_types_for(backends)

    def key_fwd(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
                compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0, z_loss=0.0):
        return check_forward(input, linear_weight, target, linear_bias, weight, reduction, label_smoothing,
                             batch_chunk_size, acc_policy, acc_dtype, devices, dsl, "linear_cross_entropy_fwd",
                             softcap, z_loss)

    def key_bwd(grad_loss, input, linear_weight, target, linear_bias, weight, ignore_index, label_smoothing,
                batch_chunk_size, acc_policy, acc_dtype, compute_input_grad, compute_linear_weight_grad,
                compute_linear_bias_grad, softcap=0.0, z_loss=0.0):
        key = check_forward(input, linear_weight, target, linear_bias, weight, "none", label_smoothing,
                            batch_chunk_size, acc_policy, acc_dtype, devices, dsl, "linear_cross_entropy_bwd",
                            softcap, z_loss)
        if key is None and (grad_loss.dim() != 1 or grad_loss.shape[0] != input.shape[0]
                            or not grad_loss.dtype.is_floating_point or grad_loss.device != input.device):
            return "grad_loss"
        return key

    return conds_from_keys("linear_cross_entropy", dsl, devices, _texts(dsl, devices), key_fwd, key_bwd,
                           subject_fwd=_SUBJECTS, subject_bwd=_SUBJECTS)


def upstream_takes(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                   linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                   label_smoothing: float, acc_policy: str, acc_dtype: torch.dtype) -> bool:
    """Whether torch 2.15's CuTeDSL override of ``torch_nn::_linear_cross_entropy_batch_chunked`` takes a call,
    by its documented gate: an NVIDIA GPU of compute capability 8.0+, bf16/fp16 input and weight, fp32
    accumulation under ``"compact"``, int64 ``[N]`` targets, ``"mean"``/``"sum"``, no label smoothing, every
    tensor on the input's device. Shapes and dtypes only; the capability is read only for such calls."""
    device = input.device
    if device.type != "cuda" or torch.version.hip or input.dtype not in LOW_PRECISION:
        return False
    if (linear_weight.dtype != input.dtype or acc_dtype != torch.float32 or acc_policy != "compact"
            or target.dtype != torch.int64 or target.dim() != 1 or reduction not in ("mean", "sum")
            or label_smoothing != 0.0 or input.dim() != 2 or linear_weight.dim() != 2
            or not 1 <= linear_weight.shape[0] <= MAX_CLASSES):
        return False
    if any(t is not None and t.device != device for t in (linear_weight, target, linear_bias, weight)):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8


def make_torch_nn_conds(dsl: str, backends: Sequence[str], upstream: Callable[[], frozenset[str]]
                        ) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """``(cond of torch_nn::_linear_cross_entropy_batch_chunked, cond of ..._no_reduction)`` (torch's chunked
    ops, torch 2.13+): as the forward cond of :func:`make_conds`, and the first declines what torch's own
    CuTeDSL override takes wherever ``upstream()`` (the op symbols torch's registry overrides itself) names
    the op, so the two coexist at one dispatch key. Torch's override of the second op is its eager body, not
    a kernel: accel's takes precedence there."""
    devices = device_types_for(backends)
    table_op = "linear_cross_entropy_fwd"
    scalar = "_linear_cross_entropy_batch_chunked"

    def key_scalar(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                   batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
                   compute_linear_weight_grad, compute_linear_bias_grad):
        key = check_forward(input, linear_weight, target, linear_bias, weight, reduction, label_smoothing,
                            batch_chunk_size, acc_policy, acc_dtype, devices, dsl, table_op)
        if key is None and scalar in upstream() and upstream_takes(
                input, linear_weight, target, linear_bias, weight, reduction, label_smoothing, acc_policy, acc_dtype):
            return "upstream"
        return key

    def key_none(input, linear_weight, target, linear_bias, weight, ignore_index, batch_chunk_size, acc_policy,
                 acc_dtype):
        return check_forward(input, linear_weight, target, linear_bias, weight, "none", 0.0, batch_chunk_size,
                             acc_policy, acc_dtype, devices, dsl, table_op)

    fwd, none = conds_from_keys("linear_cross_entropy", dsl, devices, _texts(dsl, devices, table_op), key_scalar,
                                key_none, subject_fwd=_SUBJECTS, subject_bwd=_SUBJECTS)
    none.floor = fwd.floor
    fwd.cacheable = False  # upstream() may change between calls (torch registers its overrides lazily)
    return fwd, none
