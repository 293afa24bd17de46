"""Checks for the options a user hands to accel: named choices and keyword sets, with the closest valid names.

Every public entry point that takes a name from a fixed set (a mode, a format, a granularity, an option
key) checks it here, where accel receives it and before any torch call, so the user gets one typed
accel error naming the bad value and the closest valid ones (``difflib``), never a torch message of
thousands of characters from deep inside the call.

A leaf module: it imports nothing of accel (the error class is passed in).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["check_choice", "check_keys", "closest", "did_you_mean"]


def closest(word: object, valid: Iterable[str], n: int = 3) -> list[str]:
    """The entries of ``valid`` closest to ``word`` (``difflib``; case-insensitive), best first; may be empty."""
    valid = [str(v) for v in valid]
    if not isinstance(word, str):
        return []
    lowered = {v.lower(): v for v in valid}
    found = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[f] for f in found]


def did_you_mean(word: object, valid: Iterable[str]) -> str:
    """``" Did you mean 'x' or 'y'?"`` for the closest valid names, or ``""`` when none is close."""
    found = closest(word, valid)
    if not found:
        return ""
    return " Did you mean " + " or ".join(repr(f) for f in found) + "?"


def _listed(valid: Iterable[str], limit: int = 40) -> str:
    valid = [str(v) for v in valid]
    shown = ", ".join(repr(v) for v in valid[:limit])
    return shown + (f", ... ({len(valid)} in all)" if len(valid) > limit else "")


def check_choice(value: object, valid: Iterable[str], *, what: str, error: type[Exception],
                 fix: str = "") -> str:
    """``value`` when it is one of ``valid`` (compared exactly), else raise ``error``.

    Args:
        value: what the user passed.
        valid: the accepted names.
        what: the message's start: the call and the argument (``"quantize: granularity"``).
        error: the accel error class to raise.
        fix: an extra sentence for the message's end.

    Raises:
        ``error``: ``value`` is not in ``valid``; the message names it, the closest valid names and all of them.
    """
    valid = list(valid)
    if isinstance(value, str) and value in valid:
        return value
    shown = f"{value!r}" if isinstance(value, str) else f"{value!r} ({type(value).__name__})"
    raise error(f"{what}={shown} is not one of the valid values.{did_you_mean(value, valid)} Valid: "
                f"{_listed(valid)}.{' ' + fix if fix else ''}")


def check_keys(given: Mapping[str, Any] | Iterable[str], valid: Iterable[str], *, what: str,
               error: type[Exception], fix: str = "") -> None:
    """Raise ``error`` naming every key of ``given`` that ``valid`` lacks, each with its closest valid keys.

    Args:
        given: a mapping (its keys are checked) or the keys themselves.
        valid: the accepted keys.
        what: what the keys are, for the message (``"accel.compile: options"``).
        error: the accel error class to raise.
        fix: an extra sentence for the message's end.
    """
    valid = list(valid)
    known = set(valid)
    bad = [k for k in given if k not in known]
    if not bad:
        return
    parts = []
    for k in bad:
        near = closest(k, valid)
        parts.append(f"{k!r}" + (f" (closest: {', '.join(repr(n) for n in near)})" if near else ""))
    raise error(f"{what}: unknown key(s) {', '.join(parts)}. Valid keys: {_listed(valid)}."
                f"{' ' + fix if fix else ''}")
