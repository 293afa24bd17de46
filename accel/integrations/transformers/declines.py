"""Each replaced module's declined calls, remembered: a call whose shape every accel kernel declined before runs
the module's own code at once, without the per-call checks.

Decode calls every replaced module once per token with the same tiny tensors, which every kernel declines (below
its size floor), so the checks a replaced module makes before it falls back to the model's own code (hooks,
plain weights, the registry's decision, stand-in tensors) are the whole cost accel adds there. Kept per module
instance (in its ``__dict__``: ``state_dict`` and ``parameters()`` do not see it) and keyed by the activation's
shape, strides, dtype, device, grad mode and autocast state and the dtypes of the weights the decision reads, a
decline is reused while the registry's decision epoch for the op holds (:func:`accel.kernels.core.autograd.decision_epoch`: the live overrides, the tuning tables' generation,
the failure counts); a registration, ``accel.kernels.disable()``, a new tuning table or a failure forgets it.

Only what the registry declined is kept (never a step-aside for a hook, a transform or checkpointing, which may
change call to call), and only a decline: running the model's own code is always correct, so a kept decline
can cost speed where the registry's answer would change for a reason the key does not see (an input's address
alignment), never a wrong number. Each reuse counts as a decline of every live override, as the registry's own
memo does (``accel kernels`` shows the same counts).
"""

from __future__ import annotations

from typing import Any

import torch

from accel.kernels.core.autograd import decision_epoch

from .guards import FORCED, device_type, live, transforms_active

__all__ = ["ATTR", "MAX", "Memo", "declined", "key", "remember"]

#: The instance attribute holding a module's declines: ``{(op, key): epoch}``.
ATTR = "_accel_declined"
#: Keys kept per module before its memo is emptied (a model has a handful of shapes per module).
MAX = 64


class Memo:
    """A holder of declines for a replaced function that belongs to no module (the attention's RoPE)."""


class _Declines(dict):
    """A module's declines: ``{(op, key): epoch}``. Copied (``copy.deepcopy``) and pickled (``torch.save``) empty:
    its epochs hold the registry's live overrides, which are neither copyable nor picklable and mean nothing
    elsewhere; the copy decides afresh."""

    def __deepcopy__(self, memo: dict) -> _Declines:
        return _Declines()

    def __reduce__(self) -> tuple:
        return (_Declines, ())


def key(x: torch.Tensor, *more: Any) -> tuple:
    """The call's key: ``x``'s shape, strides, dtype and device, the grad mode, autocast's state at ``x``'s device
    (its dtype, or ``None``), and ``more`` (hashable extras: the weights' dtypes the decision reads)."""
    device = x.device
    cast = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    return (x.shape, x.stride(), x.dtype, device, torch.is_grad_enabled(), cast, *more)


def declined(module: Any, op: str, x: torch.Tensor, *more: Any) -> bool:
    """Whether ``op``'s kernels declined a call of ``module`` on ``x`` (with ``more``: :func:`key`) under the
    registry's current epoch. One dict lookup where the module has declined nothing (the path every call whose
    kernel takes it stays on); never under :func:`.guards.forcing`."""
    memo = module.__dict__.get(ATTR)
    if not memo or torch.compiler.is_compiling():  # (a traced graph guards on what it reads: not on the memo)
        return False
    k = key(x, *more)
    epoch = memo.get((op, k))
    if epoch is None:
        return False
    slot = live(op, k[3].type)  # the key's device: cheaper than reading x's again
    if slot is None:
        return True  # no kernel of op is live there now: the module runs the model's code either way
    if slot is FORCED or epoch != decision_epoch(slot):
        return False
    for ov in slot.live:
        ov.declined += 1
    return True


def remember(module: Any, op: str, x: torch.Tensor, *more: Any) -> None:
    """Note that ``op``'s live kernels declined ``module``'s call on ``x`` (with ``more``: :func:`key`); call it
    right after the registry's decision said no. Nothing is kept where no kernel is live, under forcing, while
    compiling or under a ``torch.func`` transform, or where a live ``cond`` is not cacheable."""
    slot = live(op, device_type(x))
    if slot is None or slot is FORCED or torch.compiler.is_compiling() or transforms_active():
        return
    epoch = decision_epoch(slot)
    if epoch is None:
        return
    memo = module.__dict__.get(ATTR)
    if memo is None:
        memo = module.__dict__[ATTR] = _Declines()
    elif len(memo) >= MAX:
        memo.clear()
    memo[(op, key(x, *more))] = epoch
