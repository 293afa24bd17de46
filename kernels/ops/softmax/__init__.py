"""Softmax over the last dim: ``aten::_softmax`` and ``aten::_softmax_backward_data``.

``torch.softmax(x, -1)``, ``F.softmax`` and ``nn.Softmax`` call ``aten::_softmax``
(``half_to_float=False`` unless a dtype is passed); its autograd formula calls
``aten::_softmax_backward_data(grad, output, dim, input_dtype)``. Both have ATen
kernels on CPU and CUDA. accel's kernels take the last dim of contiguous
fp32/bf16/fp16 inputs (fp32 math).

Modules: :mod:`.reference` (eager oracle), :mod:`.conditions` (the shared
``cond``), ``triton_kernel``/``triton_impl``, ``helion_kernel``/``helion_impl``.
Importing any ``*_impl`` module imports no DSL runtime.
"""

FWD_OP = "aten::_softmax"
BWD_OP = "aten::_softmax_backward_data"
