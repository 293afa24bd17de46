"""The one registry of accel's caches: what :func:`accel.clear_cache` forgets, and what it keeps and why.

Every memoised answer in accel (``accel``, ``accel.backends``, ``accel.kernels``) is declared here, at
the place that caches it:

- :func:`detection_cache`: ``functools.cache`` whose answer is a fact of this machine, environment or
  torch build (a device's arch, an environment variable, a package being installed, what the running
  torch has). :func:`accel.clear_cache` clears it, so a changed ``CUDA_VISIBLE_DEVICES`` or a fake
  vendor (:mod:`accel.testing`) is seen.
- :func:`kept_cache`: ``functools.cache`` that is not a detection cache (compiled kernels, pure
  functions of their arguments), with the reason it survives :func:`accel.clear_cache`.
- :func:`register`: a cache made elsewhere (another module's ``functools.cache``), with a custom clear
  function or a reason to keep it.
- :func:`on_clear`: any other memo (a dict, a resolved table) as a function that forgets it.
- :func:`declare_package`: every ``functools`` cache of a package's modules is a detection cache (``accel._compat``:
  facts of the running torch), also in modules imported later.

``tests/test_caches.py`` finds every ``functools.cache`` / ``lru_cache`` in the package's source and
checks that each is declared here, and that :func:`accel.clear_cache` empties every detection cache.

A leaf module: it imports nothing of accel, so every layer (``accel._compat`` included) may use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CacheEntry", "clear_detection_caches", "declare_package", "detection_cache", "entries", "kept_cache",
           "on_clear", "register"]


@dataclass(frozen=True)
class CacheEntry:
    """One registered cache.

    Attributes:
        name: ``module.qualname`` of the cached function (or of the hook).
        cache: the ``functools`` cache wrapper (``None`` for an :func:`on_clear` hook).
        clear: what :func:`clear_detection_caches` calls (``None``: kept, see ``reason``).
        reason: why a kept cache is not a detection cache (``None`` for detection caches).
    """

    name: str
    cache: Any
    clear: Callable[[], None] | None
    reason: str | None


_ENTRIES: dict[str, CacheEntry] = {}
_HOOKS: list[Callable[[], None]] = []
_PACKAGES: list[str] = []


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def register(cache: Any, *, clear: Callable[[], None] | None = None, reason: str | None = None) -> Any:
    """Declare an existing ``functools`` cache; returns it.

    Args:
        cache: a ``functools.cache`` / ``lru_cache`` wrapper.
        clear: what forgets it (default ``cache.cache_clear``); ignored when ``reason`` is given.
        reason: give one to keep the cache across :func:`accel.clear_cache` (it is no detection cache).

    Raises:
        TypeError: ``cache`` is not a ``functools`` cache and no ``clear`` was given, or neither
            ``clear`` nor ``reason`` can apply (a programming error in accel itself).
    """
    if reason is None and clear is None:
        clear = getattr(cache, "cache_clear", None)
        if clear is None:
            raise TypeError(f"accel._caches.register: {cache!r} has no cache_clear; pass clear=")
    _ENTRIES[_name(cache)] = CacheEntry(_name(cache), cache, None if reason is not None else clear, reason)
    return cache


def detection_cache(fn: Callable) -> Callable:
    """``functools.cache(fn)``, cleared by :func:`accel.clear_cache` (its answer is a detected fact)."""
    return register(functools.cache(fn))


def kept_cache(reason: str) -> Callable[[Callable], Callable]:
    """Decorator: ``functools.cache`` that :func:`accel.clear_cache` keeps, for ``reason`` (why it is no
    detection cache: what its answer depends on)."""
    if not isinstance(reason, str) or not reason.strip():
        raise TypeError("accel._caches.kept_cache: give the reason the cache is kept")

    def wrap(fn: Callable) -> Callable:
        return register(functools.cache(fn), reason=reason)

    return wrap


def on_clear(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` on every :func:`accel.clear_cache` (a memo that is not a ``functools`` cache); returns it."""
    _HOOKS.append(hook)
    name = _name(hook)
    if name in _ENTRIES:  # two hooks of one kind (``dict.clear`` of two dicts): both are kept
        name = f"{name}#{len(_HOOKS)}"
    _ENTRIES[name] = CacheEntry(name, None, hook, None)
    return hook


def declare_package(package: str) -> None:
    """Every ``functools`` cache defined in a module of ``package`` (``"accel._compat"``) that is not declared
    otherwise is a detection cache: found in the modules imported so far, and again at each :func:`entries`
    and :func:`clear_detection_caches`, so a module imported later is covered too."""
    if package not in _PACKAGES:
        _PACKAGES.append(package)
    _scan()


def _scan() -> None:
    import sys

    for name, module in list(sys.modules.items()):
        if module is None or not any(name == p or name.startswith(p + ".") for p in _PACKAGES):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name \
                    and _name(value) not in _ENTRIES:
                register(value)


def entries() -> dict[str, CacheEntry]:
    """Every registered cache and hook, by name."""
    _scan()
    return dict(_ENTRIES)


def clear_detection_caches() -> None:
    """Clear every detection cache and run every :func:`on_clear` hook, in registration order."""
    _scan()
    for entry in list(_ENTRIES.values()):
        if entry.cache is not None and entry.clear is not None:
            entry.clear()
    for hook in list(_HOOKS):
        hook()
