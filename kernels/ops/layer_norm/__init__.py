"""LayerNorm: ``aten::native_layer_norm`` and ``aten::native_layer_norm_backward``.

``F.layer_norm`` and ``nn.LayerNorm`` call ``aten::native_layer_norm`` (CPU and
CUDA kernels); its autograd formula calls ``aten::native_layer_norm_backward``.
``mean``/``rstd`` are ``input.shape[:-k] + (1,)*k``, fp32 on CUDA (the
accumulation type) and the input dtype on CPU, as ATen returns them.

Modules: :mod:`.reference`, :mod:`.conditions`, ``triton_kernel``/``triton_impl``,
``helion_kernel``/``helion_impl``, ``cutedsl_kernel``/``cutedsl_impl`` (the backward only), ``_backward`` (the
backward op and the dw/db partials shared by Triton and CuTeDSL), :mod:`.bench` (benchmark cases and peers).
Importing any ``*_impl`` imports no DSL runtime.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "aten::native_layer_norm"
BWD_OP = "aten::native_layer_norm_backward"

FAMILY = OpFamily("layer_norm", __name__, FWD_OP, BWD_OP,
                  (reference.native_layer_norm, reference.native_layer_norm_backward),
                  {"triton": "triton_impl", "helion": "helion_impl", "cutedsl": "cutedsl_impl"}, bench="bench")
