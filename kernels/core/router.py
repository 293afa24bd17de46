"""accel's own router: a ``torch.library`` kernel at the backend dispatch key (torch 2.9+).

Per (op, dispatch key) one ``torch.library.Library("aten", "IMPL")`` holds one
router. The router tries the live overrides in order (``accept`` then ``run``)
and otherwise calls the ATen kernel captured with ``torch.library.get_kernel``
just before the router was installed, with the dispatcher's key set. Because it
sits at the backend key, ATen's Autograd and Autocast kernels above it still
run. With no live override the library is destroyed: no per-call cost at all.

The captured kernel may itself be another Python kernel (torch's native registry's router for the
op, where accel cannot join that registry's graph): when its library is destroyed
(``torch.backends.python_native`` switching it off) the capture is invalidated and the router
captures again (:meth:`~accel.kernels.core.slot.Slot.after_invalidated`), never failing the call.

A bare router at the CUDA key that falls through to the captured kernel adds about 4 µs per call
on the H200's host (``accel bench`` times it beside accel's router:
``accel bench`` on the H200); accel's own part is the floor gate and the
override loop.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import torch

from accel.kernels.tuning import table

from . import plans
from .op import OVERRIDE_WARNING, Op, aten_kernel

NAME = "accel"
#: The namespace whose routers are also called from Python without the dispatcher (:attr:`Slot.direct`):
#: accel's own custom ops, for which no other library registers a backend kernel above accel's router.
DIRECT_NAMESPACE = "accel"



class _FloorGate:
    """Whether every override in ``live`` declines a call by size alone: the router's first test.

    Only when each override's cond carries ``floor`` (a callable giving the fewest elements its
    kernel takes: the built-in conds, :func:`accel.kernels.tuning.table.floor`). Then a call whose first
    argument has fewer elements than the smallest floor goes straight to ATen with one ``numel()``:
    the 8-element router cost is one compare, not a cond per override. The least floor is cached
    until the tuning tables or ``MIN_NUMEL`` change (:data:`accel.kernels.tuning.table.GENERATION`); a
    floor that raises gives ``least`` 0 (no gate) for that call (the conds then decide and report their
    own failures). A cond carrying ``floor`` promises to decline every smaller call (a wrapper made with
    ``functools.wraps`` copies the attribute, and the promise: delete it if the wrapper accepts more).
    A floor must give an integer (``operator.index``); anything else turns the gate off. The ``floor``
    callables are read when the router is installed (at ``register``/``enable``): a cond's ``floor``
    replaced later takes effect at the next (re)installation, their results at every generation.

    The router reads :attr:`generation` and :attr:`least` inline (no call on its fast path) and calls
    :meth:`refresh` when the generation moved.
    """

    __slots__ = ("floors", "generation", "least")

    def __init__(self, live: tuple) -> None:
        self.floors = [ov.cond.floor for ov in live]
        self.generation = -1
        self.least = 0

    @staticmethod
    def applies(live: tuple) -> bool:
        """Whether ``live`` is non-empty and every cond carries a callable ``floor``."""
        return bool(live) and all(callable(getattr(ov.cond, "floor", None)) for ov in live)

    def refresh(self, generation: int) -> int:
        """The least floor for tuning generation ``generation`` (0 where a floor raises: no gate, uncached)."""
        try:
            least = operator.index(min(f() for f in self.floors))
        except Exception:  # noqa: BLE001 - a floor that cannot be computed, or no integer: no gate, the conds decide
            return 0
        # the generation read BEFORE the floors: a change while they are computed (a table load,
        # another thread's reload) leaves the cache stale by one generation, so it is recomputed. The
        # floor is stored before the generation: a thread reading the new generation finds the new floor.
        self.least = least
        self.generation = generation
        return least


def _no_signature(args: tuple) -> None:
    return None


class _Unboxed:
    """``call_boxed`` for the Python fallback of a key where ATen has no kernel (the keyset is not needed)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def call_boxed(self, keyset: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _make_router(slot: Any, live: tuple) -> Any:
    """The kernel at ``slot``'s key: skip overrides while one of this slot's impls runs (an impl calling
    its own op gets ATen: no recursion), send calls under the floor gate to ATen, else the first
    override that takes the call answers it (its memoised plan where its cond is cacheable: the
    signature is computed once per call for all of them), else ATen."""
    inside, run = slot.inside, slot.run_guarded
    gate = _FloorGate(live) if _FloorGate.applies(live) else None
    aten = slot.original if slot.original is not None else _Unboxed(slot.fallback)
    fallback = plans.FALLBACK
    tables = table  # a closure cell: the router reads GENERATION per call without a global lookup
    # the signature once per call, for every cacheable override's memo (None: no override memoises)
    signature = plans.signature if any(ov.cacheable for ov in live) else _no_signature

    def router(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if not inside.on:
            if gate is not None:  # inline: the 8-element path pays no call before ATen's
                generation = tables.GENERATION
                least = gate.least if gate.generation == generation else gate.refresh(generation)
                try:
                    small = args[0].numel() < least
                except (AttributeError, IndexError, TypeError):
                    small = False
                if small:
                    for ov in live:  # booked as declined by each (accel kernels shows them as fallbacks)
                        ov.declined += 1
                    try:
                        return aten.call_boxed(keyset, *args, **kwargs)
                    except RuntimeError as exc:
                        return slot.after_invalidated(exc).call_boxed(keyset, *args, **kwargs)
            sig = signature(args)
            for ov in live:
                fn = ov.take(args, kwargs, sig)
                if fn is not None:
                    if fn is fallback:  # planning failed: ATen answers, as for a raising impl
                        break
                    return run(ov, args, kwargs, fn)
        try:
            return aten.call_boxed(keyset, *args, **kwargs)
        except RuntimeError as exc:
            return slot.after_invalidated(exc).call_boxed(keyset, *args, **kwargs)

    return router


def serves(op: Op, key: str, has_aten_kernel: bool) -> bool:
    """Every op of every namespace at every backend key (a Python fallback stands in where ATen has no kernel)."""
    return True


def add(slot: Any, ov: Any) -> None:
    """Nothing to prepare per override on this path."""


def remove(slot: Any, ov: Any) -> None:
    """Nothing to forget per override on this path."""


def install(slot: Any, live: tuple) -> None:
    """(Re)install the router of ``slot`` for ``live`` overrides; none -> ATen's kernel alone."""
    lib = slot.state
    if lib is not None:
        lib._destroy()
        slot.state = None
    slot.direct = None
    slot.original = aten_kernel(slot.op, slot.key)
    if not live:
        return
    lib = torch.library.Library(slot.op.namespace, "IMPL", slot.key)
    router = _make_router(slot, live)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OVERRIDE_WARNING, category=UserWarning)
        lib.impl(slot.op.symbol, router, slot.key, with_keyset=True)
    slot.state = lib
    # accel's own ops (no other library registers kernels for them): the same router without the dispatcher
    if slot.op.namespace == DIRECT_NAMESPACE:
        slot.direct = router
    slot.top = repr(aten_kernel(slot.op, slot.key))  # accel's router: what explain compares the key's kernel with


def release(slot: Any) -> None:
    """Forget ``slot`` (its library is already destroyed by ``install(slot, ())``)."""
    slot.direct = None
    if slot.state is not None:
        slot.state._destroy()
        slot.state = None


def shadowed_by(slot: Any) -> str | None:
    """The kernel registered above accel's router at ``slot``'s key since it was installed (another
    ``torch.library`` kernel, such as torch's native registry rebuilding its router when a
    ``python_native`` block exits), or ``None`` while accel's router is the key's kernel."""
    if slot.state is None or slot.top is None:
        return None
    now = repr(aten_kernel(slot.op, slot.key))
    return None if now == slot.top else now


def inactive_reason(slot: Any, ov: Any) -> str | None:
    """Why ``ov`` is not installed at ``slot`` beyond accel's own filters (never, on this path)."""
    return None if ov in slot.live else "not installed"
