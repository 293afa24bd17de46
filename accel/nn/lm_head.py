"""The loss of a language model's head, with the options models need that torch's ``linear_cross_entropy`` lacks.

:func:`lm_head_loss` is accel's own function, the same on torch 2.9 to 2.15: ``cross_entropy`` of
``softcap(hidden @ weight.T + bias)`` plus a z-loss, over every token, computed by accel's chunked op
(``torch.ops.accel.linear_cross_entropy``) so the ``[tokens, vocab]`` logits are never stored. Where
:func:`accel.nn.functional.linear_cross_entropy` mirrors torch 2.15's signature (and is torch's own object
there), this function is where the options outside it live:

- ``softcap``: final-logit softcapping, ``cap * tanh(z / cap)`` before the softmax (Gemma 2's
  ``final_logit_softcapping``);
- ``z_loss``: the weight of PaLM's auxiliary ``lse**2`` term (arXiv:2204.02311, section 5; 1e-4 there), averaged
  over the counted tokens as the cross-entropy is;
- ``num_items_in_batch``: Hugging Face's normalisation (a sum over this batch divided by the tokens of the whole
  gradient-accumulation step);
- ``label_smoothing`` and a class ``weight`` on the chunked path (torch's rule sends smoothing to the reference
  path), and the loss in fp32 (fp64 for fp64 input), as Hugging Face's ``ForCausalLMLoss`` reports it.

The transformers integration computes Gemma 2's loss through it. Weight tying needs nothing: pass the shared
parameter (``model.get_output_embeddings().weight``); autograd adds this loss's gradient to the embedding's.

Example:
    >>> import torch
    >>> from accel.nn.lm_head import lm_head_loss
    >>> h, w = torch.ones(2, 3, 4), torch.zeros(10, 4)        # every logit 0: the loss is log(10)
    >>> labels = torch.tensor([[1, 2, -100], [3, -100, -100]])
    >>> round(lm_head_loss(h, w, labels).item(), 5), round(lm_head_loss(h, w, labels, softcap=30.0).item(), 5)
    (2.30259, 2.30259)
    >>> round(lm_head_loss(h, w, labels, z_loss=1e-2).item(), 4)   # + 0.01 * log(10)**2
    2.3556
"""

from __future__ import annotations

import math

import torch

from accel.errors import LossInputError
from accel.kernels.ops.linear_cross_entropy import op as _op

from .checks import check_inputs
from .options import LinearCrossEntropyOptions, as_options, model_chunk_rows

__all__ = ["lm_head_loss"]

_WHERE = "accel.nn.lm_head.lm_head_loss"


def _check_extras(softcap: float | None, z_loss: float, num_items_in_batch: object, reduction: str,
                  ignore_index: object, label_smoothing: object) -> None:
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                                or not math.isfinite(softcap) or softcap <= 0):
        raise LossInputError(f"{_WHERE}: softcap={softcap!r}. It must be a finite float > 0 (the cap of "
                             f"cap * tanh(z / cap)), or None for no softcapping.")
    if isinstance(z_loss, bool) or not isinstance(z_loss, (int, float)) or not math.isfinite(z_loss) or z_loss < 0:
        raise LossInputError(f"{_WHERE}: z_loss={z_loss!r}. It must be a finite float >= 0 (0: no z-loss; "
                             f"PaLM used 1e-4).")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise LossInputError(f"{_WHERE}: ignore_index={ignore_index!r}. It must be an int (the target value that "
                             f"counts for nothing; Hugging Face uses -100).")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
        raise LossInputError(f"{_WHERE}: label_smoothing={label_smoothing!r}. It must be a float in [0, 1].")
    if num_items_in_batch is None:
        return
    if reduction != "mean":
        raise LossInputError(f"{_WHERE}: num_items_in_batch with reduction={reduction!r}. It replaces the mean's "
                             f"divisor: leave reduction='mean', or drop num_items_in_batch.")
    if isinstance(num_items_in_batch, torch.Tensor):
        if num_items_in_batch.numel() != 1:
            raise LossInputError(f"{_WHERE}: num_items_in_batch is a tensor of {num_items_in_batch.numel()} "
                                 f"elements. It must hold one count.")
    elif isinstance(num_items_in_batch, bool) or not isinstance(num_items_in_batch, int) or num_items_in_batch < 0:
        raise LossInputError(f"{_WHERE}: num_items_in_batch={num_items_in_batch!r}. It must be an int >= 0 or a "
                             f"one-element tensor (the counted tokens of the whole accumulation step).")


