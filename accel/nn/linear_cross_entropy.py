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

import dataclasses
import math
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F

from accel.errors import LossInputError, TargetRangeError
from accel.kernels.ops.linear_cross_entropy import op as _op

__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions", "ResolvedOptions", "linear_cross_entropy",
           "linear_cross_entropy_fp32", "model_chunk_rows"]

_POLICIES = ("auto", "accurate", "compact")
_ACC_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_REDUCTIONS = ("none", "mean", "sum")


class ResolvedOptions(NamedTuple):
    """:meth:`LinearCrossEntropyOptions.resolve`'s answer for one call: what the chunked op is given."""

    batch_chunk_size: int
    acc_policy: str
    acc_dtype: torch.dtype
    allow_retain_graph: bool


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _mixed_mm_dtype(dtype: torch.dtype, device: torch.device | None) -> bool:
    """Whether ``device`` has matmuls of ``dtype`` (fp16/bf16) operands with fp32 results: CUDA 7.0+ for fp16,
    8.0+ for bf16 (ROCm builds report their own capability), and the CPU."""
    if device is None or dtype not in (torch.float16, torch.bfloat16):
        return False
    if device.type == "cpu":
        return True
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    major, _ = torch.cuda.get_device_capability(device)
    return major >= (8 if dtype == torch.bfloat16 else 7)


