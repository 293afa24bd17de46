"""GeGLU: ``accel::geglu`` (``gelu_tanh(a) * b``) and ``accel::geglu_backward``.

The gated MLP of Gemma 1, 2 and 3 computes ``gelu(gate, approximate="tanh") * up`` (Hugging Face's
``gelu_pytorch_tanh`` activation; Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202) as two
elementwise ops: three reads and two writes of the ``[tokens, intermediate]`` activations, and autograd keeps
the activation's output as well. One fused kernel reads ``a`` and ``b`` once and writes ``y``; its backward reads
``dy``, ``a``, ``b`` and writes ``da``, ``db``. The ops are accel's own ``torch.library`` custom ops (:mod:`.op`:
fake kernels and autograd); their default kernels, wherever no accel kernel is registered, are the eager
reference (:mod:`.reference`: exactly ``F.gelu(a, approximate="tanh") * b`` and its autograd).

The Triton kernels are SwiGLU's with the activation swapped (:mod:`accel.kernels.ops.swiglu.triton_kernel`'s
``ACT``): the same tiles, layouts and launch. Importing ``triton_impl`` imports no Triton.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::geglu"
BWD_OP = "accel::geglu_backward"

#: The family (registered for NVIDIA and AMD as SwiGLU's is; the reference is the fallback everywhere).
FAMILY = OpFamily("geglu", __name__, FWD_OP, BWD_OP, (reference.geglu, reference.geglu_backward),
                  {"triton": "triton_impl"})
