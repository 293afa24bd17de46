"""accel's own ``linear_cross_entropy``: torch 2.15's function, module and options, for any torch 2.9+.

:mod:`accel.nn` hands these out where the running torch lacks its own (torch 2.9-2.12) and torch's
objects where it has them (2.13+ builds); this module always holds accel's, so they can be compared and
used on any torch. The chunked path (``options`` given) runs accel's custom op ``accel::linear_cross_entropy``
(:mod:`accel.kernels.ops.linear_cross_entropy.op`); ``options=None`` is the reference path,
``linear`` + ``cross_entropy``.

Example:
    >>> import torch
    >>> from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions, linear_cross_entropy
    >>> x, w = torch.ones(4, 3), torch.zeros(5, 3)          # every logit 0: the loss is log(5)
    >>> t = torch.tensor([0, 1, -100, 4])                     # -100: ignored
    >>> round(linear_cross_entropy(x, w, t).item(), 4)
    1.6094
    >>> round(linear_cross_entropy(x, w, t, options=LinearCrossEntropyOptions()).item(), 4)
    1.6094
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from accel.errors import LossInputError
from accel.kernels.ops.linear_cross_entropy import op as _op

from .checks import check_inputs
from .options import (  # noqa: F401 - re-exported: this module always holds accel's objects
    MAX_CHUNK_BYTES,
    MIN_ROWS,
    LinearCrossEntropyOptions,
    ResolvedOptions,
    as_options,
    model_chunk_rows,
)

__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions", "ResolvedOptions", "linear_cross_entropy",
           "linear_cross_entropy_fp32", "model_chunk_rows"]

#: How the input errors name the function (the name accel.nn hands out where torch has no function of its own).
_WHERE = "accel.nn.functional.linear_cross_entropy"


def _chunked_applies(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor, reduction: str,
                     label_smoothing: float, prob: bool) -> bool:
    """Whether the chunked op takes this call (torch 2.15's rule); warns when ``options`` has to be ignored."""
    out_features = tuple(linear_weight.shape[1:-1])
    grad_target = target.requires_grad and torch.is_grad_enabled()
    takes_target = target.dtype == torch.int64 or (prob and target.dtype == input.dtype and not grad_target)
    applies = (label_smoothing == 0.0 and takes_target and not out_features and not torch.jit.is_tracing())
    if not applies and not torch.compiler.is_compiling():  # (a warning would break a compiled graph)
        warnings.warn(
            f"accel.nn.functional.linear_cross_entropy: options ignored, the reference path runs (it materialises "
            f"the [N, C] logits). The chunked path needs label_smoothing == 0 (got {label_smoothing}), an int64 "
            f"target or a probability target of the input's dtype that does not require grad (got {target.dtype}, "
            f"requires_grad={target.requires_grad}), no out_features (got {out_features}) and no torch.jit "
            f"tracing (reduction={reduction!r}).", UserWarning, stacklevel=3)
    return applies


def _reference(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing):
    num_classes, *out_features = linear_weight.shape[:-1]
    in_features = linear_weight.shape[-1]
    w2, b1 = linear_weight, linear_bias
    if out_features:
        rows = math.prod(out_features) * num_classes
        w2 = linear_weight.reshape(rows, in_features)
        b1 = None if linear_bias is None else linear_bias.reshape(rows)
    logits = F.linear(input, w2, b1).reshape(*input.shape[:-1], num_classes, *out_features)
    return F.cross_entropy(logits, target, weight=weight, reduction=reduction,
                           ignore_index=-100 if ignore_index is None else ignore_index,
                           label_smoothing=label_smoothing)


def _reference_fp32(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing):
    """The reference path with the cross-entropy on fp32 logits (the ``linear`` in the input's dtype)."""
    num_classes, *out_features = linear_weight.shape[:-1]
    w2, b1 = linear_weight, linear_bias
    if out_features:
        rows = math.prod(out_features) * num_classes
        w2 = linear_weight.reshape(rows, linear_weight.shape[-1])
        b1 = None if linear_bias is None else linear_bias.reshape(rows)
    logits = F.linear(input, w2, b1).float().reshape(*input.shape[:-1], num_classes, *out_features)
    target = target.float() if target.dtype.is_floating_point else target
    return F.cross_entropy(logits, target, weight=None if weight is None else weight.float(), reduction=reduction,
                           ignore_index=-100 if ignore_index is None else ignore_index,
                           label_smoothing=label_smoothing)


def linear_cross_entropy(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor, *,
                         linear_bias: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                         reduction: str = "mean", ignore_index: int | None = None, label_smoothing: float = 0.0,
                         options: LinearCrossEntropyOptions | None = None) -> torch.Tensor:
    """Cross-entropy of ``input`` linearly projected to logits (torch 2.15's ``F.linear_cross_entropy``).

    The same as ``cross_entropy(linear(input, W, b).reshape(*input.shape[:-1], C, *out_features), target,
    weight=weight, reduction=reduction, ignore_index=-100 if ignore_index is None else ignore_index,
    label_smoothing=label_smoothing)`` with ``C, *out_features, in_features = linear_weight.shape``.
    ``options=None`` computes exactly that (the reference path: the ``[N, C]`` logits exist, every autograd
    feature works). ``options=LinearCrossEntropyOptions()`` selects the chunked path: ``batch_chunk_size``
    rows at a time, the gradients computed in the forward, so only a ``[batch_chunk_size, C]`` buffer
    exists; see :class:`LinearCrossEntropyOptions` for what falls back.

    How to get the fused kernel: pass ``options`` and install accel's kernels on the GPU
    (``accel.kernels.install()``; ``accel kernels`` lists them). The chunked op
    (``torch.ops.accel.linear_cross_entropy``) then runs accel's Triton kernel on NVIDIA, AMD and Intel GPUs
    (logits matmul by cuBLAS, one kernel per chunk for the log-sum-exp, the loss and the gradient, then the
    gradient matmuls); without it, the same chunked loop in eager PyTorch.
    ``accel.kernels.explain(torch.ops.accel.linear_cross_entropy.default, ...)`` says which runs and why.

    Args:
        input: ``(in_features,)`` or ``(N, in_features)``, floating (fp16/bf16/fp32/fp64).
        linear_weight: ``(C, in_features)``, or ``(C, d_1, ..., d_K, in_features)`` for a K-dimensional
            loss (batched input only; reference path); the input's dtype; ``C >= 1``.
        target: class indices (int64, ``()``, ``(N,)`` or ``(N, d_1, ..., d_K)``, each in ``[0, C)`` or equal
            to ``ignore_index``) or class probabilities (floating, the logits' shape ``(C,)``/``(N, C, ...)``).
        linear_bias: ``(C, *out_features)`` added to the logits, or ``None``.
        weight: ``(C,)`` class weight (rescales each class's term), or ``None``.
        reduction: ``"mean"`` (weighted mean over the non-ignored rows), ``"sum"`` or ``"none"`` (per row).
        ignore_index: class-index target value that contributes neither loss nor gradient; ``None`` means
            ``-100`` for class indices (and is required for probability targets).
        label_smoothing: in ``[0, 1]``: the target is mixed with the uniform distribution by this much.
        options: :class:`LinearCrossEntropyOptions` for the chunked path, ``None`` for the reference path.
            Accel's class or torch's ``torch.nn.LinearCrossEntropyOptions`` (what
            ``accel.nn.LinearCrossEntropyOptions`` is on torch 2.13+ builds), read field by field
            (:func:`accel.nn.options.as_options`).

    Returns:
        The loss in the input's dtype: a scalar, or per row for ``reduction="none"``.

    Raises:
        LossInputError: (also ``ValueError`` and ``RuntimeError``) shapes that do not fit, ``C = 0``, a class-index
            target that is not int64, dtypes or devices that differ, ``reduction`` or ``label_smoothing`` out
            of range, ``ignore_index`` with probabilities, ``options`` of another type or asking for what accel's
            chunked path does not do (torch's ``acc_policy="balanced"``). Raised before any kernel.
        TargetRangeError: (also ``IndexError``) a class index outside ``[0, C)`` other than ``ignore_index``
            (checked in eager mode with one device-to-host read; under ``torch.compile`` or CUDA graph capture
            it is not checked, and the chunked path gives such a row a NaN loss).
        UnsupportedOperationError: on the chunked path, a second ``backward`` through the same graph without
            ``allow_retain_graph=True``.

    .. note:: Limits of the chunked path (torch's): no higher-order or forward-mode AD, no ``torch.func.grad``;
       under ``torch.compile`` the op is one opaque node and ``allow_retain_graph`` is forced on (silently: a
       warning would break the graph, as would the fallback warning, which is left out there too).
       ``options=None`` has none of these limits.

    Example:
        >>> import torch
        >>> from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions, linear_cross_entropy
        >>> x = torch.randn(6, 4, requires_grad=True)
        >>> w = torch.randn(10, 4, requires_grad=True)
        >>> t = torch.tensor([1, 2, 3, -100, 9, 0])
        >>> ref = linear_cross_entropy(x, w, t)
        >>> loss = linear_cross_entropy(x, w, t, options=LinearCrossEntropyOptions(batch_chunk_size=2))
        >>> loss.backward()
        >>> bool(torch.allclose(loss, ref)), x.grad.shape
        (True, torch.Size([6, 4]))
    """
    return _loss(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                 options, wide=False)


def linear_cross_entropy_fp32(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor, *,
                              linear_bias: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                              reduction: str = "mean", ignore_index: int | None = None, label_smoothing: float = 0.0,
                              options: LinearCrossEntropyOptions | None = None,
                              check_target_range: bool = True) -> torch.Tensor:
    """:func:`linear_cross_entropy` with the loss in fp32 (fp64 for fp64 input), as a training loop reports it.

    The same arguments, checks, paths and gradients as :func:`linear_cross_entropy`; only the returned loss
    keeps the precision the loss was computed in instead of being rounded to the input's dtype. Hugging
    Face's ``ForCausalLMLoss`` computes ``cross_entropy`` on ``logits.float()``: its loss is fp32, and a bf16
    loss differs from it by up to bf16's half spacing (``10.7718`` reads ``10.75``: 2e-3 relative). The
    reference path here is exactly HF's (``linear`` in the input dtype, ``cross_entropy`` on the fp32 logits);
    the chunked path returns its op's fp32 loss as it is (the row step computes in fp32).

    Args:
        check_target_range: check the class indices on the host before anything runs (default; one
            device-to-host read, which on a GPU waits for every queued kernel: a stall per training step).
            ``False`` skips it: on the chunked path an index outside ``[0, C)`` other than ``ignore_index``
            gives a NaN loss instead of :class:`TargetRangeError` (the reference path's ``cross_entropy``
            raises its own error or asserts on the device). The other arguments: :func:`linear_cross_entropy`.

    Returns:
        The loss in fp32 (fp64 for fp64 input): a scalar, or ``[N]`` for ``reduction="none"``.

    Raises:
        As :func:`linear_cross_entropy`.

    Example:
        >>> import torch
        >>> from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions, linear_cross_entropy_fp32
        >>> x, w = torch.ones(4, 3, dtype=torch.bfloat16), torch.zeros(5, 3, dtype=torch.bfloat16)
        >>> loss = linear_cross_entropy_fp32(x, w, torch.tensor([0, 1, 2, 4]), options=LinearCrossEntropyOptions())
        >>> loss.dtype, round(loss.item(), 6)   # log(5), not bf16's 1.6094 -> 1.609375
        (torch.float32, 1.609438)
    """
    return _loss(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                 options, wide=True, check_range=check_target_range)


def _loss(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing, options,
          wide: bool, check_range: bool = True) -> torch.Tensor:
    options = as_options(options, _WHERE)  # torch's class (accel.nn's name on torch 2.13+) read field by field
    prob = check_inputs(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
                         options, check_range)
    if options is None or not _chunked_applies(input, linear_weight, target, reduction, label_smoothing, prob):
        if wide and input.dtype in (torch.float16, torch.bfloat16):  # HF's ForCausalLMLoss: fp32 logits
            return _reference_fp32(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                                   label_smoothing)
        return _reference(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing)
    unbatched = input.dim() == 1
    if unbatched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    n, d = input.shape
    c = linear_weight.shape[0]
    resolved = options.resolve(n, d, c, input.dtype, input.device, prob)
    retain = resolved.allow_retain_graph
    if not retain and reduction != "none" and torch.compiler.is_compiling():
        # silently (a warning would break the graph): the second-backward guard is Python-side state that a
        # compiled graph does not keep; costs one gradient-sized copy per call
        retain = True
    grad_on = torch.is_grad_enabled()
    loss = _op.apply(
        input, linear_weight, target, linear_bias, weight, reduction, -100 if ignore_index is None else ignore_index,
        float(label_smoothing), resolved.batch_chunk_size, resolved.acc_policy, resolved.acc_dtype, retain,
        input.requires_grad and grad_on, linear_weight.requires_grad and grad_on,
        linear_bias is not None and linear_bias.requires_grad and grad_on)[0]
    if not wide:
        loss = loss.to(input.dtype)
    return loss.squeeze(0) if unbatched and reduction == "none" else loss


class LinearCrossEntropyLoss(torch.nn.Module):
    """An LM head and its cross-entropy in one module (torch 2.15's ``torch.nn.LinearCrossEntropyLoss``).

    Holds ``self.linear`` (an ``nn.Linear(in_features, C * prod(out_features), bias=bias)``: flat storage,
    reshaped in :meth:`forward`) and the class ``weight`` buffer; calls :func:`linear_cross_entropy`. Its
    ``state_dict`` has torch's keys (``linear.weight``, ``linear.bias``, ``weight``).

    Args:
        in_features: size of each input row.
        num_classes: ``C``.
        out_features: ``(d_1, ..., d_K)`` for a K-dimensional loss (the reference path), default ``()``.
        bias: give the projection a learnable bias.
        device, dtype: of the projection's parameters.
        reduction, weight, ignore_index, label_smoothing, options: as :func:`linear_cross_entropy`.

    Raises:
        LossInputError: ``weight`` not of shape ``(C,)``, ``label_smoothing`` outside ``[0, 1]``.

    Example:
        >>> import torch
        >>> from accel.nn.linear_cross_entropy import LinearCrossEntropyLoss, LinearCrossEntropyOptions
        >>> head = LinearCrossEntropyLoss(8, 100, options=LinearCrossEntropyOptions())
        >>> loss = head(torch.randn(16, 8), torch.randint(0, 100, (16,)))
        >>> loss.backward(); head.linear.weight.grad.shape
        torch.Size([100, 8])
    """

    def __init__(self, in_features: int, num_classes: int, *, out_features: tuple[int, ...] = (), bias: bool = False,
                 device=None, dtype=None, reduction: str = "mean", weight: torch.Tensor | None = None,
                 ignore_index: int | None = None, label_smoothing: float = 0.0,
                 options: LinearCrossEntropyOptions | None = None) -> None:
        super().__init__()
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise LossInputError(f"LinearCrossEntropyLoss: weight is {list(weight.shape)}. It must be "
                                 f"[{num_classes}] (one weight per class), or None.")
        if not 0.0 <= label_smoothing <= 1.0:
            raise LossInputError(f"LinearCrossEntropyLoss: label_smoothing={label_smoothing}. It must lie in [0, 1].")
        self.register_buffer("weight", weight)
        self.reduction = reduction
        self.num_classes = num_classes
        self.out_features = tuple(out_features)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.linear = torch.nn.Linear(in_features, math.prod(out_features, start=num_classes), bias=bias,
                                      device=device, dtype=dtype)
        self.options = options

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of ``input`` (``(in_features,)`` or ``(N, in_features)``) against ``target``."""
        shape = (self.num_classes, *self.out_features)
        linear_weight = self.linear.weight.reshape(*shape, self.linear.in_features)
        linear_bias = None if self.linear.bias is None else self.linear.bias.reshape(shape)
        return linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                    reduction=self.reduction, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self) -> str:
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, reduction={self.reduction}, "
                f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing}, options={self.options}")
