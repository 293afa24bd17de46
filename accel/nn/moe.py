"""Mixture-of-experts layers on accel's ops: the experts of a routed layer as two grouped GEMMs between a gather
and a weighted combine, with no Python loop over experts and no host read.

:func:`experts` computes what Hugging Face's experts modules compute (``transformers.integrations.moe``'s
``grouped_mm`` path: sort the (token, expert) pairs by expert, one grouped GEMM per projection, the router's
weights applied to each expert's output, each token's ``top_k`` outputs summed), with accel's custom ops around
the GEMMs (:mod:`accel.kernels.ops.moe.op`): the gather's backward is a deterministic per-token sum (eager
``x[index]``'s is ``index_put_(accumulate=True)``: a sort and a scatter), and the weighted sum keeps no
``[pairs, hidden]`` product for backward.

:func:`grouped_mm` is torch's grouped GEMM where the running torch has one and takes the call (CUDA, bf16, sm80+,
16-byte aligned rows: ``torch.nn.functional.grouped_mm``, or ``torch._grouped_mm`` before torch 2.10, found by
:func:`accel._compat.nn.torch_grouped_mm`), else ``accel::grouped_mm`` (one ``torch.mm`` per non-empty group;
its default kernel everywhere: ROCm, XPU, MPS, CPU, fp32, older torch).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accel._compat import nn as _compat_nn
from accel.kernels.ops.moe import op as _op

__all__ = ["experts", "grouped_mm", "native_grouped_mm_takes"]


def native_grouped_mm_takes(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether torch's own grouped GEMM takes ``x @ w[e]`` per group: an NVIDIA GPU of compute capability 8.0+
    (9.0+ for the private ``torch._grouped_mm``), bf16 operands, rows and columns a multiple of 8 elements
    (the 16-byte alignment its CUTLASS kernels need), and a torch that has it."""
    fn = _compat_nn.torch_grouped_mm()
    if fn is None or x.device.type != "cuda" or torch.version.hip is not None:
        return False
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16 or x.shape[1] % 8 or w.shape[2] % 8:
        return False
    need = (8, 0) if hasattr(torch.nn.functional, "grouped_mm") else (9, 0)
    return torch.cuda.get_device_capability(x.device) >= need


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``[S, N]``: ``x[offs[e-1]:offs[e]] @ w[e]`` for every expert ``e`` (rows of an empty group: none).

    Args:
        x: ``[S, K]`` floating, rows sorted by group.
        w: ``[E, K, N]``, ``x``'s dtype and device (any strides: ``weight.transpose(-2, -1)`` of ``[E, N, K]``
            weights is taken as it is).
        offs: ``[E]`` int32 cumulative row counts (``offs[-1] == S``), on ``x``'s device.

    Differentiable in ``x`` and ``w``. Raises ``RuntimeError`` (``torch._check``) on mismatched shapes or dtypes.
    """
    if native_grouped_mm_takes(x, w):
        return _compat_nn.torch_grouped_mm()(x, w, offs=offs.to(torch.int32))
    return _op.grouped_mm(x, w, offs)


def experts(hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor, w_in: torch.Tensor,
            w_out: torch.Tensor, activation: Callable[[torch.Tensor], torch.Tensor], *,
            b_in: torch.Tensor | None = None, b_out: torch.Tensor | None = None) -> torch.Tensor:
    """The routed experts of a mixture-of-experts layer: ``out[t] = sum_k weights[t, k] * f_e(hidden[t])`` over
    token ``t``'s experts ``e = top_k_index[t, k]``, with ``f_e(x) = activation(x @ w_in[e] + b_in[e]) @ w_out[e] +
    b_out[e]``.

    Args:
        hidden: ``[T, D]`` floating: the tokens.
        top_k_index: ``[T, K]`` integer expert ids in ``[0, E)`` (the router's choice; an expert may get no token).
        top_k_weights: ``[T, K]`` floating: the router's weights (applied in fp32 to each expert's output).
        w_in: ``[E, D, H]``, ``hidden``'s dtype: the input projection laid out for ``x @ w_in[e]`` (pass
            ``gate_up_proj.transpose(-2, -1)`` for Hugging Face's ``[E, H, D]`` weights).
        w_out: ``[E, I, D]``: the output projection, laid out the same way.
        activation: ``[S, H] -> [S, I]``: the gated product (e.g. ``silu(gate) * up`` of the halves).
        b_in, b_out: ``[E, H]`` and ``[E, D]`` biases (GPT-OSS), or ``None``.

    Returns:
        ``[T, D]`` in ``hidden``'s dtype. Differentiable in ``hidden``, the weights, biases and ``top_k_weights``;
        the ids are not.
    """
    top_k = top_k_index.shape[-1]
    num_experts = w_in.shape[0]
    ids = top_k_index.reshape(-1)
    sorted_ids, perm = torch.sort(ids)
    offs = torch.bincount(sorted_ids, minlength=num_experts).cumsum(0).to(torch.int32)
    x = _op.gather(hidden, perm, top_k)
    h = grouped_mm(x, w_in, offs)
    if b_in is not None:
        h = h + b_in.index_select(0, sorted_ids)
    y = grouped_mm(activation(h), w_out, offs)
    if b_out is not None:
        y = y + b_out.index_select(0, sorted_ids)
    return _op.combine(y, perm, top_k_weights, top_k)
