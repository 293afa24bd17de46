"""Helion kernels with explicit configs: never autotune at run time.

:func:`bind` wraps a kernel function with ``helion.kernel(config=helion.Config(**cfg))``
once per distinct config (cached), so each tuning-table config, or the op's
fixed default, compiles once and is reused; Helion's autotuner is never
entered in the user's process. Imports Helion (call it only from kernel modules).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import helion

__all__ = ["bind"]


@functools.cache
def _bind(fn: Callable, cfg_json: str, ignore: tuple) -> Any:
    cfg = helion.Config(**json.loads(cfg_json))
    return helion.kernel(fn, config=cfg, static_shapes=False, ignore_warnings=list(ignore))


_BOUND: dict[tuple[int, int, tuple], tuple[Mapping[str, Any], Any]] = {}


def bind(fn: Callable, cfg: Mapping[str, Any], ignore_warnings: tuple = ()) -> Any:
    """``fn`` as a Helion kernel with exactly the config ``cfg`` (``helion.Config`` keyword arguments).

    Per call this is one dict lookup by the identity of ``fn`` and ``cfg`` (the tuning
    table's and the ops' default configs are long-lived objects); a config seen for the
    first time is keyed by its JSON text, so equal configs share one compiled kernel.
    """
    key = (id(fn), id(cfg), ignore_warnings)
    hit = _BOUND.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    kernel = _bind(fn, json.dumps(dict(cfg), sort_keys=True), tuple(ignore_warnings))
    _BOUND[key] = (cfg, kernel)  # holds cfg: its id cannot be reused while the entry lives
    return kernel
