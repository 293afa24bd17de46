"""The private native DSL operator registry (``torch._native``) and ``torch.library.get_kernel``."""

from __future__ import annotations

import functools
import importlib.util
import sys

import torch

__all__ = ["has_native_dsl_registry", "library_get_kernel", "native_dsl_registry", "native_dsl_registry_reason"]


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
    """``torch._native`` (the native DSL operator registry, torch 2.13+). Not imported here."""
    return importlib.util.find_spec("torch._native") is not None


#: What accel uses of the private native DSL registry (``torch._native.registry``).
_NATIVE_REGISTRY_NAMES = (
    "register_op_override",
    "_register_overrides_from_graph",
    "_destroy_aten_override",
    "_graphs",
    "_filter_state",
    "_OverrideNode",
)
#: Fields of ``torch._native.registry._OverrideNode`` accel reads or keeps stable.
_NATIVE_NODE_FIELDS = ("dsl_name", "op_symbol", "dispatch_key", "cond_fn", "impl_fn", "node_id", "active")


@functools.cache
def native_dsl_registry():
    """The native DSL operator registry module (``torch._native.registry``), or ``None``.

    ``torch._native`` (torch 2.13+) is private. It is returned only when it has
    every function and field accel relies on (checked with ``hasattr``), so a
    torch that changes it makes accel degrade to its own router instead of
    failing. Imports ``torch._native`` (torch itself already does at import) but
    no DSL runtime.

    Returns:
        The ``torch._native.registry`` module, or ``None`` when it is missing or changed.
    """
    if not _package().has_native_dsl_registry():
        return None
    try:
        import torch._native.registry as registry
    except ImportError:
        return None
    if not all(hasattr(registry, name) for name in _NATIVE_REGISTRY_NAMES):
        return None
    fields = getattr(registry._OverrideNode, "__dataclass_fields__", {})
    if not all(name in fields for name in _NATIVE_NODE_FIELDS):
        return None
    if not hasattr(registry._filter_state, "check_enabled"):
        return None
    return registry


def native_dsl_registry_reason() -> str:
    """One line saying why :func:`native_dsl_registry` is or is not usable here."""
    compat = _package()
    if not compat.has_native_dsl_registry():
        return f"torch {torch.__version__} has no torch._native (native DSL registry, torch 2.13+)"
    if compat.native_dsl_registry() is None:
        return (f"torch {torch.__version__} has torch._native, but its registry lacks one of "
                f"{', '.join(_NATIVE_REGISTRY_NAMES)} or node fields {', '.join(_NATIVE_NODE_FIELDS)}")
    return f"torch {torch.__version__}: torch._native.registry usable"
