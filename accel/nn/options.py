"""The options of accel's ``linear_cross_entropy`` (torch 2.15's ``torch.nn.LinearCrossEntropyOptions``), the rows
per chunk for a model's LM head, and :func:`as_options`: any options object :mod:`accel.nn` hands out, as accel's.

On torch 2.13+ builds ``accel.nn.LinearCrossEntropyOptions`` is torch's own class (:mod:`accel.nn`), a different
class with the same fields; accel's functions take either, reading torch's field by field (:func:`as_options`).
:mod:`accel.nn.linear_cross_entropy` re-exports everything here.

Example:
    >>> import accel.nn
    >>> from accel.nn.options import as_options
    >>> ours = as_options(accel.nn.LinearCrossEntropyOptions(batch_chunk_size=64))   # torch's class on 2.13+
    >>> type(ours).__module__, ours.batch_chunk_size
    ('accel.nn.options', 64)
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from accel._compat import nn as _compat_nn
from accel.errors import LossInputError

__all__ = ["MAX_CHUNK_BYTES", "MIN_ROWS", "LinearCrossEntropyOptions", "ResolvedOptions", "as_options",
           "model_chunk_rows"]

_POLICIES = ("auto", "accurate", "compact")
_ACC_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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
    each chunk reads and writes (measured on an H200, 8192 x 2048 x 32000 bf16: 2048 rows 5.29 ms, 1024 rows
    5.65 ms, the model's peak unchanged; ``benchmarks/real_models.py --ops`` measures the loss alone).

    The memory rule the sizes answer to: the loss's peak may exceed the best peer's loss peak (Liger-Kernel's,
    QuACK's) by up to 10 % only where that buys at least 10 % of the loss's time against it, and the model's
    training-step peak stays at or below Liger-Kernel's. ``benchmarks/linear_cross_entropy.py`` checks the
    first half per row (``peak_within_rule``), ``benchmarks/real_models.py`` the second per model.

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


#: What :func:`as_options` reads, fixed at import (``torch.compile`` traces :func:`as_options` with the loss, and
#: Dynamo does not trace ``dataclasses.fields``): accel's fields with their defaults, in order.
_FIELDS: tuple[tuple[str, Any], ...] = tuple((f.name, f.default) for f in dataclasses.fields(LinearCrossEntropyOptions))
_REQUIRED = object()  # the "default" of a field that has none: never equal to a value, so always "set"


def _foreign(cls: type | None) -> tuple[type, tuple[tuple[str, Any], ...]] | None:
    """``(cls, its fields accel's class lacks, with their defaults)`` for another options dataclass (torch's),
    ``None`` for ``None``."""
    if cls is None:
        return None
    ours = {name for name, _ in _FIELDS}
    only = []
    for f in dataclasses.fields(cls):
        if f.name not in ours:
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else _REQUIRED)
            only.append((f.name, default))
    return cls, tuple(only)


def _torch_options_class() -> type | None:
    """``torch.nn.LinearCrossEntropyOptions`` where the running torch has it (2.13+ builds), else ``None``."""
    found = _compat_nn.torch_linear_cross_entropy()
    return None if found is None else found[2]


#: torch's options class and the fields only it has (``None``: this torch has no class of its own).
_TORCH = _foreign(_torch_options_class())


def as_options(options: Any, where: str = "accel.nn.linear_cross_entropy") -> LinearCrossEntropyOptions | None:
    """``options`` as accel's :class:`LinearCrossEntropyOptions`: ``None`` and accel's own as given, torch's
    ``torch.nn.LinearCrossEntropyOptions`` (what ``accel.nn.LinearCrossEntropyOptions`` is on torch 2.13+ builds)
    read field by field. What every function of :mod:`accel.nn.linear_cross_entropy` and the transformers
    integration call on the ``options`` they are given.

    Args:
        options: ``None``, accel's or torch's ``LinearCrossEntropyOptions``.
        where: the caller, for the error message.

    Returns:
        ``None`` or an instance of accel's class, with torch's field values.

    Raises:
        LossInputError: (a ``ValueError``) ``options`` is of another type; or a torch options object asks for what
            accel's chunked path does not do: a value accel's class refuses (torch's ``acc_policy="balanced"``), or
            a field accel's class does not have set away from torch's default.

    Example:
        >>> import torch
        >>> from accel.nn.options import LinearCrossEntropyOptions, as_options
        >>> theirs = getattr(torch.nn, "LinearCrossEntropyOptions", LinearCrossEntropyOptions)
        >>> ours = as_options(theirs(batch_chunk_size=256, acc_policy="compact"))
        >>> type(ours) is LinearCrossEntropyOptions, ours.batch_chunk_size, ours.acc_policy
        (True, 256, 'compact')
    """
    if options is None or isinstance(options, LinearCrossEntropyOptions):
        return options
    theirs, only = _TORCH if _TORCH is not None else (None, ())
    if theirs is None or not isinstance(options, theirs):
        accepted = "accel.nn.LinearCrossEntropyOptions (torch.nn.LinearCrossEntropyOptions on this torch) or " \
                   "accel.nn.linear_cross_entropy.LinearCrossEntropyOptions" if theirs is not None else \
                   "accel.nn.LinearCrossEntropyOptions"
        kind = type(options)
        named = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise LossInputError(f"{where}: options is {named}. It must be {accepted}, or None. Pass one of those.")
    extra = [f"{name}={getattr(options, name)!r}" for name, default in only if getattr(options, name) != default]
    if extra:
        raise LossInputError(f"{where}: options {options!r} sets {', '.join(extra)}, which accel's "
                             f"LinearCrossEntropyOptions does not have. accel's chunked path takes "
                             f"{', '.join(name for name, _ in _FIELDS)}. Leave the others at their defaults, or "
                             f"call torch's own torch.nn.functional.linear_cross_entropy.")
    values = {name: getattr(options, name, default) for name, default in _FIELDS}
    try:
        return LinearCrossEntropyOptions(**values)
    except LossInputError as exc:
        raise LossInputError(f"{where}: options {options!r} (torch's class) cannot be read as accel's "
                             f"LinearCrossEntropyOptions: {exc} Pass a value accel's chunked path takes (for "
                             f"acc_policy='balanced': 'accurate' is at least as precise, 'compact' uses less "
                             f"memory), or call torch's own torch.nn.functional.linear_cross_entropy.") from exc
