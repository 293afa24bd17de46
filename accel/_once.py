"""Warnings said once per process per key: the one helper behind accel's "said once" messages.

Each caller keeps its own set of keys already said (a module-level ``set``), so a test resets one
module's memory by clearing or replacing that set; :func:`accel.clear_cache` does not forget them (a
warning said once stays said, like Python's own ``"default"`` filter).

A leaf module: it imports nothing of accel, so every layer (``accel.kernels.core`` included) may use it.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Hashable

__all__ = ["warn_once"]

_LOCK = threading.Lock()  # held only to test-and-add a key, never while warning


def warn_once(said: set, key: Hashable, message: str | Warning, category: type[Warning] | None = None, *,
              stacklevel: int = 1) -> bool:
    """Warn ``message`` the first time ``key`` is met in ``said`` (which remembers it); returns whether it warned.

    Args:
        said: the caller's keys already said; ``key`` is added to it.
        key: what makes the warning the same one (the message itself where that is stable).
        message: the warning's text, or a :class:`Warning` instance (then ``category`` is ignored).
        category: the warning class for a text ``message`` (``None``: :class:`UserWarning`).
        stacklevel: as for :func:`warnings.warn`, counted from the caller of this function (``1``: the line
            that calls :func:`warn_once`).

    Returns:
        ``True`` when the warning was issued now, ``False`` when ``key`` had been said before.
    """
    with _LOCK:
        if key in said:
            return False
        said.add(key)
    warnings.warn(message, category, stacklevel=stacklevel + 1)
    return True
