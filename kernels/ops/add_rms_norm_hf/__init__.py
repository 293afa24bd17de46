"""The residual add fused into the model-rounding RMSNorm: ``accel::add_rms_norm_hf`` and
``accel::add_rms_norm_hf_backward``.

A Hugging Face decoder layer (Llama, Mistral, Qwen2/3, Gemma, ...) ends each of its two blocks with
``h = residual + h; residual = h; h = norm(h)``. Unfused that is an add kernel, then the norm reading the sum
back from memory; in backward autograd adds the norm's input gradient to the gradient arriving through the
residual stream, another add kernel. These ops do both inside the norm's kernels: the forward returns the sum
and the normalised sum from one read of ``input`` and ``residual``; the backward adds ``grad_sum`` to the
norm's input gradient before storing it. Per residual: one add kernel fewer each way, the sum read back once
fewer in forward and the norm's input gradient written and read back once fewer in backward; autograd saves
what the norm alone saved (the sum, the weight, ``rstd``). On the H200, HF Llama's training step (session
19, after the q/k/v gradient sums moved into their GEMMs) still ran 32 bf16 add kernels (residual and
gradient sums), 0.74 ms of 41.78 ms of kernel time, beside the norms
(``benchmarks/real_models.py --ops`` on the H200). The fused kernels are not timed against the unfused pair
yet (the tuning table's rows for them repeat rms_norm_hf's floors).

The numbers are the unfused ones bit for bit: ``sum`` is ``input + residual`` rounded to their dtype as torch
rounds it; ``(y, rstd)`` is ``accel::rms_norm_hf`` of that rounded sum; the input gradient is the norm's
(rounded to the dtype) plus ``grad_sum``, rounded again, as autograd's accumulation of the two gradients of
the sum computes it. The default kernels are :mod:`.reference` (``accel::rms_norm_hf``'s reference after
torch's add); the Triton kernels are :mod:`accel.kernels.ops.rms_norm_hf.triton_kernel`'s with their
``RESIDUAL`` / ``ADD_GRAD`` flags on, so a routed call has the bits of the routed unfused ops (each kernel
agrees with its reference within the per-dtype tolerance, as rms_norm_hf's do).

Modules: :mod:`.reference`, :mod:`.op` (imported by the impls, not here), :mod:`.conditions`, ``triton_impl``
(importing it imports no Triton).
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::add_rms_norm_hf"
BWD_OP = "accel::add_rms_norm_hf_backward"

#: The family (NVIDIA, AMD, Intel through Triton; the reference is the fallback everywhere).
FAMILY = OpFamily("add_rms_norm_hf", __name__, FWD_OP, BWD_OP,
                  (reference.add_rms_norm_hf, reference.add_rms_norm_hf_backward), {"triton": "triton_impl"})
