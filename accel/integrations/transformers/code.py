"""A class's ``forward`` as code: its decorator chain, its innermost function, a copy of it with other globals,
and the accel subclass that carries a replacement.

transformers decorates forwards with ``functools.wraps`` wrappers (``can_return_tuple``, ``deprecate_kwarg``,
``check_model_inputs``, ...) that change between releases. accel never compares them with a copy of one
release's code: :func:`rewrap` keeps whatever chain the class has and swaps only the function at its centre, and
the result is verified by behaviour (:mod:`.verify`).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from torch import nn

from .families import OPS

__all__ = ["RewrapError", "functions", "innermost", "rewrap", "scope", "subclass"]

#: The module accel's subclasses name as theirs: pickle finds ``Accel<name>`` there (its ``__getattr__``).
PACKAGE = __name__.rpartition(".")[0]


class RewrapError(TypeError):
    """A decorator chain that :func:`rewrap` cannot rebuild (a wrapper that does not hold the function it wraps
    in exactly one closure cell)."""


def innermost(fn: Any) -> Any:
    """The function at the centre of ``fn``'s ``__wrapped__`` chain (``fn`` itself where nothing wraps it)."""
    seen = 0
    while hasattr(fn, "__wrapped__") and seen < 32:
        fn, seen = fn.__wrapped__, seen + 1
    return fn


def rewrap(fn: Any, centre: Callable) -> Callable:
    """``fn``'s decorator chain rebuilt around ``centre`` in place of its innermost function: each wrapper
    copied with the cell that held the function it wraps pointing at the rebuilt inner one (its other cells,
    globals, defaults and attributes kept).

    Raises:
        RewrapError: a wrapper is not a plain function, or does not hold the function it wraps in exactly one
            closure cell.
    """
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is None:
        return centre
    if not isinstance(fn, types.FunctionType):
        raise RewrapError(f"{fn!r} wraps {wrapped!r} but is not a plain function")
    inner = rewrap(wrapped, centre)
    cells = fn.__closure__ or ()
    hits = [i for i, c in enumerate(cells) if _contents(c) is wrapped]
    if len(hits) != 1:
        raise RewrapError(f"{fn.__qualname__} holds the function it wraps in {len(hits)} closure cells, not one")
    new_cells = tuple(types.CellType(inner) if i == hits[0] else c for i, c in enumerate(cells))
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, new_cells)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update(fn.__dict__)
    copy.__wrapped__ = inner
    copy.__qualname__, copy.__doc__ = fn.__qualname__, fn.__doc__
    return copy


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def functions(cls: type) -> Iterable[types.FunctionType]:
    """The plain functions defined by ``cls`` and its bases below ``nn.Module``."""
    for klass in cls.__mro__:
        if klass is nn.Module or klass is object:
            break
        yield from (f for f in vars(klass).values() if isinstance(f, types.FunctionType))


def scope(globals_: dict[str, Any], replace: dict[str, Any]) -> dict[str, Any]:
    """A copy of a modeling module's globals with ``replace`` in it, as the ``__dict__`` of a module of its own in
    ``sys.modules`` (``accel.integrations.transformers.scopes.<modeling module>``): the modeling module's globals
    stay as they are, and ``torch.compile`` (which names a function's globals by their module's ``__name__`` and
    re-imports it for its guards) finds the copy's objects, not the modeling module's."""
    name = f"{PACKAGE}.scopes.{globals_['__name__']}"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, globals_.get("__doc__"))
        sys.modules[name] = module
    module.__dict__.update({k: v for k, v in globals_.items() if k not in ("__name__", "__spec__", "__loader__")})
    module.__dict__.update(replace)
    return module.__dict__


def with_globals(fn: types.FunctionType, globals_: dict[str, Any]) -> types.FunctionType:
    """``fn`` (a plain function) running with ``globals_``."""
    copy = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__, copy.__doc__ = fn.__qualname__, fn.__doc__
    return copy


def subclass(cls: type, role: str, namespace: dict[str, Any]) -> type:
    """The accel subclass of ``cls``: named like it (transformers reads class names: ``save_pretrained`` writes
    ``config.architectures`` from it, weight init matches ``"RMSNorm"`` in it), found as ``Accel<name>`` in the
    integration's package (its ``__qualname__``: what pickle looks up)."""
    namespace = {"accel_original": cls, "accel_op": OPS[role], "accel_role": role, "__module__": PACKAGE,
                 "__qualname__": f"Accel{cls.__name__}",
                 "__doc__": f"{cls.__name__} on {OPS[role]} ({PACKAGE}).", **namespace}
    return type(cls.__name__, (cls,), namespace)
