"""Rotary position embedding, Hugging Face convention: ``accel::rope`` and ``accel::rope_backward``.

``apply_rotary_pos_emb(q, k, cos, sin)`` of the Llama family computes ``q * cos + rotate_half(q) * sin``
(and the same for ``k``) as six elementwise ops and a ``cat`` per tensor; the fused kernel reads ``q``,
``k`` and one row of ``cos``/``sin`` per token and writes both outputs in one launch. ``cos``/``sin`` are
given (``[B or 1, S, D]``, halves ``[:D/2]``/``[D/2:]``; the model's rotary embedding computes them once per
step), ``q``/``k`` are ``[B, H, S, D]`` (``unsqueeze_dim=1``) or ``[B, S, H, D]`` (``unsqueeze_dim=2``) with
any strides but a unit one on ``D``. The ops are accel's own ``torch.library`` custom ops (:mod:`.op`);
their default kernels are the eager reference (:mod:`.reference`: Hugging Face's arithmetic op for op).

Modules: :mod:`.reference`, :mod:`.op` (imported by the impls and by :mod:`accel.integrations`, not here),
:mod:`.conditions`, ``triton_kernel``/``triton_impl`` (importing it imports no Triton).
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::rope"
BWD_OP = "accel::rope_backward"

#: The family (NVIDIA; the reference is the fallback everywhere).
FAMILY = OpFamily("rope", __name__, FWD_OP, BWD_OP, (reference.rope, reference.rope_backward),
                  {"triton": "triton_impl"})