def lm_head_loss(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                 bias: torch.Tensor | None = None, softcap: float | None = None, z_loss: float = 0.0,
                 ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 class_weight: torch.Tensor | None = None, num_items_in_batch: int | torch.Tensor | None = None,
                 options: LinearCrossEntropyOptions | None = None, check_target_range: bool = True) -> torch.Tensor:
    """Cross-entropy of a language model's head over every token, the logits never stored.

    Computes, per token ``i`` with logits ``z_i = hidden_i @ weight.T + bias`` and ``u_i = softcap *
    tanh(z_i / softcap)`` (``u_i = z_i`` without a cap)::

        loss_i = cross_entropy(u_i, target_i, weight=class_weight, label_smoothing=...) + z_loss * logsumexp(u_i)**2

    for every token whose target is not ``ignore_index``, reduced by ``reduction``: ``"mean"`` divides the
    cross-entropy by the class-weighted count of counted tokens (``cross_entropy``'s rule) and the z-loss by
    their count; ``num_items_in_batch`` replaces both divisors (Hugging Face's ``ForCausalLMLoss``). Shift the
    labels first for next-token prediction (``target = labels[..., 1:]`` against ``hidden[..., :-1, :]``, or
    pad the labels with ``ignore_index`` as Hugging Face does).

    The chunked op runs whatever ``options`` says (accel's Triton kernel where ``accel.kernels.install()``
    registered it; the same chunk loop in eager PyTorch elsewhere); ``options=None`` picks the chunk size by
    :func:`accel.nn.linear_cross_entropy.model_chunk_rows` (compute-bound chunks, at most 1 GiB of chunk buffers).

    Args:
        hidden: ``(..., D)`` floating (fp16/bf16/fp32/fp64): the last hidden states.
        weight: ``(V, D)``, ``hidden``'s dtype and device: the head's weight (tied or not).
        target: ``(...)`` int64 class indices, ``hidden``'s leading shape, each in ``[0, V)`` or ``ignore_index``.
        bias: ``(V,)`` or ``None``.
        softcap: the final-logit cap (a float > 0), or ``None``.
        z_loss: the z-loss weight (>= 0; 0 turns it off).
        ignore_index: the target value that counts for nothing (default -100, Hugging Face's).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (``target``'s shape).
        label_smoothing: in ``[0, 1]``.
        class_weight: ``(V,)`` floating, or ``None``.
        num_items_in_batch: the counted tokens of the whole accumulation step (an int >= 0, or a one-element
            tensor, whose value is not checked: reading it would stall the device), or ``None``; needs
            ``reduction="mean"``.
        options: :class:`accel.nn.LinearCrossEntropyOptions` (accel's or torch's class), or ``None``.
        check_target_range: check the class indices on the host first (one device-to-host read: a stall per
            training step on a GPU). ``False`` skips it; an index out of range then gives a NaN loss.

    Returns:
        The loss in fp32 (fp64 for fp64 input): a scalar, or ``target``'s shape for ``reduction="none"``.

    Raises:
        LossInputError: (also ``ValueError``) shapes, dtypes or devices that do not fit, ``softcap`` not a
            finite float > 0, ``z_loss`` negative or not finite, ``ignore_index`` not an int, ``label_smoothing``
            not a float in ``[0, 1]``, ``num_items_in_batch`` not a count or given with another reduction,
            ``options`` that accel's chunked path cannot read. Raised before anything runs.
        TargetRangeError: (also ``IndexError``) a class index outside ``[0, V)`` other than ``ignore_index``
            (with ``check_target_range``).
        UnsupportedOperationError: a second ``backward`` through the same graph without
            ``options=LinearCrossEntropyOptions(allow_retain_graph=True)``.

    .. note:: The chunked op's limits: no higher-order or forward-mode AD; under ``torch.compile`` the op is
       one opaque node.
    """
    options = as_options(options, _WHERE)
    _check_extras(softcap, z_loss, num_items_in_batch, reduction, ignore_index, label_smoothing)
    for name, t in (("hidden", hidden), ("weight", weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise LossInputError(f"{_WHERE}: {name} is {type(t).__name__}. It must be a tensor.")
    if hidden.dim() < 1 or tuple(target.shape) != tuple(hidden.shape[:-1]) or target.dtype.is_floating_point:
        raise LossInputError(f"{_WHERE}: hidden is {list(hidden.shape)} and target {list(target.shape)} "
                             f"{target.dtype}. target must be int64 class indices of hidden's leading shape "
                             f"{list(hidden.shape[:-1])}.")
    if weight.dim() != 2:
        raise LossInputError(f"{_WHERE}: weight is {list(weight.shape)}. It must be (V, D).")
    x, t = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)
    check_inputs(x, weight, t, bias, class_weight, reduction, ignore_index, label_smoothing, True,
                  check_target_range, where=_WHERE)
    n, d = x.shape
    c = weight.shape[0]
    if options is None:
        options = LinearCrossEntropyOptions(batch_chunk_size=model_chunk_rows(n, d, c, x.dtype, x.device),
                                            chunking_method=None)
    r = options.resolve(max(n, 1), d, c, x.dtype, x.device)
    retain = r.allow_retain_graph or (reduction != "none" and torch.compiler.is_compiling())
    grad_on = torch.is_grad_enabled()
    op_reduction = "sum" if num_items_in_batch is not None else reduction
    loss = _op.apply(x, weight, t.long(), bias, class_weight, op_reduction, ignore_index, float(label_smoothing),
                     r.batch_chunk_size, r.acc_policy, r.acc_dtype, retain, x.requires_grad and grad_on,
                     weight.requires_grad and grad_on, bias is not None and bias.requires_grad and grad_on,
                     float(softcap or 0.0), float(z_loss))[0]
    if num_items_in_batch is not None:
        if isinstance(num_items_in_batch, torch.Tensor):  # (its value is not read: no device-to-host stall)
            num_items_in_batch = num_items_in_batch.to(loss.device).reshape(())
        loss = loss / num_items_in_batch
    return loss.reshape(target.shape) if reduction == "none" else loss
