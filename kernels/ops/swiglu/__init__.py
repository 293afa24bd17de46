"""SwiGLU: ``accel::swiglu`` (``silu(a) * b``) and ``accel::swiglu_backward``.

The gated MLP of Llama, Mistral, Qwen2/3 and Phi-3 computes ``act(gate) * up`` as two elementwise ops
(``F.silu`` then ``mul``: three reads and two writes of the ``[tokens, intermediate]`` activations, and
autograd keeps ``silu(gate)`` as well); one fused kernel reads ``a`` and ``b`` once and writes ``y``, and
its backward reads ``dy``, ``a``, ``b`` and writes ``da``, ``db``. The ops are accel's own
``torch.library`` custom ops (:mod:`.op`: fake kernels and autograd, so they run under ``torch.compile``);
their default kernels, on every device and wherever no accel kernel is registered, are the eager
reference (:mod:`.reference`: exactly ``F.silu(a) * b`` and its autograd).

Modules: :mod:`.reference`, :mod:`.op` (the custom ops; imported by the impls and by
:mod:`accel.integrations`, not here), :mod:`.conditions` (the ``cond``), ``triton_kernel``/``triton_impl``,
:mod:`.linear` (``swiglu_linear``: the op followed by a linear layer, the product recomputed in backward; a
composition of the ops, not a kernel of this family).
Importing ``triton_impl`` imports no Triton.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::swiglu"
#: The Triton kernels' ``ACT`` constexpr: the gate's activation (SiLU here; GELU-tanh for :mod:`..geglu`).
SILU, GELU_TANH = 0, 1
BWD_OP = "accel::swiglu_backward"

#: The family (registered for NVIDIA: the kernels are measured there first; the reference is the fallback
#: everywhere, so no ATen kernel is needed under it).
FAMILY = OpFamily("swiglu", __name__, FWD_OP, BWD_OP, (reference.swiglu, reference.swiglu_backward),
                  {"triton": "triton_impl"})
