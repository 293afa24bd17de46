"""The public API is defined statically: ``accel.synchronize``, the stream and memory functions and the rest are
plain module-level ``def``\\ s with real signatures, type hints and docstrings, visible to editors and static type
checkers; the choice per vendor is made inside them (resolved once, forgotten by ``accel.clear_cache``).

Before: ``accel.synchronize.__qualname__`` was ``_build.<locals>.synchronize`` (built at run time by a module
``__getattr__``), and ``accel.device_count`` was whatever torch function the active backend resolved to.
"""

from __future__ import annotations

import ast
import inspect

import pytest
import torch
from _runtime_fakes import fake_runtime

import accel
import accel.memory
import accel.runtime
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu

#: The modules whose public functions were built in a closure per backend.
MODULES = [accel, accel.runtime, accel.memory]

#: A ``**kwargs`` that is part of the documented signature (passed on to ``torch.compile``).
VARIADIC_BY_DESIGN = {"accel.compile": {"kwargs"}}

P = inspect.Parameter.POSITIONAL_ONLY
#: The exact signatures of the functions once built per backend: (name, kind, has a default) per parameter.
SIGNATURES = {
    "synchronize": [("device", P, True)],
    "device_count": [],
    "current_device_index": [],
    "set_device_index": [("device", P, False)],
    "current_stream": [("device", P, True)],
    "set_stream": [("stream", P, False)],
    **{name: [("device", P, True)] for name in (
        "allocated", "reserved", "max_allocated", "max_reserved", "reset_peak", "reset_accumulated",
        "get_memory_info", "stats", "telemetry")},
    "empty_cache": [],
    "empty_host_cache": [],
}


def _public_functions():
    for module in MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value):
                yield pytest.param(module, name, value, id=f"{module.__name__}.{name}")


def _top_level_defs(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("module, name, fn", list(_public_functions()))
def test_public_function_is_a_module_level_definition(module, name, fn):
    assert "<locals>" not in fn.__qualname__, fn.__qualname__
    assert fn.__qualname__ == fn.__name__ == name
    home = inspect.getmodule(fn)
    assert home is not None and getattr(home, name) is fn  # defined where it is found, once
    assert name in _top_level_defs(home), f"{home.__name__}.{name} is not a top-level def in its source"
    assert inspect.getdoc(fn), f"{module.__name__}.{name} has no docstring"


@pytest.mark.parametrize("module, name, fn", list(_public_functions()))
def test_public_function_has_a_real_signature(module, name, fn):
    sig = inspect.signature(fn)
    allowed = VARIADIC_BY_DESIGN.get(f"{module.__name__}.{name}", set())
    variadic = {p.name for p in sig.parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    assert variadic <= allowed, f"{name}{sig}: bare *args/**kwargs"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}{sig}: no return type"
    missing = [p.name for p in sig.parameters.values() if p.annotation is inspect.Parameter.empty]
    assert not missing, f"{name}{sig}: parameters without a type: {missing}"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_runtime_and_memory_signatures(name):
    fn = getattr(accel.memory if hasattr(accel.memory, name) and name in accel.memory.__all__ else accel.runtime, name)
    got = [(p.name, p.kind, p.default is not p.empty) for p in inspect.signature(fn).parameters.values()]
    assert got == SIGNATURES[name]
    if name in accel.__all__:
        assert getattr(accel, name) is fn


def test_the_same_functions_answer_for_each_backend_swapped_in():
    sync, count, alloc = accel.synchronize, accel.device_count, accel.memory.allocated
    with fake_backend("cpu"):
        assert count() == 1 and alloc() == 0 and sync() is None
    with fake_runtime("cuda", 2) as fake:
        assert count() == 2 and fake.initialized is False
        fake.counters[1]["allocated_bytes"]["current"] = 4096
        fake.initialized = True
        assert alloc(1) == 4096
        sync(1)  # not the current device (0): the sync by index
        sync()
        assert fake.calls[-2:] == [("synchronize_device", 1), ("synchronize", 0)]
    with fake_backend("cpu"):
        assert count() == 1 and alloc() == 0
    assert (accel.synchronize, accel.device_count, accel.memory.allocated) == (sync, count, alloc)


def test_no_module_getattr_builds_public_names():
    for module in MODULES:
        assert "__getattr__" not in vars(module), f"{module.__name__} still builds names at run time"


def test_types_are_visible_statically():
    # a checker reads the annotations as written; each names a real type
    hints = {name: inspect.signature(getattr(accel.runtime, name)).return_annotation
             for name in ("synchronize", "device_count", "current_stream")}
    assert hints == {"synchronize": "None", "device_count": "int", "current_stream": "torch.Stream"}
    assert isinstance(accel.current_stream(), torch.Stream)
