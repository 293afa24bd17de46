"""Typed errors for input the linear cross-entropy functions cannot take, raised before anything runs (shapes,
dtypes, devices, reduction and smoothing, class-index ranges). Torch's own errors for the same input are
``RuntimeError``/``ValueError``/``IndexError``, all of which these errors also are.
"""

from __future__ import annotations

import torch

from accel.errors import LossInputError, TargetRangeError

__all__ = ["REDUCTIONS", "check_inputs", "check_target_range"]

REDUCTIONS = ("none", "mean", "sum")
#: How the errors name the function by default (the name accel.nn hands out where torch has none of its own).
WHERE = "accel.nn.functional.linear_cross_entropy"


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _check_per_class(where: str, label: str, noun: str, t: torch.Tensor, shape: tuple[int, ...],
                     input: torch.Tensor, chunked: bool) -> None:
    """Check an optional per-class tensor (``linear_bias``, the class ``weight``): floating, of ``shape``, and of
    the input's dtype on the reference path (``chunked`` false); ``label`` names it in the message, ``noun`` in
    the fix."""
    if tuple(t.shape) != shape or not t.dtype.is_floating_point:
        raise LossInputError(f"{where}: {label} is {_shape(t)} {t.dtype}. It must be a floating {list(shape)}, "
                             f"or None.")
    if t.dtype != input.dtype and not chunked:
        raise LossInputError(f"{where}: {label} is {t.dtype}, input {input.dtype}. The reference path "
                             f"(options=None) needs them equal: cast the {noun}.")


def check_inputs(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                  linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                  ignore_index: int | None, label_smoothing: float, options: object, check_range: bool = True,
                  where: str = WHERE) -> bool:
    """Typed errors for input the loss cannot take, before anything runs; returns whether ``target`` holds
    probabilities. Torch's own errors for the same input are ``RuntimeError``/``ValueError``/``IndexError``,
    all of which these errors also are. ``options``: already read by :func:`as_options`; ``where``: the
    function the messages name."""
    for name, t in (("input", input), ("linear_weight", linear_weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise LossInputError(f"{where}: {name} is {type(t).__name__}. It must be a tensor.")
    if reduction not in REDUCTIONS:
        raise LossInputError(f"{where}: reduction={reduction!r}. It must be one of {', '.join(map(repr, REDUCTIONS))}.")
    if not 0.0 <= label_smoothing <= 1.0:
        raise LossInputError(f"{where}: label_smoothing={label_smoothing}. It must lie in [0, 1].")
    if input.dim() not in (1, 2):
        raise LossInputError(f"{where}: input is {_shape(input)}. It must be (in_features,) or (N, in_features): "
                             f"flatten sequence dims first (input.flatten(0, -2), target.flatten()).")
    if not input.dtype.is_floating_point:
        raise LossInputError(f"{where}: input is {input.dtype}. It must be a floating dtype.")
    if linear_weight.dim() < 2 or linear_weight.shape[-1] != input.shape[-1]:
        raise LossInputError(f"{where}: linear_weight is {_shape(linear_weight)} for input {_shape(input)}. It must be "
                             f"(C, *out_features, in_features) with in_features = {input.shape[-1]}.")
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if num_classes < 1:
        raise LossInputError(f"{where}: linear_weight has C = {num_classes} classes. It needs at least 1 (a "
                             f"vocabulary of 0 has no cross-entropy).")
    if linear_weight.dtype != input.dtype:
        raise LossInputError(f"{where}: linear_weight is {linear_weight.dtype}, input {input.dtype}. They must be "
                             f"the same dtype: cast one (or run under torch.autocast).")
    if out_features and input.dim() == 1:
        raise LossInputError(f"{where}: K-dimensional loss (linear_weight {_shape(linear_weight)}) needs batched "
                             f"input (N, {input.shape[-1]}), got {_shape(input)}. Use input.unsqueeze(0).")
    chunked = options is not None
    tensors = [("linear_weight", linear_weight), ("target", target)]
    if linear_bias is not None:
        _check_per_class(where, "linear_bias", "bias", linear_bias, (num_classes, *out_features), input, chunked)
        tensors.append(("linear_bias", linear_bias))
    if weight is not None:
        _check_per_class(where, "weight (class weight)", "weight", weight, (num_classes,), input, chunked)
        tensors.append(("weight", weight))
    for name, t in tensors:
        if t.device != input.device:
            raise LossInputError(f"{where}: {name} is on {t.device}, input on {input.device}. Move it to "
                                 f"{input.device}.")
    batch = tuple(input.shape[:-1])
    logits_shape = (*batch, num_classes, *out_features)
    prob = tuple(target.shape) == logits_shape
    if prob:
        if not target.dtype.is_floating_point:
            raise LossInputError(f"{where}: target {_shape(target)} has the logits' shape, so it holds class "
                                 f"probabilities, but is {target.dtype}. Pass a floating target, or class indices of "
                                 f"shape {[*batch, *out_features]}.")
        if ignore_index is not None:
            raise LossInputError(f"{where}: ignore_index={ignore_index} with a probability target. ignore_index "
                                 f"applies to class indices only: leave it None.")
        return True
    index_shape = (*batch, *out_features)
    if tuple(target.shape) != index_shape:
        raise LossInputError(f"{where}: target is {_shape(target)} for input {_shape(input)} and linear_weight "
                             f"{_shape(linear_weight)}. It must be class indices {list(index_shape)} or "
                             f"probabilities {list(logits_shape)}.")
    if target.dtype not in (torch.int64, torch.uint8):
        raise LossInputError(f"{where}: class-index target is {target.dtype}. It must be torch.int64 (torch.long): "
                             f"target.long().")
    if check_range:
        check_target_range(target, num_classes, -100 if ignore_index is None else ignore_index, where)
    return False


def check_target_range(target: torch.Tensor, num_classes: int, ignore_index: int, where: str = WHERE) -> None:
    """Raise :class:`TargetRangeError` for a class index outside ``[0, C)`` that is not ``ignore_index``. One
    device-to-host read; skipped while compiling or capturing a CUDA graph (no read is possible there: the
    chunked path gives such rows a NaN loss instead)."""
    if target.numel() == 0 or torch.compiler.is_compiling():
        return
    if target.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= num_classes))
    if bool(bad.any()):
        value = int(target[bad][0])
        raise TargetRangeError(f"{where}: target holds class {value} (and "
                               f"{int(bad.sum())} out-of-range value(s) in all). Class indices must lie in "
                               f"[0, {num_classes}) or equal ignore_index ({ignore_index}).")
