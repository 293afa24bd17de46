"""Registration through torch's native DSL registry (``torch._native``, torch 2.13+).

Each accel override becomes one node of the registry's override graph for
(op, dispatch key), with accel's ``accept``/``run`` as its cond and impl. The
registry then builds its own router, so ``torch.backends.python_native``
(``.triton.disabled()``, ``disable_operations("_fused_rms_norm")``,
``disable_dispatch_keys("CUDA")``) switches accel's kernels exactly like
upstream ones. accel's nodes go first in the graph, upstream nodes after.

The registry is private: it is reached only through
:func:`accel._compat.native_dsl_registry`, an adapter over the registry generations accel
recognises (``None`` for any other shape); accel then uses :mod:`accel.kernels.core.router`
instead and says so (:func:`accel.kernels.core.registry.choose_path`).
Under ``torch.compile``, the registry's routers are reachable only through its
opt-in decomposition table (``torch._native.registry.native_decomp_table()``);
the compiled graph otherwise uses Inductor's own code for the op, as with
accel's router.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from accel import _compat

from .op import OVERRIDE_WARNING, Op, aten_kernel, shape_key

NAME = "native"


def _registry() -> Any:
    reg = _compat.native_dsl_registry()
    if reg is None:  # chosen only where usable; changed under us -> say so plainly
        raise RuntimeError(f"accel.kernels: the native DSL registry disappeared: {_compat.native_dsl_registry_reason()}")
    return reg


def serves(op: Op, key: str, has_aten_kernel: bool) -> bool:
    """Whether the native registry can hold ``op`` at ``key``: recognised, an op of a namespace it serves
    (``aten``; on torch 2.15 also ``torch_nn``), and a kernel at the key for it to fall back to
    (``aten::_fused_rms_norm_backward`` has none on CPU: accel's router serves that one)."""
    reg = _compat.native_dsl_registry()
    return has_aten_kernel and reg is not None and op.namespace in reg.namespaces


def upstream_nodes(op: Op, key: str) -> list:
    """The nodes of ``op`` at ``key`` in torch's registry that are not accel's (upstream's overrides), in order."""
    reg = _compat.native_dsl_registry()
    if reg is None or op.namespace not in reg.namespaces:
        return []
    return [n for n in reg.graph(op.namespace, op.symbol, key) or () if not getattr(n, "_accel", None)]


def aot_covers(op: Op, key: str, args: tuple, kwargs: dict) -> bool:
    """Whether an AOT kernel embedded in torch serves this call (torch 2.15's ``torch._native.aot_manifest``):
    the registry's router then declines every override of the op for it, accel's included."""
    manifest = sys.modules.get("torch._native.aot_manifest")
    covers = getattr(manifest, "covers", None)
    if covers is None or op.namespace != "aten":
        return False
    try:
        return bool(covers(op.symbol, key, args, kwargs))
    except Exception:  # noqa: BLE001 - the registry treats a failing coverage check as uncovered too
        return False


def add(slot: Any, ov: Any) -> None:
    """Create ``ov``'s node in the registry (not yet installed: :func:`install` places it)."""
    reg = _registry()

    def cond(*args: Any, **kwargs: Any) -> bool:
        # an impl calling its own op: not itself again
        return not slot.reentered() and ov.take(args, kwargs) is not None  # FALLBACK too: ATen via impl

    def impl(*args: Any, **kwargs: Any) -> Any:  # the plan the cond's take memoised, where it did
        fn = ov.planned(args, kwargs)
        if fn is None and ov.denied and shape_key(args) in ov.denied:
            return slot.call_aten(*args, **kwargs)  # planning failed in this call's cond: ATen answers
        return slot.run_guarded(ov, args, kwargs, fn)

    cond.__qualname__ = f"accel cond of {ov.name}"
    impl.__qualname__ = f"accel impl of {ov.name}"
    node = reg.new_node(ov.dsl, slot.op.namespace, slot.op.symbol, slot.key, cond, impl)
    node._accel = ov.name
    ov.native_nodes[slot.key] = node


def remove(slot: Any, ov: Any) -> None:
    """Forget ``ov``'s node (the next :func:`install` drops it from the graph)."""
    ov.native_nodes.pop(slot.key, None)


def install(slot: Any, live: tuple) -> None:
    """Put ``live`` overrides' nodes first in the registry's graph, upstream's after them in their
    order, and let the registry rebuild its router (``torch.backends.python_native`` then switches
    both, and a ``python_native`` block exiting rebuilds the router with accel's nodes in it)."""
    reg = _registry()
    ns, symbol, key = slot.op.namespace, slot.op.symbol, slot.key
    upstream = upstream_nodes(slot.op, key)
    graph = reg.set_graph(ns, symbol, key, [ov.native_nodes[key] for ov in live] + upstream)
    # Capture the kernel under the registry's router (not the router) for fail-safe and verification.
    reg.teardown(ns, symbol, key)
    slot.original = aten_kernel(slot.op, key)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OVERRIDE_WARNING, category=UserWarning)
        reg.rebuild(ns, symbol, key)
    slot.state = graph


def release(slot: Any) -> None:
    """Nothing left to do: :func:`install` with no live override already removed accel's nodes."""


def inactive_reason(slot: Any, ov: Any) -> str | None:
    """Why ``ov`` is not running at ``slot`` beyond accel's filters: ``torch.backends.python_native`` state."""
    if ov not in slot.live:
        return "not installed"
    node = ov.native_nodes.get(slot.key)
    reg = _compat.native_dsl_registry()
    if node is None or reg is None:
        return "not installed"
    if not reg.enabled(node):
        return (f"disabled through torch.backends.python_native (DSL {ov.dsl!r}, op {slot.op.symbol!r} "
                f"or dispatch key {slot.key!r} is switched off there)")
    return None
