"""The eager references of accel's mixture-of-experts ops: their default kernels and the tests' oracle.

Shapes: ``T`` tokens, ``K`` experts per token (``top_k``), ``S = T * K`` (token, expert) pairs, ``D`` features,
``E`` experts. ``perm`` is ``[S]`` int64, a permutation of ``range(S)``: the pair at sorted position ``j`` is pair
``perm[j]`` of the row-major ``[T, K]`` routing, i.e. token ``perm[j] // K`` (what ``torch.sort`` of the flattened
expert ids returns as its indices).
"""

from __future__ import annotations

import torch

__all__ = ["check_perm", "combine", "combine_backward", "gather", "grouped_mm", "grouped_mm_backward", "inverse"]


def check_perm(rows: torch.Tensor, perm: torch.Tensor, top_k: int, where: str) -> None:
    """What the ops take (works on fake tensors).

    Raises:
        RuntimeError: (``torch._check``) ``perm`` is not a 1-D int64 tensor on ``rows``' device, ``top_k`` < 1,
            or ``rows`` is not 2-D.
    """
    torch._check(rows.dim() == 2, lambda: f"{where}: rows must be 2-D [rows, features], got {tuple(rows.shape)}")
    torch._check(perm.dim() == 1 and perm.dtype == torch.int64,
                 lambda: f"{where}: perm must be 1-D int64, got {tuple(perm.shape)} {perm.dtype}")
    torch._check(perm.device == rows.device, lambda: f"{where}: perm is on {perm.device}, rows on {rows.device}")
    torch._check(top_k >= 1, lambda: f"{where}: top_k must be >= 1, got {top_k}")


def inverse(perm: torch.Tensor) -> torch.Tensor:
    """``inv`` with ``inv[perm[j]] = j``: the sorted position of each (token, expert) pair."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return inv


def gather(x: torch.Tensor, perm: torch.Tensor, top_k: int) -> torch.Tensor:
    """``[S, D]``: row ``j`` is ``x[perm[j] // top_k]``, the token of the pair at sorted position ``j``."""
    return x.index_select(0, torch.div(perm, top_k, rounding_mode="floor"))


def combine(y: torch.Tensor, perm: torch.Tensor, weights: torch.Tensor | None, top_k: int) -> torch.Tensor:
    """``[T, D]`` in ``y``'s dtype: ``out[t] = sum_k weights[t, k] * y[inv[t * top_k + k]]`` (``weights``
    ``[T, top_k]``; ``None``: all ones, the backward of :func:`gather`), accumulated in fp32 (bf16/fp16 input:
    one rounding of the sum)."""
    s, d = y.shape
    rows = y.index_select(0, inverse(perm)).view(s // top_k, top_k, d)  # rows[t, k]: token t's k-th expert's row
    if weights is None:
        return rows.sum(1, dtype=torch.float32).to(y.dtype) if y.dtype != torch.float64 else rows.sum(1)
    acc = torch.float64 if y.dtype == torch.float64 else torch.float32
    return torch.bmm(weights.to(acc).unsqueeze(1), rows.to(acc)).squeeze(1).to(y.dtype)


def combine_backward(grad_out: torch.Tensor, y: torch.Tensor, perm: torch.Tensor, weights: torch.Tensor | None,
                     top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_y [S, D], grad_weights [T, top_k])`` of :func:`combine` (``grad_weights`` empty where ``weights``
    is ``None``): ``grad_y[j] = weights[pair] * grad_out[token]`` for the pair ``perm[j]``; ``grad_weights[t, k] =
    <grad_out[t], y[inv[t * top_k + k]]>`` in fp32."""
    tokens = torch.div(perm, top_k, rounding_mode="floor")
    g = grad_out.index_select(0, tokens)
    if weights is None:
        return g.to(y.dtype), grad_out.new_empty(0)
    acc = torch.float64 if y.dtype == torch.float64 else torch.float32
    grad_y = (g.to(acc) * weights.reshape(-1).index_select(0, perm).to(acc).unsqueeze(1)).to(y.dtype)
    s, d = y.shape
    rows = y.index_select(0, inverse(perm)).view(s // top_k, top_k, d).to(acc)
    grad_w = torch.bmm(rows, grad_out.to(acc).unsqueeze(2)).squeeze(2).to(weights.dtype)
    return grad_y, grad_w


def _ends(offs: torch.Tensor, rows: int) -> list[int]:
    """``offs`` read on the host (one read), checked: non-decreasing, from 0, ending at ``rows``.

    Raises:
        RuntimeError: ``offs`` is not a cumulative count of ``rows`` rows.
    """
    ends = offs.tolist()
    if any(b < a for a, b in zip([0, *ends], ends)) or (ends and ends[-1] != rows) or (not ends and rows):
        raise RuntimeError(f"accel::grouped_mm: offs {ends[:8]}{'...' if len(ends) > 8 else ''} is not a "
                           f"non-decreasing cumulative count of the {rows} rows (offs[-1] must equal the rows)")
    return ends


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``[S, N]``: rows ``offs[e-1]:offs[e]`` of ``x`` (``[S, K]``) times ``w[e]`` (``[E, K, N]``; ``offs`` ``[E]``
    int32 cumulative row counts, ``offs[-1] == S``); one ``torch.mm`` per non-empty group (one host read of
    ``offs``)."""
    out = x.new_zeros(x.shape[0], w.shape[2])
    start = 0
    for e, end in enumerate(_ends(offs, x.shape[0])):
        if end > start:
            torch.mm(x[start:end], w[e], out=out[start:end])
        start = end
    return out


def grouped_mm_backward(grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x [S, K], grad_w [E, K, N])`` of :func:`grouped_mm`; an empty group's ``grad_w[e]`` is zero."""
    grad_x, grad_w = x.new_zeros(x.shape), w.new_zeros(w.shape)
    start = 0
    for e, end in enumerate(_ends(offs, x.shape[0])):
        if end > start:
            torch.mm(grad_out[start:end], w[e].t(), out=grad_x[start:end])
            torch.mm(x[start:end].t(), grad_out[start:end], out=grad_w[e])
        start = end
    return grad_x, grad_w
