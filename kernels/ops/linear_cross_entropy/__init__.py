"""Linear cross-entropy: ``accel::linear_cross_entropy`` and ``accel::linear_cross_entropy_backward``.

The loss ``cross_entropy(input @ W.T + b, target)`` of an LM head without the ``[tokens, vocab]`` logits:
rows in chunks, per chunk the logits matmul (cuBLAS), one fused kernel that turns the logits into the
per-row loss and, in place, the gradient w.r.t. the logits, and the two gradient matmuls. The ops are
accel's own ``torch.library`` custom ops (:mod:`.op`, with fake kernels and autograd, so they run under
``torch.compile``); accel's :func:`accel.nn.linear_cross_entropy.linear_cross_entropy` calls them where
``options`` is given (what :mod:`accel.nn` hands out on a torch without its own, torch 2.9-2.12). Where torch
has its own (torch 2.13+ builds), the same Triton impl also overrides torch's chunked ops
``torch_nn::_linear_cross_entropy_batch_chunked`` and ``..._no_reduction`` (:func:`.triton_impl.register`).

Modules: :mod:`.reference` (the eager chunked loop: the ops' default kernels and the oracle), :mod:`.op`
(the custom ops; imported by the impls and by :mod:`accel.nn`, not here: ``import accel`` defines no op),
:mod:`.conditions` (the ``cond``), ``triton_kernel``/``triton_impl``. Importing ``triton_impl`` imports no
Triton.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::linear_cross_entropy"
BWD_OP = "accel::linear_cross_entropy_backward"

#: The family. Backends: NVIDIA and AMD (one ``CUDA`` key) and Intel XPU, wherever Triton runs; the
#: default kernels are the eager reference, so the fallback needs no ATen kernel.
FAMILY = OpFamily("linear_cross_entropy", __name__, FWD_OP, BWD_OP, (reference.forward, reference.backward),
                  {"triton": "triton_impl"}, backends=("cuda", "rocm", "xpu"))
