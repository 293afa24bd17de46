"""DTensor sharding rules of accel's custom ops, so tensor- and sequence-parallel models can call them.

A ``DTensor`` reaching a custom op that DTensor knows no strategy for raises ``NotImplementedError`` from the
middle of a step. Each accel op (``accel::rms_norm_hf``, ``accel::add_rms_norm_hf``, ``accel::swiglu``,
``accel::geglu``, ``accel::rope``, ``accel::linear_cross_entropy`` and their backward ops) gets a rule here, in the form of
``torch.distributed.tensor.experimental.register_sharding``: the placements (one mesh dimension) under which
the op computed on each rank's shard gives that rank's shard of the whole result, and beside them
all-``Replicate``. DTensor picks the cheapest; inputs placed otherwise (sharded over the normalised dim,
``Partial`` sums) are redistributed to one of them first, so every placement gives the unsharded op's result.

- ``swiglu``, ``geglu`` and their backward ops: elementwise; any dim, ``a``, ``b`` and the gradient sharded alike.
- ``rms_norm_hf``, ``add_rms_norm_hf``: any dim but the last (the sequence or batch, as ``SequenceParallel``
  shards it) with the weight replicated; the backward's weight gradient is a ``Partial`` sum over the ranks.
- ``rope``: the batch, heads or sequence dim of ``q`` and ``k``, ``cos`` and ``sin`` sharded on the batch
  (where theirs is not 1) or the sequence alike, replicated for heads.
- ``linear_cross_entropy``: rows (``input`` and ``target`` on dim 0, the weights replicated) for
  ``reduction="none"`` (losses sharded) and ``"sum"`` (loss and weight gradients ``Partial``); ``"mean"``
  divides by the count of every rank's rows and a class-sharded (vocabulary-parallel) weight needs the
  softmax over all classes, so those run replicated.

:func:`install` (called when ``accel.kernels`` is imported) registers the rules once ``torch.distributed.tensor``
is imported, by whoever imports it first, and never imports it itself: that import costs about 0.6 s
(torch 2.13, this project's CPU host) and a DTensor cannot exist before it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["MODULES", "RULES", "install", "register", "registered"]

#: The modules that define the ops, imported by :func:`register` (custom ops exist once their module ran).
MODULES = ("swiglu", "geglu", "rms_norm_hf", "add_rms_norm_hf", "rope", "linear_cross_entropy")
_DTENSOR = "torch.distributed.tensor"
_LOCK = threading.Lock()
_DONE: list[str] = []


def _placements() -> tuple[Any, Any, Any]:
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Shard, Replicate(), Partial()


def _same(dims: int, n_out: int, n_in: int, *extra: None) -> list:
    """All-Replicate, and every dim in ``range(dims)`` sharded alike on every output and input."""
    shard, rep, _ = _placements()
    out = [([rep] * n_out, [rep] * n_in + list(extra))]
    out += [([shard(d)] * n_out, [shard(d)] * n_in + list(extra)) for d in range(dims)]
    return out


def swiglu(a, b):
    """``accel::swiglu(a, b) -> y``: elementwise."""
    return _same(a.ndim, 1, 2)


def swiglu_backward(grad_out, a, b):
    """``accel::swiglu_backward(grad_out, a, b) -> (grad_a, grad_b)``: elementwise."""
    return _same(a.ndim, 2, 3)


def geglu(a, b):
    """``accel::geglu(a, b) -> y``: elementwise."""
    return _same(a.ndim, 1, 2)


def geglu_backward(grad_out, a, b):
    """``accel::geglu_backward(grad_out, a, b) -> (grad_a, grad_b)``: elementwise."""
    return _same(a.ndim, 2, 3)


def rms_norm_hf(input, weight, eps, unit_offset=False):
    """``accel::rms_norm_hf(input, weight, eps, unit_offset) -> (y, rstd)``: rows; ``rstd`` is
    ``input.shape[:-1]``, so row dim ``d`` is its dim ``d`` too."""
    shard, rep, _ = _placements()
    out = [([rep, rep], [rep, rep, None, None])]
    out += [([shard(d), shard(d)], [shard(d), rep, None, None]) for d in range(input.ndim - 1)]
    return out


def _grads(shard_d: Any, input_grad: bool, weight_grad: bool) -> list:
    """``(grad_input, grad_weight)`` of a norm sharded on rows: an empty ``[0]`` gradient not asked for is
    replicated."""
    _, rep, partial = _placements()
    return [shard_d if input_grad else rep, partial if weight_grad else rep]


def rms_norm_hf_backward(grad_out, input, weight, rstd, unit_offset, input_grad, weight_grad):
    """``accel::rms_norm_hf_backward(...) -> (grad_input, grad_weight)``: rows; the weight's gradient sums over
    them (``Partial``)."""
    shard, rep, _ = _placements()
    out = [([rep, rep], [rep, rep, rep, rep, None, None, None])]
    out += [(_grads(shard(d), input_grad, weight_grad), [shard(d), shard(d), rep, shard(d), None, None, None])
            for d in range(input.ndim - 1)]
    return out


def add_rms_norm_hf(input, residual, weight, eps, unit_offset=False):
    """``accel::add_rms_norm_hf(input, residual, weight, eps, unit_offset) -> (sum, y, rstd)``: rows."""
    shard, rep, _ = _placements()
    out = [([rep] * 3, [rep, rep, rep, None, None])]
    out += [([shard(d)] * 3, [shard(d), shard(d), rep, None, None]) for d in range(input.ndim - 1)]
    return out


def add_rms_norm_hf_backward(grad_y, grad_sum, sum, weight, rstd, unit_offset, input_grad, weight_grad):
    """``accel::add_rms_norm_hf_backward(...) -> (grad_input, grad_weight)``: rows (``grad_sum`` may be
    ``None``)."""
    shard, rep, _ = _placements()

    def inputs(p):
        return [p, None if grad_sum is None else p, p, rep, p, None, None, None]

    out = [([rep, rep], inputs(rep))]
    out += [(_grads(shard(d), input_grad, weight_grad), inputs(shard(d))) for d in range(sum.ndim - 1)]
    return out


def rope(q, k, cos, sin, unsqueeze_dim=1):
    """``accel::rope(q, k, cos, sin, unsqueeze_dim) -> (q_out, k_out)``: ``q``, ``k`` ``[B, H, S, D]``
    (``[B, S, H, D]`` for ``unsqueeze_dim=2``), ``cos``, ``sin`` ``[B or 1, S, D]``; not the head size ``D``
    (``rotate_half`` pairs its two halves)."""
    shard, rep, _ = _placements()
    batch = rep if cos.shape[0] == 1 else shard(0)
    out = [([rep, rep], [rep, rep, rep, rep, None])]
    for q_dim, cos_p in ((0, batch), (unsqueeze_dim, rep), (3 - unsqueeze_dim, shard(1))):
        out.append(([shard(q_dim)] * 2, [shard(q_dim)] * 2 + [cos_p, cos_p, None]))
    return out


def rope_backward(grad_q, grad_k, cos, sin, unsqueeze_dim=1):
    """``accel::rope_backward(...)``: as :func:`rope` (the same rotation by the opposite angle)."""
    return rope(grad_q, grad_k, cos, sin, unsqueeze_dim)


def _lce_inputs(p: Any, first: list, linear_bias: Any, weight: Any, n_scalars: int) -> list:
    _, rep, _ = _placements()
    return [*first, None if linear_bias is None else rep, None if weight is None else rep] + [None] * n_scalars


def linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                         label_smoothing, batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph,
                         compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0,
                         z_loss=0.0):
    """``accel::linear_cross_entropy(...) -> (loss, grad_input, grad_linear_weight, grad_linear_bias)``: rows
    for ``"none"`` and ``"sum"``; the gradients computed in the forward (``"sum"``) follow the loss."""
    shard, rep, partial = _placements()
    out = [([rep] * 4, _lce_inputs(rep, [rep, rep, rep], linear_bias, weight, 12))]
    rows = _lce_inputs(shard(0), [shard(0), rep, shard(0)], linear_bias, weight, 12)
    if reduction == "none":  # the gradients are empty [0, 0] / [0] tensors
        out.append(([shard(0), rep, rep, rep], rows))
    elif reduction == "sum":
        grads = [shard(0) if compute_input_grad else rep, partial if compute_linear_weight_grad else rep,
                 partial if compute_linear_bias_grad and linear_bias is not None else rep]
        out.append(([partial, *grads], rows))
    return out


def linear_cross_entropy_backward(grad_loss, input, linear_weight, target, linear_bias, weight, ignore_index,
                                  label_smoothing, batch_chunk_size, acc_policy, acc_dtype, compute_input_grad,
                                  compute_linear_weight_grad, compute_linear_bias_grad, softcap=0.0, z_loss=0.0):
    """``accel::linear_cross_entropy_backward(...) -> (grad_input, grad_linear_weight, grad_linear_bias)``
    (``reduction="none"``): rows, the weight gradients ``Partial``."""
    shard, rep, partial = _placements()
    out = [([rep] * 3, [rep, *_lce_inputs(rep, [rep, rep, rep], linear_bias, weight, 10)])]
    grads = [shard(0) if compute_input_grad else rep, partial if compute_linear_weight_grad else rep,
             partial if compute_linear_bias_grad and linear_bias is not None else rep]
    out.append((grads, [shard(0), *_lce_inputs(shard(0), [shard(0), rep, shard(0)], linear_bias, weight, 10)]))
    return out


#: op name (``torch.ops.accel.<name>``) -> its rule.
RULES: dict[str, Callable[..., list]] = {f.__name__: f for f in (
    swiglu, swiglu_backward, geglu, geglu_backward, rms_norm_hf, rms_norm_hf_backward, add_rms_norm_hf, add_rms_norm_hf_backward, rope,
    rope_backward, linear_cross_entropy, linear_cross_entropy_backward)}


def _static_argnum(op: Any) -> int:
    """Index of the op's first argument that is not a tensor (nor an optional one): from there on every
    argument keys DTensor's propagation cache (the rules read flags such as ``input_grad``)."""
    import torch

    for i, arg in enumerate(op._schema.arguments):
        t = arg.type
        if isinstance(t, torch.OptionalType):
            t = t.getElementType()
        if not isinstance(t, torch.TensorType):
            return i
    return len(op._schema.arguments)


