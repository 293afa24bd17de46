"""Issue 24 item 2: ``accel.clear_cache()`` clears every detection cache, the kernels' per-device arch
cache included, and every ``functools.cache`` / ``lru_cache`` in the package is declared in the one
registry (:mod:`accel._caches`): as a detection cache that ``clear_cache()`` reaches, or as kept, with
the reason it is no detection cache.

Before: ``accel.kernels.dsl.launch.arch`` was a bare ``functools.cache``; after a faked CUDA sm_90, a
faked MI100 still reported ``sm_90`` to the kernel conds, and the sm_90+ CuTeDSL gate accepted an AMD card.

The sources are read with ``ast`` (some modules import Triton or CuTeDSL, which may be missing here);
every module that imports is also checked on the live objects.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os

import pytest
import torch

import accel
from accel import _caches
from accel.testing import fake_backend

#: decorator spellings that make a functools cache
_FUNCTOOLS = {"cache", "lru_cache"}
_REGISTRY = {"detection_cache", "kept_cache"}


def _roots() -> list[tuple[str, str]]:
    import accel.backends
    import accel.kernels

    return [(pkg.__name__, os.path.abspath(p)) for pkg in (accel, accel.kernels, accel.backends) for p in pkg.__path__]


def _modules() -> dict[str, str]:
    """Module name -> file, for every .py under the three package roots (a subpackage root is not walked twice)."""
    roots = _roots()
    folders = {folder for _, folder in roots}
    found: dict[str, str] = {}
    for package, folder in roots:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in folders and d != "__pycache__"]
            rel = os.path.relpath(dirpath, folder)
            prefix = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
            for f in filenames:
                if f.endswith(".py"):
                    name = prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"
                    found[name] = os.path.join(dirpath, f)
    return found


def _decorator_kind(dec: ast.expr) -> str | None:
    """``"functools"``, ``"registry"`` or ``None`` for one decorator expression."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
    if name in _FUNCTOOLS:
        return "functools"
    if name in _REGISTRY:
        return "registry"
    return None


def _caches_in_source() -> list[tuple[str, str, str]]:
    """``(module, qualname, "functools" | "registry")`` of every cached function in the package's source."""
    out = []
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)

        def walk(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for dec in child.decorator_list:
                        kind = _decorator_kind(dec)
                        if kind:
                            out.append((module, prefix + child.name, kind))
                    walk(child, f"{prefix}{child.name}.<locals>.")
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.Assign) and isinstance(child.value, ast.Call):
                    kind = _decorator_kind(child.value)  # x = functools.cache(f)
                    if kind and isinstance(child.targets[0], ast.Name):
                        out.append((module, prefix + child.targets[0].id, kind))

        walk(tree, "")
    return out


