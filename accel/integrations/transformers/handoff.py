"""What one replaced module leaves for the next: how to make a norm's output again (a :class:`Recipes` entry,
read by the modules that consume it), and a norm output computed with the residual add that precedes it (a
:class:`Handoffs` entry, taken by the norm's own call).

Both are explicit objects keyed weakly by the tensor they describe (``torch.utils.weak.WeakTensorKeyDictionary``:
by identity, never by value), so an entry neither travels with its tensor (pickling, a returned
``last_hidden_state``) nor keeps it alive, and dies with it.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from accel.kernels.ops.rms_norm_hf import op as rms_norm_ops

from .guards import outer_saved_tensor_hooks

__all__ = ["HANDOFFS", "RECIPES", "Handoffs", "RecomputeNorm", "RecomputedInput", "Recipes"]


class RecomputeNorm:
    """``accel::rms_norm_hf``'s ``y`` again from its input and weight: the same op, routed as the first call was,
    so the same kernel and the same bits."""

    __slots__ = ("eps", "unit")

    def __init__(self, eps: float, unit: bool) -> None:
        self.eps, self.unit = eps, unit

    def __call__(self, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm_ops.rms_norm(input, weight, self.eps, self.unit)


class _Recipe(NamedTuple):
    version: int  # y's version counter when the norm made it
    fn: Any
    tensors: tuple  # weakrefs to fn's arguments
    versions: tuple  # their version counters then
    recompute: bool  # whether the norm's norm_recompute allows recomputing y


class Recipes:
    """How to make a replaced RMSNorm's live output ``y`` again (accel's kernel computed it): kept by the norm,
    read by the modules that consume ``y`` (the MLP, the attention's projections), which then keep the recipe
    instead of ``y`` for backward."""

    def __init__(self) -> None:
        self._entries = WeakTensorKeyDictionary()

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, y: torch.Tensor, fn: Any, tensors: tuple, recompute: bool) -> None:
        """Note that ``fn(*tensors)`` makes ``y`` (weakly: ``tensors`` are not kept alive by the note)."""
        self._entries[y] = _Recipe(y._version, fn, tuple(weakref.ref(t) for t in tensors),
                                   tuple(t._version for t in tensors), recompute)

    def output(self, x: torch.Tensor) -> _Recipe | None:
        """The entry of ``x`` where it is a replaced RMSNorm's output, unchanged in place since the norm ran."""
        entry = self._entries.get(x) if len(self._entries) else None
        if entry is None or x._version != entry.version:
            return None
        return entry

    def recipe(self, x: torch.Tensor, entry: _Recipe | None = None) -> tuple | None:
        """``(fn, tensors)`` making ``x`` again where ``x`` is a replaced RMSNorm's output (``entry``: its
        :meth:`output`, looked up where not given), the norm's ``norm_recompute`` is on and neither ``x`` nor the
        norm's input and weight were changed in place since the norm ran (their version counters), all alive;
        else ``None`` (the consumer keeps ``x``). A change through ``.data`` is invisible to version counters:
        ``patch(model, norm_recompute=False)`` for models whose hooks write that way."""
        entry = self.output(x) if entry is None else entry
        if entry is None or not entry.recompute:
            return None
        tensors = tuple(r() for r in entry.tensors)
        if any(t is None for t in tensors) or tuple(t._version for t in tensors) != entry.versions:
            return None
        return entry.fn, tensors


class _Handoff(NamedTuple):
    version: int  # the sum's version counter then
    weight: torch.Tensor  # the norm's weight object
    weight_version: int
    eps: float
    unit: bool
    y: torch.Tensor  # the norm's output
    grad: bool  # grad mode then


class Handoffs:
    """A decoder layer's output ``s = residual + h`` -> the output of the RMSNorm that reads ``s`` next (the next
    layer's input norm, or the model's final norm), computed with the add by one kernel. Offered by the layer,
    taken (once) by the norm's own call on ``s``; dropped with ``s`` where no such call comes."""

    def __init__(self) -> None:
        self._entries = WeakTensorKeyDictionary()

    def __len__(self) -> int:
        return len(self._entries)

    def offer(self, s: torch.Tensor, weight: torch.Tensor, eps: float, unit: bool, y: torch.Tensor) -> None:
        self._entries[s] = _Handoff(s._version, weight, weight._version, eps, unit, y, torch.is_grad_enabled())

    def take(self, x: torch.Tensor, weight: torch.Tensor, eps: float, unit: bool) -> torch.Tensor | None:
        """The norm output offered for ``x`` where it is this norm's (the same weight object and eps), neither
        ``x`` nor the weight changed in place since (a change through ``.data`` is invisible:
        ``patch(model, norms=False)`` there), grad mode is what it was and no saved-tensor hooks (activation
        checkpointing) run; else ``None``. The entry is dropped either way."""
        entry = self._entries.pop(x, None) if len(self._entries) else None
        if (entry is None or x._version != entry.version or entry.weight is not weight
                or weight._version != entry.weight_version or entry.eps != eps or entry.unit != unit):
            return None
        # made in another autograd context: under no_grad (a reentrant checkpoint's forward) y has no graph for a
        # norm running with grad; inside a non-reentrant checkpoint the recomputation would find no handoff and
        # save what the forward did not
        if entry.grad != torch.is_grad_enabled() or outer_saved_tensor_hooks():
            return None
        return entry.y


#: The process's recipes and hand-offs (one of each: entries are keyed by tensors, which belong to no model).
RECIPES = Recipes()
HANDOFFS = Handoffs()


class RecomputedInput:
    """Saved-tensor hooks that keep, in place of the attention's input ``y`` (an RMSNorm's output, which its
    q/k/v projections each save), the recipe that makes it again; unpacked, ``y`` is recomputed once and
    shared by every projection's backward (freed with the last of them).

    A saved tensor is ``y`` when it starts where ``y`` does and has its dtype and size (the projections save
    ``y``'s 2-D view); every other saved tensor is kept as autograd keeps it (the hooks are installed only
    where no other saved-tensor hooks are active). The recipe's tensors (the norm's input and weight) are
    checked at unpack for in-place changes since the forward, as autograd checks its own saved tensors."""

    __slots__ = ("dtype", "fn", "numel", "ptr", "tensors", "value", "version", "versions")

    def __init__(self, y: torch.Tensor, recipe: tuple) -> None:
        self.ptr, self.numel, self.dtype, self.version = y.data_ptr(), y.numel(), y.dtype, y._version
        self.fn, self.tensors = recipe
        self.versions = tuple(t._version for t in self.tensors)  # as the norm left them (recipe() checked)
        self.value = None

    def hooks(self) -> tuple:
        def pack(t):
            if (t.data_ptr() == self.ptr and t.numel() == self.numel and t.dtype == self.dtype
                    and t._version == self.version):  # y's own view (views share y's counter), unchanged since
                return (self, t.shape, t.stride())  # the same start, so no offset
            return t

        def unpack(packed):
            if type(packed) is not tuple:
                return packed
            holder, shape, stride = packed
            return holder.get().as_strided(shape, stride)

        return pack, unpack

    def get(self) -> torch.Tensor:
        if self.value is None:
            if tuple(t._version for t in self.tensors) != self.versions:
                raise RuntimeError("accel.integrations.transformers: a tensor the attention's input is recomputed "
                                   "from (the RMSNorm's input or weight) was modified by an inplace operation "
                                   "between forward and backward; patch(model, norm_recompute=False) keeps the "
                                   "input itself instead.")
            with torch.no_grad():
                self.value = self.fn(*self.tensors)
        return self.value
