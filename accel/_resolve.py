"""Public functions resolved once for the active backend, forgotten by :func:`accel.clear_cache`.

A module lists the names it resolves and a ``build()`` that returns them for the
backend :func:`accel.backend` selects. The first attribute access builds every name
at once and stores the results in the module's namespace, so later look-ups are
plain dictionary hits: the function a caller gets is the resolved one itself
(torch's own function where it is exact), with no dispatch layer in between.

.. note:: Changing ``ACCEL_DEVICE`` after the first use takes effect after
   :func:`accel.clear_cache` (which :func:`accel.testing.fake_backend` calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from accel import _probe

__all__ = ["lazy_exports", "forget"]

_EXPORTS: list[tuple[dict[str, Any], frozenset[str]]] = []


def lazy_exports(namespace: dict[str, Any], names: Iterable[str],
                 build: Callable[[], dict[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that resolves ``names`` with ``build()`` on first access.

    Args:
        namespace: the module's ``globals()``; resolved names are stored there.
        names: the names ``build`` returns.
        build: returns ``{name: object}`` for every name, for the active backend.

    Returns:
        The ``__getattr__`` function to assign in the module.
    """
    wanted = frozenset(names)
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in wanted:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        table = build()
        namespace.update({k: table[k] for k in wanted})
        return table[name]

    def __dir__() -> list[str]:
        return sorted(set(namespace) | wanted)

    namespace["__dir__"] = __dir__  # dir(accel.memory) lists the lazily resolved names too
    _EXPORTS.append((namespace, wanted))
    return __getattr__


def forget() -> None:
    """Drop every resolved name; the next access resolves again for the then-active backend."""
    for namespace, names in _EXPORTS:
        for name in names:
            namespace.pop(name, None)


_probe.on_clear(forget)