def _importable(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:  # a DSL (cutlass, helion) that is not installed here
        return None


def test_the_source_scan_finds_caches():
    found = {(m, q) for m, q, _ in _caches_in_source()}
    assert ("accel.kernels.dsl.launch", "arch") in found  # the cache of issue 24
    assert ("accel.kernels.tuning.table", "table") in found
    assert len(found) >= 15


def test_every_functools_cache_is_declared_in_the_registry():
    undeclared = []
    for module, qualname, kind in _caches_in_source():
        if module == "accel._caches":
            continue  # the registry's own decorators
        if "<locals>" in qualname:
            continue  # made inside a function: it lives as long as what holds it, not for the process
        mod = _importable(module)
        if mod is None:
            if kind != "registry":
                undeclared.append(f"{module}.{qualname}: a bare functools cache in a module that does not import "
                                  "here; declare it with accel._caches.detection_cache or kept_cache(reason)")
            continue
        if f"{module}.{qualname}" not in _caches.entries():
            undeclared.append(f"{module}.{qualname}: not in accel._caches (decorate it with detection_cache, or "
                              "kept_cache('why it is no detection cache'), or register it)")
    assert not undeclared, "\n".join(undeclared)


def test_every_registered_cache_exists_and_kept_ones_say_why():
    for name, entry in _caches.entries().items():
        if entry.cache is None:
            continue  # an on_clear hook (a dict memo)
        module, _, qualname = name.rpartition(".")
        assert callable(getattr(entry.cache, "cache_clear", None)), name
        if entry.clear is None:
            assert entry.reason and len(entry.reason) > 15, f"{name}: a kept cache needs its reason"


#: arguments that fill a detection cache, by cached function (the rest take no argument)
_ARGS = {"accel.kernels.dsl.launch.arch": (torch.device("cpu"),),
         "accel.kernels.dsl.launch.sm_count": (torch.device("cpu"),),
         "accel.kernels.tuning.table.table": ("sm_90",)}


def _import_every_cached_module() -> None:
    for module, _, _ in _caches_in_source():
        _importable(module)


def test_clear_cache_empties_every_detection_cache():
    _import_every_cached_module()
    filled = []
    for name, entry in _caches.entries().items():
        if entry.cache is None or entry.clear is None or not hasattr(entry.cache, "cache_info"):
            continue  # a hook, a kept cache, or a function that only forwards cache_clear to its cache
        args = _ARGS.get(name)
        if args is None:
            params = inspect.signature(entry.cache).parameters.values()
            if any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
                continue  # needs arguments this test does not know; currsize is still checked below
            args = ()
        try:
            entry.cache(*args)
        except Exception:  # noqa: BLE001 - a probe that cannot answer here leaves nothing cached; checked below
            continue
        if entry.cache.cache_info().currsize:
            filled.append(name)
    must = {"accel.kernels.dsl.launch.arch", "accel.kernels.dsl.launch.sm_count", "accel.kernels.tuning.table.table",
            "accel.kernels.dsl.triton_utils.fast_launch_supported", "accel._compat.rng.has_accelerator_random",
            "accel._compat.graphs.has_accelerator_graph"}
    assert must <= set(filled), must - set(filled)
    accel.clear_cache()
    left = {name: e.cache.cache_info().currsize for name, e in _caches.entries().items()
            if e.cache is not None and e.clear is not None and hasattr(e.cache, "cache_info")
            and e.cache.cache_info().currsize}
    assert left == {}, f"clear_cache() left these detection caches filled: {left}"


def test_kept_caches_survive_clear_cache():
    from accel.kernels.dsl import helion_utils

    kept = _caches.entries()["accel.kernels.dsl.helion_utils._bind"]
    assert kept.clear is None and "compiled" in kept.reason
    assert helion_utils._bind is kept.cache


def test_kernels_arch_follows_the_faked_vendor():
    """The issue's case: sm_90, then an MI100 (gfx908): the kernels' arch and the CuTeDSL gate follow."""
    from accel.kernels.dsl import cutedsl_utils, launch

    dev = torch.device("cuda", 0)
    with fake_backend("cuda", arch="sm_90"):
        assert launch.arch(dev) == "sm_90"
        assert cutedsl_utils.arch_reason(dev) is None
    with fake_backend("rocm", arch="gfx908:sramecc+:xnack-"):
        assert launch.arch(dev) == "gfx908"
        assert "need an NVIDIA GPU of sm_90+" in cutedsl_utils.arch_reason(dev)
    with fake_backend("cuda", arch="sm_100"):
        assert launch.arch(dev) == "sm_100"


def test_clear_cache_drops_the_overrides_memoised_answers():
    """Cond answers memoised per signature are dropped too (the tuning tables' generation moves)."""
    from accel.kernels.tuning import table

    before = table.GENERATION
    accel.clear_cache()
    assert table.GENERATION > before


@pytest.mark.parametrize("name", ["accel._compat.native.has_native_dsl_registry",
                                  "accel._compat.native.native_dsl_registry"])
def test_the_native_registry_facts_are_detection_caches(name):
    entry = _caches.entries()[name]
    assert entry.clear is not None
