"""The chunked linear cross-entropy in eager PyTorch: the default kernels of accel's two ops and the loop
the Triton impl runs its kernel in.

The loss is ``cross_entropy(input @ linear_weight.T + linear_bias, target, ...)`` over ``N`` rows and ``C``
classes. Rows are taken ``batch_chunk_size`` at a time: per chunk the ``[rows, C]`` logits come from one
matmul (cuBLAS on CUDA), one *row step* turns them into the per-row losses and, in the same place, into
the gradient of the loss w.r.t. the logits, and that gradient feeds the two gradient matmuls
(``grad_input[chunk] = g @ W``, ``grad_W += g.T @ x[chunk]``, ``grad_bias += g.sum(0)``). Nothing of size
``[N, C]`` is ever stored: one ``[rows, C]`` buffer is reused by every chunk.

Every option reduces to per-row coefficients computed once (:func:`coefficients`, ``[N]`` vectors), so
the row step (:func:`row_step` here, one Triton kernel in :mod:`.triton_kernel`) only needs, per row
``i`` with log-sum-exp ``lse``, softmax ``p`` and (class-index targets) target ``y``::

    loss_i = a_i * (lse - z_iy) + bw_i * lse - b_i * sum_c w_c z_ic
    g_ic   = (a_i + bw_i) * p_ic - a_i * [c == y] - b_i * w_c

``a`` carries the ignored rows (0), the class weight of the target, the reduction's divisor (for
``"mean"``: the sum of the kept rows' target weights) and ``1 - label_smoothing``;
``b = label_smoothing / C`` over the same divisor (0 on ignored rows), and ``bw = b * sum_c w_c``. That is
ATen's ``cross_entropy`` term by term. A target outside ``[0, C)`` that is not ``ignore_index`` gets ``a_i = NaN`` (its loss and
gradient are NaN; nothing reads out of bounds). Class-probability targets ``t`` (``[N, C]``) use
``q = w * ((1 - label_smoothing) * t + label_smoothing / C)`` and ``r_i`` (``1/N`` for ``"mean"``)::

    loss_i = r_i * (sum_c q_ic * lse - sum_c q_ic z_ic)        g_ic = r_i * (sum_c q_ic * p_ic - q_ic)

Two terms language models add, both row-local, so both live in the row step:

- final-logit softcapping (Gemma 2; ``softcap`` ``s > 0``): every formula above reads ``u = s * tanh(z / s)``
  in place of the logit ``z``, and the gradient w.r.t. ``z`` is the one w.r.t. ``u`` times
  ``1 - tanh(z / s)**2``;
- the z-loss (PaLM, arXiv:2204.02311 section 5: ``z_loss * lse**2``, pulling the log-partition towards 0):
  ``loss_i += zc_i * lse**2`` and ``g_ic += 2 * zc_i * lse * p_ic``, with ``zc_i = z_loss`` on kept rows (0 on
  ignored ones), divided for ``"mean"`` by the number of kept rows (not by the class-weighted total: the
  z-loss is a per-token penalty, as Liger-Kernel's ``lse_square_scale`` and PaLM's are).

Precision (``acc_policy``): ``"compact"`` keeps the logits buffer in the input dtype (as
``linear`` + ``cross_entropy`` on bf16 logits would) and accumulates ``grad_W`` in place in the input
dtype; ``"accurate"`` keeps the logits in ``acc_dtype`` (fp32 for bf16/fp16 inputs) and accumulates
``grad_W`` in an ``acc_dtype`` scratch of ``[C, D]``. The row step computes in fp32 (fp64 for fp64
inputs) either way; the loss is returned in fp32 (fp64), the gradients in the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from accel.errors import LossInputError
from accel.kernels.dsl.launch import empty

from .buffers import ROW_ALIGN_BYTES, aligned_classes, aligned_rows, fp32_result_mm, mm_into

__all__ = [
    "LOW_PRECISION",
    "ROW_ALIGN_BYTES",
    "STATS",
    "Loop",
    "Coefficients",
    "aligned_classes",
    "aligned_rows",
    "backward",
    "capped",
    "check_op_args",
    "chunked",
    "coefficients",
    "finalize",
    "fp32_result_mm",
    "forward",
    "loss_dtype",
    "mm_into",
    "new_stats",
    "reduce_loss",
    "row_step",
    "slice_rows",
    "tile_grad",
    "tile_stats",
    "with_extras",
]

#: Input dtypes whose accumulation dtype may be wider (``acc_dtype=torch.float32``).
LOW_PRECISION = (torch.float16, torch.bfloat16)
_REDUCTIONS = ("mean", "sum", "none")
_POLICIES = ("accurate", "compact")


def loss_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the op's loss and of the row step's math: fp64 for fp64 inputs, else fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_op_args(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                  linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                  label_smoothing: float, batch_chunk_size: int, acc_policy: str,
                  acc_dtype: torch.dtype, softcap: float = 0.0, z_loss: float = 0.0) -> bool:
    """What the chunked ops take, checked on shapes, dtypes and devices only (works on fake tensors; reads
    no values). Returns whether ``target`` holds class probabilities.

    Raises:
        LossInputError: ``input`` not ``[N, D]`` floating; ``linear_weight`` not ``[C, D]`` of the input's
            dtype and device with ``C >= 1``; ``linear_bias`` not ``[C]``; ``weight`` not a floating ``[C]``;
            ``target`` neither int64 ``[N]`` nor ``[N, C]`` of the input's dtype; ``reduction``,
            ``label_smoothing``, ``batch_chunk_size``, ``acc_policy`` or ``acc_dtype`` out of range;
            ``softcap`` negative or not finite (0 turns it off); ``z_loss`` not finite.
    """
    where = "accel linear_cross_entropy op"
    if input.dim() != 2 or not input.dtype.is_floating_point:
        raise LossInputError(f"{where}: input is {list(input.shape)} {input.dtype}. It must be a floating "
                             f"[N, D] tensor. Flatten leading dims (input.flatten(0, -2)).")
    n, d = input.shape
    if linear_weight.dim() != 2 or linear_weight.shape[1] != d:
        raise LossInputError(f"{where}: linear_weight is {list(linear_weight.shape)} for input {list(input.shape)}. "
                             f"It must be [C, D] with D = {d}.")
    c = linear_weight.shape[0]
    if c < 1:
        raise LossInputError(f"{where}: linear_weight has {c} classes. It needs C >= 1 (a vocabulary of 0 has "
                             f"no cross-entropy).")
    if linear_weight.dtype != input.dtype or linear_weight.device != input.device:
        raise LossInputError(f"{where}: linear_weight is {linear_weight.dtype} on {linear_weight.device}, input "
                             f"{input.dtype} on {input.device}. They must match: cast one to the other.")
    for name, t in (("linear_bias", linear_bias), ("weight", weight)):
        if t is not None and (tuple(t.shape) != (c,) or not t.dtype.is_floating_point or t.device != input.device):
            raise LossInputError(f"{where}: {name} is {list(t.shape)} {t.dtype} on {t.device}. It must be a floating "
                                 f"[{c}] tensor on {input.device}, or None.")
    prob = target.dtype.is_floating_point
    if prob:
        if tuple(target.shape) != (n, c) or target.dtype != input.dtype:
            raise LossInputError(f"{where}: probability target is {list(target.shape)} {target.dtype}. It must be "
                                 f"[{n}, {c}] {input.dtype} (the input's dtype).")
    elif target.dtype != torch.int64 or tuple(target.shape) != (n,):
        raise LossInputError(f"{where}: class-index target is {list(target.shape)} {target.dtype}. It must be "
                             f"int64 [{n}] (one class per input row).")
    if target.device != input.device:
        raise LossInputError(f"{where}: target is on {target.device}, input on {input.device}. Move it.")
    if reduction not in _REDUCTIONS:
        raise LossInputError(f"{where}: reduction={reduction!r}. It must be one of {', '.join(_REDUCTIONS)}.")
    if not 0.0 <= label_smoothing <= 1.0:
        raise LossInputError(f"{where}: label_smoothing={label_smoothing}. It must lie in [0, 1].")
    if not isinstance(batch_chunk_size, (int, torch.SymInt)) or batch_chunk_size < 1:
        raise LossInputError(f"{where}: batch_chunk_size={batch_chunk_size!r}. It must be an int >= 1.")
    if acc_policy not in _POLICIES:
        raise LossInputError(f"{where}: acc_policy={acc_policy!r}. The op takes a resolved policy, one of "
                             f"{', '.join(_POLICIES)} (LinearCrossEntropyOptions.resolve gives it).")
    if acc_dtype != input.dtype and not (input.dtype in LOW_PRECISION and acc_dtype == torch.float32):
        raise LossInputError(f"{where}: acc_dtype={acc_dtype} with {input.dtype} input. It must be the input's "
                             f"dtype, or torch.float32 for float16/bfloat16 input.")
    if not (math.isfinite(softcap) and softcap >= 0.0):
        raise LossInputError(f"{where}: softcap={softcap}. It must be a finite float > 0 (the cap s of "
                             f"s * tanh(z / s)), or 0 for no softcapping.")
    if not math.isfinite(z_loss):
        raise LossInputError(f"{where}: z_loss={z_loss}. It must be a finite float (0 for no z-loss).")
    return prob


class Coefficients(NamedTuple):
    """Per-row coefficients of the row step (see the module docstring), ``[N]`` vectors in the math dtype.

    Attributes:
        target: class-index targets with ignored and out-of-range rows pointed at class 0 (int64 ``[N]``),
            or the probability target itself (``[N, C]``).
        a: the target term's coefficient (class-index targets), or ``r`` (probability targets).
        b: the smoothing term's coefficient, or ``None`` without label smoothing (or with probability targets).
        bw: ``b * sum(class weight)``, or ``None`` with ``b``.
        class_weight: the class weight in the math dtype, or ``None``.
        label_smoothing: as given.
        empty: a 0-dim bool tensor, true where ``reduction="mean"`` has nothing to divide by (every row
            ignored, or no rows): the loss is NaN there, as ``cross_entropy``'s is. ``None`` otherwise.
        num_classes: ``C``.
        zc: the z-loss coefficient of each row (``[N]``), or ``None`` without z-loss.
        softcap: the final-logit cap ``s`` (``u = s * tanh(z / s)``), 0 for none.
    """

    target: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor | None
    bw: torch.Tensor | None
    class_weight: torch.Tensor | None
    label_smoothing: float
    empty: torch.Tensor | None
    num_classes: int
    zc: torch.Tensor | None = None
    softcap: float = 0.0


def coefficients(target: torch.Tensor, weight: torch.Tensor | None, reduction: str, ignore_index: int,
                 label_smoothing: float, num_classes: int, math_dtype: torch.dtype = torch.float32,
                 grad_loss: torch.Tensor | None = None, softcap: float = 0.0, z_loss: float = 0.0) -> Coefficients:
    """The row step's coefficients for every row (``[N]`` vectors; no device-to-host read).

    ``grad_loss`` (``[N]``, ``reduction="none"`` backward) is folded in: the gradient rows come out scaled by it.
    ``softcap`` and ``z_loss`` as in the module docstring (0: off).
    """
    coef = _coefficients(target, weight, reduction, ignore_index, label_smoothing, num_classes, math_dtype, grad_loss)
    return with_extras(coef, target, reduction, ignore_index, math_dtype, grad_loss, softcap, z_loss)


def with_extras(coef: Coefficients, target: torch.Tensor, reduction: str, ignore_index: int,
                math_dtype: torch.dtype, grad_loss: torch.Tensor | None, softcap: float,
                z_loss: float) -> Coefficients:
    """``coef`` with the softcap and the z-loss coefficients (``zc``: ``z_loss`` on kept rows, over the kept
    rows' count for ``"mean"``, times ``grad_loss``; ``None`` for ``z_loss=0``)."""
    zc = None
    if z_loss:
        n = target.shape[0]
        if target.dtype.is_floating_point:  # every row is kept
            zc = torch.full((n,), z_loss / n if reduction == "mean" and n else z_loss, dtype=math_dtype,
                            device=target.device)
        else:
            kept = (target != ignore_index).to(math_dtype)
            # in the math dtype throughout: a Python float through torch.where would round to fp32 first
            zc = kept * (z_loss / kept.sum().clamp_min(1) if reduction == "mean" else z_loss)
        if grad_loss is not None:
            zc = zc * grad_loss.to(math_dtype)
    return coef._replace(zc=zc, softcap=float(softcap))


def _coefficients(target: torch.Tensor, weight: torch.Tensor | None, reduction: str, ignore_index: int,
                  label_smoothing: float, num_classes: int, math_dtype: torch.dtype,
                  grad_loss: torch.Tensor | None) -> Coefficients:
    n = target.shape[0]
    cw = None if weight is None else weight.to(math_dtype)
    eps = float(label_smoothing)
    if target.dtype.is_floating_point:  # probability targets: no ignore_index, mean divides by N
        r = torch.full((n,), 1.0 / n if reduction == "mean" and n else 1.0, dtype=math_dtype, device=target.device)
        if grad_loss is not None:
            r = r * grad_loss.to(math_dtype)
        empty = torch.tensor(n == 0, device=target.device) if reduction == "mean" else None
        return Coefficients(target, r, None, None, cw, eps, empty, num_classes)
    ignored = target == ignore_index
    in_range = (target >= 0) & (target < num_classes)
    taken = in_range & ~ignored
    t_hat = torch.where(taken, target, 0)
    kept = (~ignored).to(math_dtype)
    w_y = kept if cw is None else torch.where(ignored, 0.0, cw.index_select(0, t_hat))
    empty = None
    if reduction == "mean":
        total = w_y.sum()
        empty = total == 0
        scale = 1.0 / total  # inf where every row is ignored: those a_i are 0 below, and the loss is NaN
    else:
        scale = 1.0
    a = torch.where(ignored, 0.0, w_y * ((1.0 - eps) * scale))
    a = torch.where(taken | ignored, a, float("nan"))  # out of range and not ignored: NaN loss and gradient
    b = bw = None
    if eps:
        b = torch.where(ignored, 0.0, kept * (eps / num_classes) * scale)
        bw = b * (cw.sum() if cw is not None else float(num_classes))
    if grad_loss is not None:
        go = grad_loss.to(math_dtype)
        a = a * go
        if b is not None:
            b, bw = b * go, bw * go
    return Coefficients(t_hat, a, b, bw, cw, eps, empty, num_classes)


def slice_rows(coef: Coefficients, start: int, rows: int) -> Coefficients:
    """``coef`` for rows ``[start, start + rows)`` (views)."""
    def cut(t):
        return None if t is None else t.narrow(0, start, rows)

    return coef._replace(target=coef.target.narrow(0, start, rows), a=cut(coef.a), b=cut(coef.b), bw=cut(coef.bw),
                         zc=cut(coef.zc))


#: Rows of a stats block (``[STATS, rows]`` in the math dtype), what a row keeps between vocabulary tiles:
#: the running max, the sum of ``exp(z - max)``, the target's logit, ``s`` (smoothing: ``sum_c w_c z_c``;
#: probability targets: ``sum_c q_c z_c``) and ``sq`` (probability targets: ``sum_c q_c``).
STATS = 5


def new_stats(rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A stats block for ``rows`` rows before any tile: max at the dtype's lowest finite value (a tile of
    ``-inf`` never forms ``-inf - -inf``), sums 0."""
    stats = torch.zeros(STATS, rows, dtype=dtype, device=device)
    stats[0] = torch.finfo(dtype).min
    return stats


def _skipped(coef: Coefficients) -> torch.Tensor | None:
    """Class-index rows whose coefficients are all zero (ignored rows): loss and gradient 0, logits unread."""
    if coef.target.dtype.is_floating_point:
        return None
    skip = coef.a == 0
    for t in (coef.b, coef.zc):
        if t is not None:
            skip = skip & (t == 0)
    return skip


def capped(logits: torch.Tensor, coef: Coefficients, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(u, d)``: the logits in ``dtype`` after the final-logit softcap (``u = s * tanh(z / s)``) and its
    derivative ``d = 1 - tanh(z / s)**2`` (as ``cosh**-2``: no cancellation where ``tanh`` saturates), or the
    logits themselves and ``None`` without one."""
    z = logits.to(dtype)
    if not coef.softcap:
        return z, None
    x = z / coef.softcap
    return torch.tanh(x) * coef.softcap, torch.cosh(x).reciprocal().square()


def _q(coef: Coefficients, col0: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """Probability targets' ``q`` over columns ``[col0, col0 + cols)``."""
    q = coef.target.narrow(1, col0, cols).to(dtype)
    if coef.label_smoothing:
        q = q * (1.0 - coef.label_smoothing) + coef.label_smoothing / coef.num_classes
    if coef.class_weight is not None:
        q = q * coef.class_weight.narrow(0, col0, cols)
    return q


def tile_stats(logits: torch.Tensor, stats: torch.Tensor, coef: Coefficients, col0: int) -> None:
    """Fold one vocabulary tile, ``logits`` ``[rows, cols]`` = columns ``[col0, col0 + cols)``, into ``stats``
    (``[STATS, rows]``, updated in place; :data:`STATS`): an online log-sum-exp."""
    z, _ = capped(logits, coef, stats.dtype)
    cols = z.shape[1]
    m_old = stats[0].clone()
    m = torch.maximum(m_old, z.amax(1))
    stats[1] = stats[1] * torch.exp(m_old - m) + torch.exp(z - m[:, None]).sum(1)
    stats[0] = m
    if coef.target.dtype.is_floating_point:
        q = _q(coef, col0, cols, z.dtype)
        stats[3] += (q * z).sum(1)
        stats[4] += q.sum(1)
        return
    local = coef.target - col0
    inside = (local >= 0) & (local < cols)
    stats[2] = torch.where(inside, z.gather(1, local.clamp(0, cols - 1)[:, None]).squeeze(1), stats[2])
    if coef.b is not None:
        stats[3] += z.sum(1) if coef.class_weight is None else z @ coef.class_weight.narrow(0, col0, cols)


def finalize(stats: torch.Tensor, coef: Coefficients) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, lse, p_coef)`` per row (``[rows]`` each) once every tile is folded into ``stats``: the row's loss,
    its log-sum-exp, and the coefficient of the softmax in the gradient (``a``, ``a + bw``, or ``a * sq``)."""
    m, l_sum, zy, s, sq = stats.unbind(0)
    log_l = torch.log(l_sum)
    lse = m + log_l
    a = coef.a
    if coef.target.dtype.is_floating_point:
        loss, p_coef = a * (sq * lse - s), a * sq
    else:
        loss = a * ((m - zy) + log_l)  # both halves shifted by the max: no cancellation at large logits
        p_coef = a
        if coef.b is not None:
            loss = loss + coef.bw * lse - coef.b * s
            p_coef = a + coef.bw
    if coef.zc is not None:
        loss = loss + coef.zc * lse * lse
        p_coef = p_coef + 2.0 * coef.zc * lse
    skip = _skipped(coef)
    return (loss if skip is None else torch.where(skip, 0.0, loss)), lse, p_coef


def tile_grad(logits: torch.Tensor, grad: torch.Tensor, coef: Coefficients, lse: torch.Tensor,
              p_coef: torch.Tensor, col0: int) -> None:
    """The gradient w.r.t. one vocabulary tile's logits (``[rows, cols]``, columns from ``col0``) into ``grad``
    (may be ``logits`` itself), from :func:`finalize`'s ``lse`` and ``p_coef``."""
    z, dz = capped(logits, coef, lse.dtype)
    cols = z.shape[1]
    g = p_coef[:, None] * torch.exp(z - lse[:, None])
    if coef.target.dtype.is_floating_point:
        g -= coef.a[:, None] * _q(coef, col0, cols, z.dtype)
    else:
        local = coef.target - col0
        inside = (local >= 0) & (local < cols)
        g.scatter_add_(1, local.clamp(0, cols - 1)[:, None], torch.where(inside, -coef.a, 0.0)[:, None])
        if coef.b is not None:
            g -= coef.b[:, None] * (1.0 if coef.class_weight is None else coef.class_weight.narrow(0, col0, cols))
    if dz is not None:  # d u / d z of the softcap
        g = g * dz
    if not coef.target.dtype.is_floating_point:
        g = torch.where(_skipped(coef)[:, None], 0.0, g)
    grad.copy_(g)


def row_step(logits: torch.Tensor, grad: torch.Tensor | None, coef: Coefficients, loss: torch.Tensor) -> None:
    """One chunk's row step in eager PyTorch: per-row losses into ``loss`` (``[rows]``) and, where ``grad``
    is given (``[rows, C]``, may be ``logits`` itself), the gradient w.r.t. the logits into it. The whole row
    as one tile of :func:`tile_stats` / :func:`tile_grad`."""
    stats = new_stats(logits.shape[0], loss.dtype, logits.device)
    tile_stats(logits, stats, coef, 0)
    row_loss, lse, p_coef = finalize(stats, coef)
    loss.copy_(row_loss)
    if grad is not None:
        tile_grad(logits, grad, coef, lse, p_coef, 0)


#: ``step(logits, grad or None, coefficients, loss out)``: the row step a chunk loop runs.
RowStep = Callable[[torch.Tensor, "torch.Tensor | None", Coefficients, torch.Tensor], None]


def chunked(input: torch.Tensor, linear_weight: torch.Tensor, coef: Coefficients, linear_bias: torch.Tensor | None,
            batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype, compute_input_grad: bool,
            compute_linear_weight_grad: bool, compute_linear_bias_grad: bool, step: RowStep = row_step,
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunk loop: ``(per-row losses [N], grad_input, grad_linear_weight, grad_linear_bias)``; a gradient
    not asked for is an empty ``[0, 0]`` (``[0]``) tensor, one asked for is in the input's dtype.

    ``step`` is the row step (:func:`row_step`, or the Triton kernel's launch); ``coef`` from :func:`coefficients`.
    Arguments are not checked here (:func:`check_op_args`).
    """
    n = input.shape[0]
    c = linear_weight.shape[0]
    dtype, device = input.dtype, input.device
    mdt = loss_dtype(dtype)
    want_grad = compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad
    wide = acc_policy == "accurate" and acc_dtype != dtype  # logits and grad_W accumulator in acc_dtype
    mixed = wide and fp32_result_mm(device.type)  # low-precision operands, acc_dtype results (cuBLAS)
    upcast = wide and not mixed  # acc_dtype copies of the operands (CPU and other devices)
    w_mm = linear_weight.to(acc_dtype) if upcast else linear_weight
    rows_max = max(1, min(batch_chunk_size, n))
    logits_buf = aligned_rows(rows_max, c, acc_dtype if wide else dtype, device)
    # the gradient goes where the matmuls can read it: in place, except accurate mode on cuBLAS (input dtype)
    grad_buf = aligned_rows(rows_max, c, dtype, device) if (want_grad and mixed) else logits_buf
    bias = None if linear_bias is None else linear_bias.to(logits_buf.dtype)
    losses = empty(n, mdt, device)
    grad_input = empty(tuple(input.shape) if compute_input_grad else (0, 0), dtype, device)
    gw_shape = tuple(linear_weight.shape) if compute_linear_weight_grad else (0, 0)
    gw_dtype = acc_dtype if wide else dtype
    grad_w = empty(gw_shape, gw_dtype, device) if n else torch.zeros(gw_shape, dtype=gw_dtype, device=device)
    grad_b = torch.zeros(c if compute_linear_bias_grad else 0, dtype=mdt, device=device)
    main = aligned_classes(c, grad_buf.dtype, device)
    pieces = [(lo, width) for lo, width in ((0, main), (main, c - main)) if width]  # the classes, split there
    # per piece of classes: the weight's transposed rows and the bias's entries, for the logits matmul
    heads = [(w_mm.narrow(0, lo, width).t(), None if bias is None else bias.narrow(0, lo, width), lo, width)
             for lo, width in pieces]
    for start in range(0, n, rows_max):
        rows = min(rows_max, n - start)
        x = input.narrow(0, start, rows)
        x_mm = x.to(acc_dtype) if upcast else x
        logits = logits_buf.narrow(0, 0, rows)
        for wt, b, lo, width in heads:  # the logits' contiguous extent is the classes too: the same split
            out = logits.narrow(1, lo, width)
            if mixed:
                if b is None:
                    torch.mm(x, wt, out_dtype=acc_dtype, out=out)
                else:
                    torch.addmm(b, x, wt, out_dtype=acc_dtype, out=out)
            elif b is None:
                torch.mm(x_mm, wt, out=out)
            else:
                torch.addmm(b, x_mm, wt, out=out)
        g = grad_buf.narrow(0, 0, rows) if want_grad else None
        step(logits, g, slice_rows(coef, start, rows), losses.narrow(0, start, rows))
        if g is None:
            continue
        if compute_linear_bias_grad:
            grad_b += g.sum(0, dtype=mdt)
        if compute_input_grad:
            out = grad_input.narrow(0, start, rows)
            if upcast:
                out.copy_(g @ w_mm)
            else:
                for lo, width in pieces:  # the first piece writes the chunk's rows, the second adds to them
                    mm_into(out, g.narrow(1, lo, width), linear_weight.narrow(0, lo, width), first=lo == 0)
        if compute_linear_weight_grad:  # the first chunk writes the accumulator, later ones add to it
            for lo, width in pieces:
                mm_into(grad_w.narrow(0, lo, width), g.narrow(1, lo, width).t(), x if mixed else x_mm,
                        first=start == 0, out_dtype=acc_dtype if mixed else None)
    if grad_w.dtype != dtype:
        grad_w = grad_w.to(dtype)
    return losses, grad_input, grad_w, grad_b.to(dtype)


#: A whole schedule: ``loop(input, linear_weight, coef, linear_bias, batch_chunk_size, acc_policy, acc_dtype,
#: compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad)`` returning what :func:`chunked` does.
Loop = Callable[..., "tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]"]


def _chunked_with(step: RowStep) -> Loop:
    def loop(*args):
        return chunked(*args, step=step)

    return loop


def reduce_loss(losses: torch.Tensor, coef: Coefficients, reduction: str) -> torch.Tensor:
    """The op's loss from the per-row losses: their sum (already scaled for ``"mean"``; NaN where ``"mean"``
    has nothing to divide by), or the rows themselves for ``"none"``."""
    if reduction == "none":
        return losses
    total = losses.sum()
    if coef.empty is not None:
        total = torch.where(coef.empty, float("nan"), total)
    return total


def forward(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor, linear_bias: torch.Tensor | None,
            weight: torch.Tensor | None, reduction: str, ignore_index: int, label_smoothing: float,
            batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype, allow_retain_graph: bool,
            compute_input_grad: bool, compute_linear_weight_grad: bool, compute_linear_bias_grad: bool,
            softcap: float = 0.0, z_loss: float = 0.0, *, step: RowStep = row_step, loop: Loop | None = None,
            coefs: Callable[..., Coefficients] | None = None,
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``accel::linear_cross_entropy`` in eager PyTorch (its default kernel on every device); ``softcap`` and
    ``z_loss`` as in the module docstring (0: off).

    ``step``: the row step of the chunk loop (:func:`chunked`); ``loop``: a whole schedule in its place
    (:data:`Loop`; the Triton impl's, which runs :func:`chunked` with its kernel, or :mod:`.tiled` when told);
    ``coefs``: :func:`coefficients` or a function with its signature and results (the Triton impl's launch).

    Returns:
        ``(loss, grad_input, grad_linear_weight, grad_linear_bias)``: ``loss`` in fp32 (fp64 for fp64
        input), a scalar for ``"mean"``/``"sum"`` and ``[N]`` for ``"none"``; for ``"mean"``/``"sum"`` the
        gradients of ``loss`` asked for by the ``compute_*`` flags (input dtype), empty otherwise and always
        for ``"none"`` (its backward recomputes them: :func:`backward`).

    Raises:
        LossInputError: see :func:`check_op_args`.
    """
    check_op_args(input, linear_weight, target, linear_bias, weight, reduction, label_smoothing, batch_chunk_size,
                  acc_policy, acc_dtype, softcap, z_loss)
    coef = (coefs or coefficients)(target, weight, reduction, ignore_index, label_smoothing, linear_weight.shape[0],
                                   loss_dtype(input.dtype), softcap=softcap, z_loss=z_loss)
    grads = reduction != "none"
    losses, gi, gw, gb = (loop or _chunked_with(step))(
        input, linear_weight, coef, linear_bias, batch_chunk_size, acc_policy, acc_dtype,
        grads and compute_input_grad, grads and compute_linear_weight_grad,
        grads and compute_linear_bias_grad and linear_bias is not None)
    return reduce_loss(losses, coef, reduction), gi, gw, gb


def backward(grad_loss: torch.Tensor, input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
             linear_bias: torch.Tensor | None, weight: torch.Tensor | None, ignore_index: int, label_smoothing: float,
             batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype, compute_input_grad: bool,
             compute_linear_weight_grad: bool, compute_linear_bias_grad: bool, softcap: float = 0.0,
             z_loss: float = 0.0, *, step: RowStep = row_step, loop: Loop | None = None,
             coefs: Callable[..., Coefficients] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``accel::linear_cross_entropy_backward`` in eager PyTorch: the gradients of ``reduction="none"``'s
    per-row losses weighted by ``grad_loss`` (``[N]``), recomputed chunk by chunk (``step``, ``loop``,
    ``coefs`` as :func:`forward`'s).

    Returns:
        ``(grad_input, grad_linear_weight, grad_linear_bias)`` in the input dtype (empty where not asked for).

    Raises:
        LossInputError: see :func:`check_op_args`; ``grad_loss`` not ``[N]``.
    """
    check_op_args(input, linear_weight, target, linear_bias, weight, "none", label_smoothing, batch_chunk_size,
                  acc_policy, acc_dtype, softcap, z_loss)
    if tuple(grad_loss.shape) != (input.shape[0],):
        raise LossInputError(f"accel linear_cross_entropy_backward: grad_loss is {list(grad_loss.shape)}. It must be "
                             f"[{input.shape[0]}] (one value per row of reduction='none').")
    coef = (coefs or coefficients)(target, weight, "none", ignore_index, label_smoothing, linear_weight.shape[0],
                                   loss_dtype(input.dtype), grad_loss=grad_loss, softcap=softcap, z_loss=z_loss)
    _, gi, gw, gb = (loop or _chunked_with(step))(
        input, linear_weight, coef, linear_bias, batch_chunk_size, acc_policy, acc_dtype, compute_input_grad,
        compute_linear_weight_grad, compute_linear_bias_grad and linear_bias is not None)
    return gi, gw, gb
