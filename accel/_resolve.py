"""Implementations resolved once for the active backend, forgotten by :func:`accel.clear_cache`.

A module's public functions are plain module-level definitions (visible to editors and
static type checkers); each calls the implementation for the active backend
(:func:`accel.backend`) through a :class:`Resolved` namespace. The first attribute access
builds every implementation at once and stores them as the namespace's attributes, so
later look-ups are plain attribute hits: the function called is the resolved one itself
(torch's own function where it is exact).

.. note:: Changing ``ACCEL_DEVICE`` after the first use takes effect after
   :func:`accel.clear_cache` (which :func:`accel.testing.fake_backend` calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from accel import _probe

__all__ = ["Resolved", "forget"]

_ALL: list[Resolved] = []


class Resolved:
    """The implementations of ``names`` for the active backend, built by ``build()`` at first access.

    Args:
        module: the module the implementations serve (for messages).
        names: the names ``build`` returns.
        build: returns ``{name: callable}`` for every name, for the active backend.

    Example:
        >>> from accel._resolve import Resolved
        >>> impl = Resolved("demo", ["f"], lambda: {"f": len})
        >>> impl.f("abc")
        3
    """

    # The slots hold the namespace's own state; the instance dict holds only resolved implementations,
    # so forgetting them is ``__dict__.clear()`` and a resolved look-up is one instance-dict hit.
    __slots__ = ("_module", "_names", "_build", "__dict__")

    def __init__(self, module: str, names: Iterable[str], build: Callable[[], dict[str, Any]]) -> None:
        self._module = module
        self._names = frozenset(names)
        self._build = build
        _ALL.append(self)

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(f"{self._module}: no resolved implementation named {name!r}")
        table = self._build()
        vars(self).update({k: table[k] for k in self._names})
        return table[name]

    def forget(self) -> None:
        """Drop the resolved implementations; the next access resolves again for the then-active backend."""
        vars(self).clear()


def forget() -> None:
    """Drop every resolved implementation; the next access resolves again for the then-active backend."""
    for resolved in _ALL:
        resolved.forget()


_probe.on_clear(forget)