@dataclasses.dataclass(frozen=True)
class LinearCrossEntropyOptions:
    """How :func:`linear_cross_entropy` chunks (torch 2.15's ``torch.nn.LinearCrossEntropyOptions``).

    Passing an instance selects the chunked path: the batch is processed ``batch_chunk_size`` rows at a
    time, so the ``[N, C]`` logits never exist (one ``[batch_chunk_size, C]`` buffer does). Worth it when
    ``C`` (the vocabulary) is much larger than ``in_features``. Cases the chunked path does not take
    (``label_smoothing != 0``, K-dimensional loss, a probability target of another dtype than the input's
    or one that requires grad, ``torch.jit`` tracing) run the reference path, with a warning.

    Args:
        allow_retain_graph: keep the gradients computed in the forward so that ``backward`` may run twice
            (``retain_graph=True``); one extra gradient-sized allocation per call. ``"mean"``/``"sum"`` only
            (``"none"`` recomputes its gradients in the backward). Forced on, with a warning, under
            ``torch.compile``.
        batch_chunk_size: rows per chunk (an int >= 1), or ``None``: from ``chunking_method``, else one chunk.
        chunking_method: ``"auto"`` (``"aspect_ratio"``, and for ``acc_policy="compact"`` at most
            ``N * C / (4 * in_features)`` rows for class-index targets, ``N / 2`` for probabilities, each
            rounded down to a power of two), ``"aspect_ratio"`` (a chunk's logits as large as the input:
            ``next_pow2(ceil(N / ceil(C / in_features)))`` rows), ``"aspect_ratio:K"`` (that divided by
            ``K``), or ``None`` (use ``batch_chunk_size``). An explicit ``batch_chunk_size`` turns
            ``"auto"`` off; with another method the two must agree.
        acc_policy: ``"compact"`` (logits buffer and ``grad_W`` accumulation in the input dtype: the least
            memory), ``"accurate"`` (both in ``acc_dtype``: one ``[C, in_features]`` scratch more), or
            ``"auto"``: ``"accurate"`` for fp16/bf16 on the CPU (whose low-precision matmuls are emulated),
            ``"compact"`` elsewhere.
        acc_dtype: accumulation dtype, or ``None``: fp32 for fp16/bf16 input under ``acc_policy="auto"`` where
            the device has fp32-result matmuls of those dtypes (CUDA 8.0+ for bf16, 7.0+ for fp16, CPU),
            else the input dtype. Only fp32 may widen fp16/bf16.

    Raises:
        LossInputError: (a ``ValueError``) an unknown ``acc_policy`` or ``chunking_method``, a
            ``batch_chunk_size`` that is not a positive int, an ``acc_dtype`` not among fp16/bf16/fp32/fp64.

    Example:
        >>> import torch
        >>> from accel.nn.linear_cross_entropy import LinearCrossEntropyOptions
        >>> LinearCrossEntropyOptions().resolve(8192, 4096, 128256, torch.bfloat16, torch.device("cpu"))
        ResolvedOptions(batch_chunk_size=256, acc_policy='accurate', acc_dtype=torch.float32, allow_retain_graph=False)
    """

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if self.acc_policy not in _POLICIES:
            raise LossInputError(f"LinearCrossEntropyOptions: acc_policy={self.acc_policy!r}. It must be one of "
                                 f"{', '.join(map(repr, _POLICIES))}.")
        method = self.chunking_method
        if method is not None and method != "auto":
            name, sep, factor = str(method).partition(":")
            if name != "aspect_ratio" or (sep and not (factor.isdigit() and int(factor) > 0)):
                raise LossInputError(f"LinearCrossEntropyOptions: chunking_method={method!r}. It must be 'auto', "
                                     f"'aspect_ratio', 'aspect_ratio:K' with an integer K >= 1, or None.")
        size = self.batch_chunk_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise LossInputError(f"LinearCrossEntropyOptions: batch_chunk_size={size!r}. It must be an int >= 1 "
                                 f"or None.")
        if self.acc_dtype is not None and self.acc_dtype not in _ACC_DTYPES:
            raise LossInputError(f"LinearCrossEntropyOptions: acc_dtype={self.acc_dtype!r}. It must be None or one "
                                 f"of torch.float16, torch.bfloat16, torch.float32, torch.float64.")

    def resolve(self, num_batches: int, in_features: int, num_classes: int, dtype: torch.dtype,
                device: torch.device | None = None, prob_target: bool = False) -> ResolvedOptions:
        """The concrete settings for one call: ``"auto"`` and ``None`` decided (see the class).

        Args:
            num_batches: rows ``N`` of the input.
            in_features: ``D``.
            num_classes: ``C``.
            dtype: the input's dtype.
            device: the input's device (``None``: the policy ``"compact"``, the accumulation dtype the input's).
            prob_target: the target holds class probabilities (another cap under ``"auto"``).

        Raises:
            LossInputError: ``batch_chunk_size`` and an explicit ``chunking_method`` give different sizes.
        """
        policy = self.acc_policy
        if policy == "auto":
            low_cpu = device is not None and device.type == "cpu" and dtype in (torch.float16, torch.bfloat16)
            policy = "accurate" if low_cpu else "compact"
        method = self.chunking_method
        auto = method == "auto"
        if auto and self.batch_chunk_size is not None:
            method = None
        elif auto:
            method = "aspect_ratio"
        size = num_batches if self.batch_chunk_size is None else min(self.batch_chunk_size, num_batches)
        if method is not None:
            _, _, factor = method.partition(":")
            growth = -(-num_classes // max(in_features, 1))
            size = min(_next_pow2(-(-num_batches // max(growth, 1))) // int(factor or 1), num_batches)
            if auto and policy == "compact":  # never above the unchunked reference's peak
                cap = num_batches // 2 if prob_target else num_batches * num_classes // (4 * max(in_features, 1))
                size = max(1, min(size, _prev_pow2(max(cap, 1))))
            if self.batch_chunk_size is not None and self.batch_chunk_size != size:
                raise LossInputError(
                    f"LinearCrossEntropyOptions: batch_chunk_size={self.batch_chunk_size} and chunking_method="
                    f"{self.chunking_method!r} give {self.batch_chunk_size} and {size} rows per chunk. Pass one of "
                    f"them (chunking_method=None to use batch_chunk_size).")
        acc = self.acc_dtype
        if acc is None:
            acc = torch.float32 if self.acc_policy == "auto" and _mixed_mm_dtype(dtype, device) else dtype
        return ResolvedOptions(max(1, size), policy, acc, self.allow_retain_graph)


#: Least rows per chunk :func:`model_chunk_rows` gives (fewer only where there are fewer tokens or the memory
#: cap says so). Every chunk re-reads the head's weight ``[C, D]`` twice (logits, ``grad_input``) and reads and
#: writes the ``grad_W`` accumulator: ``t = 2 * e + 2 * a`` bytes per weight element (``e`` the input's element
#: size, ``a`` the accumulator's: 8 for bf16 with fp32, 4 compact) against ``6 * rows`` FLOPs per weight element
#: (the three matmuls). The chunk's matmuls stay compute-bound while ``6 * rows / t`` is at least the GPU's
#: ridge point (dense bf16 peak FLOP/s over memory B/s, from the vendors' datasheets: H200 989 TFLOP/s / 4.8 TB/s
#: ~206, B200 2.25 PFLOP/s / 8 TB/s ~281, MI300X 1307 TFLOP/s / 5.3 TB/s ~247): ``rows >= 300 * 12 / 6 = 600``,
#: rounded up to a power of two. (Qwen3's 64-row chunks from the aspect-ratio rule alone, D 1024 and C 151936,
#: re-read the 311 MB weight 128 times per step: ~25 ms of traffic at the H200's 4.8 TB/s.)
#: ``benchmarks/linear_cross_entropy.py --chunk-sweep`` times 64 to 4096 rows at model shapes.
MIN_ROWS = 1024
#: Most bytes of a chunk's buffers (the logits chunk, and the separate gradient buffer where accurate mode on
#: cuBLAS has one) :func:`model_chunk_rows` allows: far below the ``[N, C]`` logits the unfused loss holds
#: (Qwen3-style, 8192 x 151936: 2.5 GB bf16 and 5 GB more for the fp32 copy) and at most ~3x the head's weight
#: at the vocabularies of today's models (the same sweep reports each row count's peak memory).
MAX_CHUNK_BYTES = 1 << 30


def model_chunk_rows(num_tokens: int, in_features: int, num_classes: int, dtype: torch.dtype,
                     device: torch.device | None = None, *, acc_policy: str = "auto",
                     min_rows: int = MIN_ROWS, max_chunk_bytes: int = MAX_CHUNK_BYTES) -> int:
    """Rows per chunk for a model's LM-head loss: large enough that the matmuls stay compute-bound, bounded in
    memory. What :func:`accel.integrations.transformers.patch` passes as ``batch_chunk_size``.

    The rule (each term's reasoning at :data:`MIN_ROWS` and :data:`MAX_CHUNK_BYTES`)::

        aspect = next_pow2(ceil(N / ceil(C / D)))          # a chunk's logits as large as the input (torch's rule)
        weight = min(prev_pow2(D * e // b), 2 * min_rows)   # a chunk's buffers as large as the head's weight
        rows   = min(N, max(aspect, min_rows, weight), prev_pow2(max_chunk_bytes // (C * b)))

    with ``b`` the chunk buffers' bytes per logit: the input's element size under ``"compact"``, the
    accumulation dtype's (plus the input's where the device has fp32-result low-precision matmuls: a separate
    gradient buffer) under ``"accurate"``, and ``e`` the input's element size. The aspect-ratio rule alone gives
    vocabulary-heavy models tiny chunks (Qwen3-style, D 1024, C 151936, N 8192: 64 rows, 128 chunks); this gives
    1024 (compact bf16). The ``weight`` term lets a chunk's buffers grow to the head's own size (the weight
    gradient the loss holds anyway is as large), up to ``2 * min_rows``: fewer passes over ``grad_W``, which
    each chunk reads and writes (H200, 8192 x 2048 x 32000 bf16: 2048 rows 5.29 ms, 1024 rows 5.65 ms, the
    model's peak unchanged: ``benchmarks/results/h200/session18``).

    Args:
        num_tokens: ``N``, rows of the loss (tokens of the batch).
        in_features: ``D``, the hidden size.
        num_classes: ``C``, the vocabulary.
        dtype: the input's dtype.
        device: the input's device (decides ``"auto"``'s policy and accumulation dtype as
            :meth:`LinearCrossEntropyOptions.resolve` does).
        acc_policy: ``"auto"``, ``"compact"`` or ``"accurate"``.
        min_rows: the compute-bound floor (default :data:`MIN_ROWS`).
        max_chunk_bytes: the memory cap (default :data:`MAX_CHUNK_BYTES`).

    Returns:
        Rows per chunk, an int in ``[1, max(N, 1)]``.

    Raises:
        LossInputError: a size below 1 (``N`` may be 0), an unknown ``acc_policy``.

    Example:
        >>> import torch
        >>> from accel.nn.linear_cross_entropy import model_chunk_rows
        >>> model_chunk_rows(8192, 1024, 151936, torch.bfloat16, torch.device("cuda"))  # Qwen3-style
        1024
        >>> model_chunk_rows(8192, 2048, 32000, torch.bfloat16, torch.device("cuda"))   # Llama, d 2048
        2048
        >>> model_chunk_rows(100, 64, 320, torch.float32)                                 # fewer tokens: one chunk
        100
    """
    for name, v in (("in_features", in_features), ("num_classes", num_classes), ("min_rows", min_rows),
                    ("max_chunk_bytes", max_chunk_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LossInputError(f"model_chunk_rows: {name}={v!r}. It must be an int >= 1.")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
        raise LossInputError(f"model_chunk_rows: num_tokens={num_tokens!r}. It must be an int >= 0.")
    resolved = LinearCrossEntropyOptions(acc_policy=acc_policy).resolve(max(num_tokens, 1), in_features, num_classes,
                                                                        dtype, device)
    elem = dtype.itemsize
    if resolved.acc_policy == "accurate" and resolved.acc_dtype != dtype:
        per = resolved.acc_dtype.itemsize
        # CUDA and ROCm builds (device type "cuda"): the BLAS path keeps a gradient buffer in the input dtype too
        per += elem if (device is not None and device.type == "cuda") else 0
    else:
        per = elem
    growth = -(-num_classes // in_features)
    aspect = _next_pow2(-(-max(num_tokens, 1) // growth))
    weight = _prev_pow2(max(1, in_features * elem // per))
    weight = min(weight, 2 * min_rows)
    cap = _prev_pow2(max(1, max_chunk_bytes // (num_classes * per)))
    return max(1, min(max(num_tokens, 1), max(aspect, min_rows, weight), cap))


def _prev_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


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


def _check_inputs(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                  linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                  ignore_index: int | None, label_smoothing: float, options: object, check_range: bool = True) -> bool:
    """Typed errors for input the loss cannot take, before anything runs; returns whether ``target`` holds
    probabilities. Torch's own errors for the same input are ``RuntimeError``/``ValueError``/``IndexError``,
    all of which these errors also are."""
    where = "accel.nn.functional.linear_cross_entropy"
    for name, t in (("input", input), ("linear_weight", linear_weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise LossInputError(f"{where}: {name} is {type(t).__name__}. It must be a tensor.")
    if options is not None and not isinstance(options, LinearCrossEntropyOptions):
        raise LossInputError(f"{where}: options is {type(options).__name__}. It must be a "
                             f"LinearCrossEntropyOptions or None.")
    if reduction not in _REDUCTIONS:
        raise LossInputError(f"{where}: reduction={reduction!r}. It must be one of {', '.join(map(repr, _REDUCTIONS))}.")
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
        _check_target_range(target, num_classes, -100 if ignore_index is None else ignore_index)
    return False


def _check_target_range(target: torch.Tensor, num_classes: int, ignore_index: int) -> None:
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
        raise TargetRangeError(f"accel.nn.functional.linear_cross_entropy: target holds class {value} (and "
                               f"{int(bad.sum())} out-of-range value(s) in all). Class indices must lie in "
                               f"[0, {num_classes}) or equal ignore_index ({ignore_index}).")


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

    Returns:
        The loss in the input's dtype: a scalar, or per row for ``reduction="none"``.

    Raises:
        LossInputError: (also ``ValueError`` and ``RuntimeError``) shapes that do not fit, ``C = 0``, a class-index
            target that is not int64, dtypes or devices that differ, ``reduction`` or ``label_smoothing`` out
            of range, ``ignore_index`` with probabilities, ``options`` of another type. Raised before any kernel.
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
    prob = _check_inputs(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
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
