"""Softmax over the last dim: ``aten::_softmax`` and ``aten::_softmax_backward_data``.

``torch.softmax(x, -1)``, ``F.softmax`` and ``nn.Softmax`` call ``aten::_softmax``
(``half_to_float=False`` unless a dtype is passed); its autograd formula calls
``aten::_softmax_backward_data(grad, output, dim, input_dtype)``. Both have ATen
kernels on CPU and CUDA. accel's kernels take the last dim of contiguous
fp32/bf16/fp16 inputs (fp32 math).

Modules: :mod:`.reference` (eager oracle), :mod:`.conditions` (the shared
``cond``), :mod:`._wrappers` (the ATen-signature functions every DSL shares),
``triton_kernel``/``triton_impl``, ``helion_kernel``/``helion_impl``, ``cutedsl_kernel``/``cutedsl_impl``,
:mod:`.bench` (benchmark cases and peers). Importing any ``*_impl`` module imports no DSL runtime.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "aten::_softmax"
BWD_OP = "aten::_softmax_backward_data"

FAMILY = OpFamily("softmax", __name__, FWD_OP, BWD_OP, (reference.softmax, reference.softmax_backward_data),
                  {"triton": "triton_impl", "helion": "helion_impl", "cutedsl": "cutedsl_impl"}, bench="bench")
