"""RMSNorm with the model's rounding: ``accel::rms_norm_hf`` and ``accel::rms_norm_hf_backward``.

Hugging Face's Llama, Mistral, Qwen2/3, Phi-3 (and T5, whose weight has the input's dtype) normalise in
fp32, cast to the input's dtype, then multiply by the weight; Gemma, Gemma 2 and Gemma 3 multiply by
``1 + weight`` in fp32 and cast once at the end (``unit_offset=True``). Both round differently from
``aten::_fused_rms_norm`` (one rounding of ``x * rstd * w``), so a model mapped onto ``F.rms_norm`` would
change its numerics; these ops keep them. In eager the modules cost 19 ATen calls each (``to``, ``pow``,
``mean``, ``add``, ``rsqrt``, ``mul``, ``to``, ``mul`` and their backward); the fused kernels one launch
each way. The ops are accel's own ``torch.library`` custom ops (:mod:`.op`); their default kernels are
the eager reference (:mod:`.reference`: the modules' arithmetic op for op).

Modules: :mod:`.reference`, :mod:`.op` (imported by the impls and by :mod:`accel.integrations`, not here),
:mod:`.conditions`, ``triton_kernel``/``triton_impl`` (importing it imports no Triton).
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "accel::rms_norm_hf"
BWD_OP = "accel::rms_norm_hf_backward"

#: The family (NVIDIA; the reference is the fallback everywhere).
FAMILY = OpFamily("rms_norm_hf", __name__, FWD_OP, BWD_OP, (reference.rms_norm_hf, reference.rms_norm_hf_backward),
                  {"triton": "triton_impl"})
