"""RMSNorm: ``aten::_fused_rms_norm`` and ``aten::_fused_rms_norm_backward``.

``F.rms_norm`` and ``nn.RMSNorm`` call ``aten::_fused_rms_norm`` on every device
(torch 2.9+: ``rms_norm_symint`` forwards to it except for channels-last,
complex inputs, a weight of another dtype, and MPS with grad); its autograd
formula calls ``aten::_fused_rms_norm_backward``. On CUDA both have ATen kernels;
on CPU the forward is a CompositeImplicitAutograd decomposition and the backward
has no kernel, so a CPU registration of the forward must come with the backward.

Modules: :mod:`.reference` (eager oracle), :mod:`.conditions` (the shared
``cond``; the tuning table is :mod:`accel.kernels.tuning.table`), ``triton_kernel``/``triton_impl``,
``helion_kernel``/``helion_impl``, :mod:`.bench` (benchmark cases and peers). Importing any ``*_impl``
module imports no DSL runtime; the kernels are imported at the first call.
"""

from accel.kernels.core.spec import OpFamily

from . import reference

FWD_OP = "aten::_fused_rms_norm"
BWD_OP = "aten::_fused_rms_norm_backward"

#: The family: the reference is the fallback where ATen has no kernel (the backward on CPU).
FAMILY = OpFamily("rms_norm", __name__, FWD_OP, BWD_OP,
                  (reference.fused_rms_norm, reference.fused_rms_norm_backward),
                  {"triton": "triton_impl", "helion": "helion_impl"}, fallback_to_reference=True, bench="bench")
