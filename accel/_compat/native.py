"""The private native DSL operator registry (``torch._native``) and ``torch.library.get_kernel``.

torch's registry is private and changed shape between releases. accel recognises two
generations by the signatures of the functions it calls (never by version string) and
hands the rest of accel one adapter, :class:`NativeRegistry`, over either:

- ``"op-keyed"`` (torch 2.13, 2.14): graphs keyed by ``(op_symbol, dispatch_key)``, ``aten`` only;
  ``_destroy_aten_override(op, key)``, ``_register_overrides_from_graph(op, key, graph)``.
- ``"namespaced"`` (torch 2.15): graphs keyed by ``(lib_symbol, op_symbol, dispatch_key)``, the
  namespaces in ``_ALLOWED_LIB_SYMBOLS`` (``aten``, ``torch_nn``); ``_destroy_override(lib, op, key)``,
  ``_register_overrides_from_graph(lib, op, key, graph)``, nodes carry ``lib_symbol``.

A registry of any other shape is not used: :func:`native_dsl_registry` returns ``None`` and
:func:`native_dsl_registry_reason` says which part did not match, so accel's kernels take accel's
own router and say so (``accel.kernels`` warns once, ``accel info`` and ``accel doctor`` show it).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["has_native_dsl_registry", "library_get_kernel", "native_dsl_registry",
           "native_dsl_registry_reason"]


def _package():
    """The ``accel._compat`` package: calls between its functions go through it, so a function that a
    test or :mod:`accel.testing` replaces there is the one that answers."""
    return sys.modules[__package__]


def library_get_kernel():
    """``torch.library.get_kernel`` (torch 2.9+), or ``None`` where the running torch lacks it.

    accel's own kernel router uses it to capture the ATen kernel it falls back to.
    """
    return getattr(torch.library, "get_kernel", None)


@functools.cache
def has_native_dsl_registry() -> bool:
    """``torch._native`` (the native DSL registry, torch 2.13+). Not imported here."""
    return importlib.util.find_spec("torch._native") is not None


#: Fields of ``torch._native.registry._OverrideNode`` accel reads or keeps stable (both generations).
_NODE_FIELDS = ("dsl_name", "op_symbol", "dispatch_key", "cond_fn", "impl_fn", "node_id", "active")
_REGISTER_PARAMS = ("backend", "lib_symbol", "op_symbol", "dispatch_key", "cond", "impl")

#: Per generation: function -> the leading parameter names accel passes positionally; the libraries
#: dict that holds the installed routers; extra node fields.
_GENERATIONS: dict[str, dict[str, Any]] = {
    "namespaced": {
        "functions": {"register_op_override": _REGISTER_PARAMS,
                      "_register_overrides_from_graph": ("lib_symbol", "op_symbol", "dispatch_key", "graph"),
                      "_destroy_override": ("lib_symbol", "op_symbol", "dispatch_key")},
        "libs": "_override_libs",
        "fields": ("lib_symbol",),
    },
    "op-keyed": {
        "functions": {"register_op_override": _REGISTER_PARAMS,
                      "_register_overrides_from_graph": ("op_symbol", "dispatch_key", "graph"),
                      "_destroy_aten_override": ("op_symbol", "dispatch_key")},
        "libs": "_aten_override_libs",
        "fields": (),
    },
}


def _leading_params(fn: Any) -> tuple[str, ...] | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _mismatch(module: Any, generation: str) -> str | None:
    """What of ``module`` does not match ``generation``, or ``None``."""
    spec = _GENERATIONS[generation]
    for name, params in spec["functions"].items():
        fn = getattr(module, name, None)
        if fn is None:
            return f"no {name}"
        got = _leading_params(fn)
        if got is None or got[:len(params)] != params:
            return f"{name}{tuple(got or ())} (expected leading parameters {params})"
    for name in ("_graphs", "_filter_state", "_OverrideNode", spec["libs"]):
        if not hasattr(module, name):
            return f"no {name}"
    if "filter_state" not in inspect.signature(module._register_overrides_from_graph).parameters:
        return "_register_overrides_from_graph takes no filter_state"
    fields = getattr(module._OverrideNode, "__dataclass_fields__", {})
    missing = [f for f in (*_NODE_FIELDS, *spec["fields"]) if f not in fields]
    if missing:
        return f"_OverrideNode lacks {', '.join(missing)}"
    if not hasattr(module._filter_state, "check_enabled"):
        return "_filter_state has no check_enabled"
    return None


class NativeRegistry:
    """One interface over the recognised generations of ``torch._native.registry``.

    Graphs are lists of ``_OverrideNode``; the registry's router for ``(namespace, op, key)`` tries
    the enabled nodes of its graph in order and otherwise calls the kernel it captured when it was
    installed. Every method takes the op's namespace, which the op-keyed generation only accepts as
    ``"aten"``.

    Attributes:
        module: ``torch._native.registry``.
        generation: ``"namespaced"`` or ``"op-keyed"``.
        namespaces: the op namespaces whose ops the registry can override.
    """

    def __init__(self, module: Any, generation: str) -> None:
        self.module, self.generation = module, generation
        self._namespaced = generation == "namespaced"
        allowed = getattr(module, "_ALLOWED_LIB_SYMBOLS", None) if self._namespaced else None
        self.namespaces: frozenset[str] = frozenset(allowed) if allowed else frozenset({"aten"})
        self._libs: dict = getattr(module, _GENERATIONS[generation]["libs"])

    def __repr__(self) -> str:
        return f"NativeRegistry({self.generation}, namespaces={sorted(self.namespaces)})"

    def _key(self, namespace: str, op: str, key: str) -> tuple:
        if namespace not in self.namespaces:
            raise ValueError(f"the native registry of torch {torch.__version__} serves namespaces "
                             f"{sorted(self.namespaces)}, not {namespace!r}")
        return (namespace, op, key) if self._namespaced else (op, key)

    def graph(self, namespace: str, op: str, key: str) -> list | None:
        """The graph (list of nodes) of ``namespace::op`` at ``key``, or ``None`` where there is none."""
        return self.module._graphs.get(self._key(namespace, op, key))

    def set_graph(self, namespace: str, op: str, key: str, nodes: list) -> list:
        """Make ``nodes`` the graph of ``namespace::op`` at ``key`` (an empty list removes it); returns it."""
        k = self._key(namespace, op, key)
        graphs = self.module._graphs
        if nodes:
            graph = graphs.setdefault(k, [])
            graph[:] = nodes
            return graph
        graphs.pop(k, None)
        return []

    def new_node(self, dsl: str, namespace: str, op: str, key: str, cond: Callable, impl: Callable) -> Any:
        """A node for ``impl`` (guarded by ``cond``), made by the registry but not left in any graph."""
        k = self._key(namespace, op, key)
        had = k in self.module._graphs
        self.module.register_op_override(dsl, namespace, op, key, cond, impl)
        graph = self.module._graphs[k]
        node = graph.pop()  # register_op_override appended it; the caller decides its place
        if not graph and not had:
            del self.module._graphs[k]
        return node

    def installed(self, namespace: str, op: str, key: str) -> bool:
        """Whether the registry's router for ``namespace::op`` is installed at ``key`` now."""
        return self._key(namespace, op, key) in self._libs

    def teardown(self, namespace: str, op: str, key: str) -> None:
        """Remove the registry's router for ``namespace::op`` at ``key`` (the kernel below it answers)."""
        self._key(namespace, op, key)
        if self._namespaced:
            self.module._destroy_override(namespace, op, key)
        else:
            self.module._destroy_aten_override(op, key)

    def rebuild(self, namespace: str, op: str, key: str) -> None:
        """Reinstall the registry's router for ``namespace::op`` at ``key`` from its graph, with
        ``torch.backends.python_native``'s filters (an empty graph: the op's own kernel alone)."""
        graph = self.graph(namespace, op, key) or []
        args = (namespace, op, key) if self._namespaced else (op, key)
        self.module._register_overrides_from_graph(*args, graph, filter_state=self.module._filter_state)

    def enabled(self, node: Any) -> bool:
        """Whether ``torch.backends.python_native``'s filters let ``node`` run."""
        return bool(self.module._filter_state.check_enabled(node))


