"""Per-call checks of the replaced modules: does an accel kernel take this call, and is calling an op directly
what the module's own call would do (no hook, no adapter, plain weights, no transform)?

Read from the modules' ``__dict__`` and ``_parameters``: these run on every call, and ``hasattr`` and
``Module.__getattr__`` cost more than the checks (0.7 µs a name, 2 µs for a missing one, on this project's CPU
host: ``benchmarks/model_host_cpu.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _nn_module

from accel import _compat
from accel.kernels.core.autograd import decide
from accel.kernels.core.slot import dispatch_key, live_slot

__all__ = ["FORCED", "accel_takes", "decision", "device_type", "dispatch_keys", "forcing", "global_hooks",
           "hooked", "instance_forward", "is_sharded", "live", "outer_saved_tensor_hooks", "plain_linear",
           "transforms_active", "weight"]

PLAIN_TENSORS = (torch.Tensor, nn.Parameter)


class _Forcing(threading.local):
    on = False


_FORCING = _Forcing()


class _Forced:
    """What :func:`live` gives for a CPU call while :func:`forcing` is on: a live slot stands in (truthy; no
    decision of it may be kept)."""

    def __bool__(self) -> bool:
        return True


FORCED = _Forced()


@contextlib.contextmanager
def forcing() -> Iterator[None]:
    """In this thread, every replaced module takes accel's path for CPU tensors, each op running its default
    CPU kernel (the op's eager reference, or a CPU registration where one exists): how :mod:`.verify` runs a
    replacement on a tiny instance with accel's references standing in for kernels."""
    before = _FORCING.on
    _FORCING.on = True
    try:
        yield
    finally:
        _FORCING.on = before


def live(op: str, device_type_: str) -> Any:
    """The slot of ``op`` at ``device_type_``'s dispatch key where it has a live override (:func:`live_slot`),
    :data:`FORCED` for a CPU call under :func:`forcing`, else ``None``."""
    if _FORCING.on and device_type_ == "cpu":
        return FORCED
    return live_slot(op, device_type_)


def dispatch_keys() -> None:
    """Look up the dispatch key of every device type accel's backends run (once, eagerly: the lookup reads
    entry points, which ``torch.compile`` cannot trace; a model moved to another device after ``patch`` finds
    its key cached)."""
    for name in ("cpu", "cuda", "xpu", "mps"):
        dispatch_key(name)


def accel_takes(op: str, *args: Any) -> bool:
    """Whether an accel kernel registered for ``op`` would answer ``op(*args)`` here (not the op's default
    kernel, its eager reference).

    A replaced module calls its accel op only where this is true and otherwise runs the model's own code,
    so that accel never makes a model slower by running a reference (a custom op's dispatch, and autograd
    through it, cost more than Hugging Face's own elementwise code; below the kernels' size floor, on a
    device with no kernel, for a dtype no kernel takes). Eager: the registry's own per-call decision for the
    live overrides of ``op`` at the arguments' dispatch key (their ``cond``, the tuning table, a shape that
    failed before), as the call would get it. Under ``torch.compile`` (the arguments are fake tensors, and a
    call into the registry would break the graph): a live override at that key is enough, and its ``cond``
    decides at run time inside the opaque op. Eager under a ``torch.func`` transform (grad, vmap), where
    accel's autograd nodes cannot run: ``False``.

    Args:
        op: the accel op's qualified name (``"accel::swiglu"``).
        *args: the op's arguments, tensors first, as the module would pass them.

    Returns:
        ``True`` where a kernel takes the call, else ``False`` (no registration at this device's key, all
        of them off, every ``cond`` declines, or a ``torch.func`` transform runs). A declined call counts in
        the override's ``declined``.
    """
    return bool(decision(op, *args, answer=False))


def decision(op: str, *args: Any, answer: bool = True) -> Any:
    """:func:`accel_takes`'s answer as the registry gives it (:func:`accel.kernels.core.autograd.decide`): the
    decided call (an ``Answer``, which the op's ``answer=`` argument runs without routing the call again),
    ``True`` or ``False``."""
    slot = live(op, device_type(args[0]))
    if slot is None:
        return False
    if slot is FORCED or torch.compiler.is_compiling():
        return True
    if transforms_active():
        return False
    return decide(slot, args, answer)


def outer_saved_tensor_hooks() -> bool:
    """Whether saved-tensor hooks are active (non-reentrant activation checkpointing, offloading) or disabled
    (``disable_saved_tensors_hooks``): then nothing is recomputed here and the MLP runs as modules, so that a
    checkpoint's recomputation saves what the forward saved and the outer hooks see every saved tensor."""
    return (torch._C._autograd._top_saved_tensors_default_hooks(False) is not None
            or not torch._C._autograd._saved_tensors_hooks_is_enabled())


def transforms_active() -> bool:
    """Whether a ``torch.func`` transform (grad, vmap) is running: an old-style autograd.Function cannot run there."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def plain_linear(x: torch.Tensor, *projs: Any) -> bool:
    """Whether calling ``F.linear`` with each of ``projs``' parameters is what calling it on ``x`` does: an
    ``nn.Linear`` itself, no hook of any kind (its own, global, or accelerate's offload hook and replaced
    ``forward``), its weight in ``x``'s dtype and on its device, and no autocast (whose cast the recomputing
    backward would not repeat), and weight and bias plain tensors (a subclass's ``__torch_function__``, a
    fake-quantised weight say, changes what ``F.linear`` computes, and the fused backward's GEMMs on the raw
    values would not follow it)."""
    if global_hooks() or torch.is_autocast_enabled(device_type(x)):
        return False
    dtype, device = x.dtype, x.device
    for proj in projs:
        if type(proj) is not nn.Linear or hooked(proj):
            return False
        params = proj.__dict__["_parameters"]
        w, bias = params.get("weight"), params.get("bias")
        if (type(w) not in PLAIN_TENSORS or w.dtype != dtype or w.device != device
                or (bias is not None and type(bias) not in PLAIN_TENSORS)):
            return False
    return True


def hooked(module: nn.Module) -> bool:
    """Whether calling ``module`` runs more than its class's ``forward``: a hook of its own of any kind, or a
    replaced ``forward`` or accelerate's offload hook (plain attributes: ``module._hf_hook = hook``)."""
    attrs = module.__dict__
    return bool("forward" in attrs or "_hf_hook" in attrs or attrs.get("_forward_hooks")
                or attrs.get("_forward_pre_hooks") or attrs.get("_backward_hooks") or attrs.get("_backward_pre_hooks"))


