"""The registry's process-wide state: locks, the verify switch, the path mode and the disable filters."""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["LOCK", "MEMO_LOCK", "PATHS", "REGISTRY_ENV", "STATE", "State", "UNSET", "VERIFY_ENV", "filters_in_force"]

#: Environment variable: ``1`` runs ATen beside every routed call and records the max error.
VERIFY_ENV = "ACCEL_KERNELS_VERIFY"
#: Environment variable: ``auto`` (default), ``native`` or ``accel``: which registration path to use.
REGISTRY_ENV = "ACCEL_KERNELS_REGISTRY"
PATHS = ("auto", "native", "accel")

#: Held by every change of what is installed (register, unregister, the filters, the path mode).
LOCK = threading.RLock()
MEMO_LOCK = threading.Lock()  # only on memo misses and table changes, never on a memo hit
#: "No argument given" where ``None`` is a meaningful value.
UNSET = object()


class State:
    """Settings and filters shared by every override (one instance: :data:`STATE`)."""

    verify: bool = os.environ.get(VERIFY_ENV, "").strip() == "1"
    path_mode: str | None = None  # None: read REGISTRY_ENV at first use
    disabled_all: bool = False
    disabled: dict[str, set[str]] = {"op": set(), "dsl": set(), "backend": set(), "name": set()}
    #: Filters held by active ``disabled`` blocks, counted: ``(kind, value)`` or ``("all", None)`` ->
    #: number of blocks holding it (kept apart from ``disable``'s, which a block never undoes).
    held: dict[tuple[str, Any], int] = {}
    #: ``(forward op, key)`` pairs already warned about as unable to train (:mod:`.autograd`).
    orphans: set[tuple[str, str]] = set()
    #: What the registry has already warned about once (an unrecognised native registry, a slot joining upstream's graph).
    said: set = set()


STATE = State()


def filters_in_force() -> tuple[bool, dict[str, set[str]]]:
    """``(all disabled, filters by kind)``: ``disable``'s plus those held by active ``disabled`` blocks."""
    held = STATE.held
    kinds = {kind: values | {v for (k, v), n in held.items() if k == kind and n > 0}
             for kind, values in STATE.disabled.items()}
    return STATE.disabled_all or held.get(("all", None), 0) > 0, kinds
