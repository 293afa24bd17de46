"""LayerNorm: ``aten::native_layer_norm`` and ``aten::native_layer_norm_backward``.

``F.layer_norm`` and ``nn.LayerNorm`` call ``aten::native_layer_norm`` (CPU and
CUDA kernels); its autograd formula calls ``aten::native_layer_norm_backward``.
``mean``/``rstd`` are ``input.shape[:-k] + (1,)*k``, fp32 on CUDA (the
accumulation type) and the input dtype on CPU, as ATen returns them.

Modules: :mod:`.reference`, :mod:`.conditions`, ``triton_kernel``/``triton_impl``,
``helion_kernel``/``helion_impl``, ``cutedsl_kernel``/``cutedsl_impl`` (the backward only), ``_backward`` (the
backward op and the dw/db partials shared by Triton and CuTeDSL). Importing any ``*_impl`` imports no DSL runtime.
"""

FWD_OP = "aten::native_layer_norm"
BWD_OP = "aten::native_layer_norm_backward"