def instance_forward(module: nn.Module) -> str | None:
    """Why a class swap would not change what calling ``module`` runs, else ``None``: a ``forward`` set on the
    instance (the ``kernels`` package's ``kernelize``, which ``from_pretrained(..., use_kernels=True)`` runs,
    sets one on each module it replaces; so do accelerate's hooks), or kernelized functions the module calls
    (``use_kernelized_func``: its private copies of ``apply_rotary_pos_emb`` and the like)."""
    attrs = module.__dict__
    if "forward" in attrs:
        return ("its forward is set on the instance (the kernels package's kernelize, use_kernels=True, or "
                "another library), so the class's forward never runs: accel steps aside for that code")
    funcs = attrs.get("_kernel_funcs")
    if isinstance(funcs, dict) and any(isinstance(f, nn.Module) and "forward" in f.__dict__ for f in funcs.values()):
        return ("a function its forward calls was kernelized (the kernels package's use_kernelized_func after "
                "kernelize): accel steps aside for that kernel")
    return None


def global_hooks() -> bool:
    """Whether any global module hook is registered (``nn.modules.module.register_module_forward_hook`` and
    its kin): they run on every module call, so a module's code cannot be replaced by a direct op call."""
    return bool(_nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks
                or _nn_module._global_backward_hooks or _nn_module._global_backward_pre_hooks)


def device_type(t: torch.Tensor) -> str:
    """``t.device.type`` (a CUDA tensor's without building its ``torch.device``: 0.1 against 0.55 µs)."""
    return "cuda" if t.is_cuda else t.device.type


def weight(module: nn.Module) -> Any:
    """``module.weight``, read from its ``_parameters`` where it is one (``Module.__getattr__`` costs 0.7 µs)."""
    w = module._parameters.get("weight")
    return w if w is not None else module.weight


def is_sharded(t: torch.Tensor) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (a parameter of an FSDP2 group not gathered now,
    or a tensor-parallel shard)."""
    dtensor = _compat.dtensor_class()  # resolved once (a detection cache: accel.clear_cache forgets it)
    return dtensor is not None and isinstance(t, dtensor)
