"""The eager reference of ``accel::rope``: the custom ops' default kernels and the tests' oracle.

Hugging Face's ``apply_rotary_pos_emb`` op for op (``q * cos + rotate_half(q) * sin``), and for the
gradient what eager autograd computes from it: ``grad * cos + rotate_half_t(grad * sin)`` with
``rotate_half_t(g) = cat(g[..., D/2:], -g[..., :D/2])`` (the adjoint of ``rotate_half``). Outputs are laid
out like ``q``/``k`` (the gradient's: like the incoming gradient), as ``torch.empty_like`` lays them out.
"""

from __future__ import annotations

import torch

__all__ = ["accepts", "check", "rope", "rope_backward", "rotate_half", "rotate_half_t"]


def check(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int,
          where: str = "accel::rope") -> None:
    """What the ops take (shapes, dtypes, devices; works on fake tensors).

    ``q`` ``[B, Hq, S, D]`` and ``k`` ``[B, Hk, S, D]`` for ``unsqueeze_dim=1`` (``[B, S, H, D]`` for ``2``);
    ``cos``, ``sin`` ``[B or 1, S, D]``; ``D`` even; one floating dtype and one device for all four.

    Raises:
        RuntimeError: (``torch._check``) any of the above does not hold.
    """
    torch._check(unsqueeze_dim in (1, 2), lambda: f"{where}: unsqueeze_dim={unsqueeze_dim}. It must be 1 (q, k "
                                                  f"[B, H, S, D]) or 2 ([B, S, H, D]).")
    torch._check(q.dim() == 4 and k.dim() == 4 and cos.dim() == 3 and tuple(cos.shape) == tuple(sin.shape),
                 lambda: f"{where}: q {list(q.shape)}, k {list(k.shape)}, cos {list(cos.shape)}, sin "
                         f"{list(sin.shape)}. q and k must be 4-d, cos and sin one 3-d shape [B or 1, S, D].")
    seq = 3 - unsqueeze_dim  # S is dim 2 of [B, H, S, D], dim 1 of [B, S, H, D]
    d = cos.shape[2]
    torch._check(q.shape[3] == d and k.shape[3] == d and d % 2 == 0 and q.shape[0] == k.shape[0]
                 and q.shape[seq] == cos.shape[1] and k.shape[seq] == cos.shape[1]
                 and (cos.shape[0] == 1 or cos.shape[0] == q.shape[0]),
                 lambda: f"{where}: q {list(q.shape)}, k {list(k.shape)}, cos {list(cos.shape)} with "
                         f"unsqueeze_dim={unsqueeze_dim}. q and k need the batch, sequence ({cos.shape[1]}) and "
                         f"head size (D={d}, even) of cos, whose batch is 1 or q's.")
    torch._check(q.dtype == k.dtype == cos.dtype == sin.dtype and q.dtype.is_floating_point,
                 lambda: f"{where}: q {q.dtype}, k {k.dtype}, cos {cos.dtype}, sin {sin.dtype}. They must be one "
                         f"floating dtype (Hugging Face's rotary embedding casts cos and sin to it).")
    torch._check(q.device == k.device == cos.device == sin.device,
                 lambda: f"{where}: q on {q.device}, k {k.device}, cos {cos.device}, sin {sin.device}. Move them "
                         f"to one device.")


def accepts(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1) -> bool:
    """Whether ``accel::rope`` takes these arguments (:func:`check` as a bool) and can differentiate them
    (``cos`` and ``sin`` not requiring grad): what a caller tests before choosing the op over its own code."""
    if unsqueeze_dim not in (1, 2) or q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or cos.shape != sin.shape:
        return False
    seq, d = 3 - unsqueeze_dim, cos.shape[2]
    return (q.shape[3] == d == k.shape[3] and d % 2 == 0 and q.shape[0] == k.shape[0]
            and q.shape[seq] == cos.shape[1] == k.shape[seq] and cos.shape[0] in (1, q.shape[0])
            and q.dtype == k.dtype == cos.dtype == sin.dtype and q.dtype.is_floating_point
            and q.device == k.device == cos.device == sin.device and not (cos.requires_grad or sin.requires_grad))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x[..., D/2:], x[..., :D/2])`` (Hugging Face's ``rotate_half``)."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotate_half_t(g: torch.Tensor) -> torch.Tensor:
    """The adjoint of :func:`rotate_half`: ``cat(g[..., D/2:], -g[..., :D/2])``."""
    h = g.shape[-1] // 2
    return torch.cat((g[..., h:], -g[..., :h]), dim=-1)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`` with ``cos``/``sin`` unsqueezed at
    ``unsqueeze_dim`` (shapes and dtypes of ``q`` and ``k``).

    Example:
        >>> import torch
        >>> from accel.kernels.ops.rope import reference
        >>> q = torch.tensor([1.0, 2.0]).view(1, 1, 1, 2)
        >>> cos, sin = torch.zeros(1, 1, 2), torch.ones(1, 1, 2)   # a quarter turn
        >>> reference.rope(q, q, cos, sin)[0].flatten()
        tensor([-2.,  1.])
    """
    c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    q_out = torch.add(q * c, rotate_half(q) * s, out=torch.empty_like(q))
    k_out = torch.add(k * c, rotate_half(k) * s, out=torch.empty_like(k))
    return q_out, k_out


def rope_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_q_in, grad_k_in)`` of :func:`rope` for the outputs' gradients (the rotation by ``-angle``)."""
    c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    dq = torch.add(grad_q * c, rotate_half_t(grad_q * s), out=torch.empty_like(grad_q))
    dk = torch.add(grad_k * c, rotate_half_t(grad_k * s), out=torch.empty_like(grad_k))
    return dq, dk