def register() -> list[str]:
    """Register every rule of :data:`RULES` with DTensor (once per process); returns the ops registered.

    Raises:
        FeatureUnavailableError: the running torch has no custom-op sharding registration accel knows
            (:func:`accel._compat.register_dtensor_sharding`).

    .. note:: Imports ``torch.distributed.tensor`` and the ops' modules.
    """
    import torch

    from accel import _compat

    with _LOCK:
        if _DONE:
            return list(_DONE)
        for name in MODULES:
            importlib.import_module(f"accel.kernels.ops.{name}.op")
        for name, rule in RULES.items():
            op = getattr(torch.ops.accel, name).default
            _compat.register_dtensor_sharding(op, rule, _static_argnum(op))
            _DONE.append(f"accel::{name}")
        return list(_DONE)


def registered() -> list[str]:
    """The ops whose rules are registered in this process (``[]`` until ``torch.distributed.tensor`` is imported)."""
    return list(_DONE)


def _register_quietly() -> None:
    """:func:`register`, saying why where it cannot (never failing the import that triggered it)."""
    try:
        register()
    except Exception as exc:  # noqa: BLE001 - a failure here must not fail the user's import of torch.distributed
        from accel.errors import KernelRegistrationWarning

        warnings.warn(f"accel.kernels: DTensor sharding rules of accel's ops not registered ({type(exc).__name__}: "
                      f"{exc}). A DTensor passed to accel::rms_norm_hf, swiglu, rope or linear_cross_entropy "
                      f"will raise. Pass local tensors (DTensor.to_local()) to them, or report this with your torch "
                      f"version.", KernelRegistrationWarning, stacklevel=2)


class _Loader(importlib.abc.Loader):
    """``torch.distributed.tensor``'s own loader, then :func:`_register_quietly` (the module's spec and
    ``__loader__`` are its own again before it runs)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterDTensorImport)]
        _register_quietly()


class _AfterDTensorImport(importlib.abc.MetaPathFinder):
    """A finder that answers only for ``torch.distributed.tensor``: the spec the other finders give, with a
    loader that registers the rules once the module has run (and takes this finder off ``sys.meta_path``: a
    spec asked for without an import, ``importlib.util.find_spec``, leaves it there)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _DTENSOR:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _AfterDTensorImport):
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def install() -> None:
    """Register the rules now if ``torch.distributed.tensor`` is imported, else right after its import.

    Cheap: imports nothing (one finder on ``sys.meta_path`` that looks at one module name).
    """
    if _DTENSOR in sys.modules:
        _register_quietly()
    elif not any(isinstance(f, _AfterDTensorImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDTensorImport())