def _recognise() -> tuple[NativeRegistry | None, str]:
    if not _package().has_native_dsl_registry():
        return None, f"torch {torch.__version__} has no torch._native (native DSL registry, torch 2.13+)"
    try:
        import torch._native.registry as module
    except ImportError as exc:
        return None, f"torch {torch.__version__}: torch._native.registry does not import: {exc}"
    mismatches = {}
    for generation in _GENERATIONS:
        why = _mismatch(module, generation)
        if why is None:
            reg = NativeRegistry(module, generation)
            return reg, (f"torch {torch.__version__}: torch._native.registry usable ({generation}, "
                         f"namespaces {', '.join(sorted(reg.namespaces))})")
        mismatches[generation] = why
    told = "; ".join(f"not {g}: {w}" for g, w in mismatches.items())
    return None, (f"torch {torch.__version__} has torch._native, but its registry is not a shape accel "
                  f"recognises ({told})")


@functools.cache
def _recognised() -> tuple[NativeRegistry | None, str]:
    return _recognise()


def native_dsl_registry() -> NativeRegistry | None:
    """accel's adapter over torch's native DSL registry (``torch._native.registry``), or ``None``.

    ``torch._native`` (torch 2.13+) is private; it is used only in a shape accel recognises
    (module docstring), checked once from the signatures of the functions accel calls. Imports
    ``torch._native`` (torch itself already does at import) but no DSL runtime.

    Returns:
        A :class:`NativeRegistry`, or ``None`` when the registry is missing or of another shape
        (:func:`native_dsl_registry_reason` says which).
    """
    return _recognised()[0]


native_dsl_registry.cache_clear = _recognised.cache_clear  # type: ignore[attr-defined]


def native_dsl_registry_reason() -> str:
    """One line saying why :func:`native_dsl_registry` is or is not usable here."""
    return _recognised()[1]
