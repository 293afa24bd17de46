"""accel's GeGLU ops: ``torch.library`` custom ops with fake kernels and autograd.

- ``accel::geglu(a, b) -> y``: ``y = gelu(a, approximate="tanh") * b``, ``a`` and ``b`` of one shape and floating
  dtype (any layout).
- ``accel::geglu_backward(grad_out, a, b) -> (grad_a, grad_b)``.

Both default kernels (every device) are the eager reference (:mod:`.reference`); accel's registry puts faster
ones at a backend's dispatch key (the op family of this folder). Autograd saves ``a`` and ``b`` (eager autograd of
``F.gelu(a) * b`` keeps ``gelu(a)`` too). Outputs are laid out like ``a`` (``b`` for ``grad_b``), as
``torch.empty_like`` lays them out.
"""

from __future__ import annotations

from accel.kernels.ops.swiglu.op import gated_ops

from . import BWD_OP, FWD_OP, reference

__all__ = ["BACKWARD", "FORWARD", "geglu", "geglu_backward"]

FORWARD, BACKWARD = FWD_OP, BWD_OP


#: ``gelu_tanh(a) * b`` (:func:`.reference.geglu`) and its gradients (:func:`.reference.geglu_backward`): ``a``,
#: ``b`` of one shape, dtype and device.
geglu, geglu_backward = gated_ops(FORWARD, BACKWARD, reference)
