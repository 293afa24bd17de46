"""Installed versions of the optional DSL packages, read from package metadata."""

from __future__ import annotations

from typing import Any

__all__ = ["checked_version", "module_version"]


def module_version(dist_or_module: str) -> str | None:
    """Installed version of a distribution (``"triton"``, ``"helion"``), or ``None``.

    Reads package metadata only: never imports the module (importing Triton or
    Helion is slow and may initialise a device).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist_or_module)
    except PackageNotFoundError:
        return None


def checked_version(dist: str, raw: str | None, minimum: Any, hint: str = "") -> tuple[bool, str]:
    """Whether ``raw`` (the installed version of ``dist``, from :func:`module_version`; ``None`` reads as ``"0"``)
    is at least ``minimum`` (a ``packaging`` ``Version``: the oldest version accel's kernels are checked with),
    and the sentence saying so; ``hint`` follows the too-old sentence (e.g. ``"; pip install -U ..."``)."""
    from packaging.version import InvalidVersion, Version

    raw = raw or "0"
    try:
        ver = Version(raw)
    except InvalidVersion:
        return False, f"{dist} version {raw!r} is not a version number"
    if ver < minimum:
        return False, f"{dist} {ver} < {minimum} (oldest version the kernels are checked with{hint})"
    return True, f"{dist} {ver} installed"
