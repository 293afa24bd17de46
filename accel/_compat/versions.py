"""Installed versions of the optional DSL packages, read from package metadata, and whether each really
imports with the running torch.

Availability is a metadata question (:func:`module_version`: no import, fast, safe at ``import accel``).
Whether an installed DSL *works* with this torch is not: Helion 1.5.1 declares ``torch>=2.9`` yet fails to
import with torch 2.9.1 (``ImportError: cannot import name 'IntelGPUError'``). :func:`import_check` answers
that by importing the module in a fresh subprocess of this Python, never in the caller's process (a failed
import can leave half-initialised modules behind), and caches the answer on disk, keyed by everything the answer
depends on (:func:`import_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["IMPORT_TIMEOUT_S", "ImportCheck", "checked_version", "import_cache_dir", "import_check", "import_key",
           "module_version", "requirement_versions"]


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


#: Seconds one checking subprocess may take to import a DSL (Helion imports Inductor, several seconds on a
#: two-core machine; a timeout is reported as "unknown" and not cached).
IMPORT_TIMEOUT_S = 180.0

#: Version of the on-disk record :func:`import_check` writes; a record of another version is rewritten.
#: 2: the key holds the versions of the distributions the import depends on and the import path.
_IMPORT_FORMAT = 2

#: Distributions whose version is part of every import check's key, installed or not: torch, and each Triton a
#: DSL imports (Helion and CuTeDSL's torch integration import Triton without always declaring it).
_ALWAYS_KEYED = ("torch", "triton", "pytorch-triton-rocm", "pytorch-triton-xpu")

#: Run as ``python -c`` in the checking subprocess: the caller's ``sys.path``, then the import; one marked
#: JSON line on stdout says how it went (the module may print anything else).
_IMPORT_SCRIPT = """
import importlib, json, sys
sys.path[:] = json.loads(sys.argv[2])
try:
    importlib.import_module(sys.argv[1])
except BaseException as exc:
    res = {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()}
else:
    res = {"ok": True, "error": ""}
print("\\nACCEL-IMPORT-CHECK " + json.dumps(res), flush=True)
"""
_MARK = "ACCEL-IMPORT-CHECK "


@dataclass(frozen=True)
class ImportCheck:
    """Whether ``import <module>`` works in a fresh process of this Python with this torch.

    Attributes:
        module: the import name (``"helion"``, ``"cutlass"``).
        version: its distribution's installed version, one part of the cache key (``None``: no metadata).
        ok: ``True`` it imports, ``False`` it raised (or the process died), ``None`` undecided (the
            import did not finish within the timeout).
        error: ``""`` when ``ok``; else the exception as ``"<Type>: <message>"`` or how the process ended.
        cached: the answer came from the on-disk cache, not from a new subprocess.
    """

    module: str
    version: str | None
    ok: bool | None
    error: str
    cached: bool = False


def import_cache_dir() -> Path:
    """Where :func:`import_check` keeps its answers: ``<platformdirs user_cache_dir("accel")>/dsl-imports``
    (the user cache accel's tuning tables use too)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("accel")) / "dsl-imports"


def requirement_versions(dist: str) -> dict[str, str | None]:
    """``{name: installed version or None}`` of the distributions ``dist`` requires (its metadata's
    ``Requires-Dist`` whose markers hold here, extras left out) and of those every import depends on
    (torch and Triton), names normalised as in PEP 503. Metadata only: nothing is imported.

    Example:
        >>> from accel._compat import versions
        >>> versions.requirement_versions("accel-not-installed")["torch"] is not None
        True
    """
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    names = {canonicalize_name(n) for n in _ALWAYS_KEYED}
    try:
        declared = requires(dist) or []
    except PackageNotFoundError:
        declared = []
    for line in declared:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # a malformed line in someone's metadata: its version cannot be keyed, the rest still is
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.add(canonicalize_name(req.name))
    return {name: module_version(name) for name in sorted(names)}


def import_key(module: str, version: str | None, dist: str | None = None) -> list[Any]:
    """Everything :func:`import_check`'s answer for ``module`` depends on, as a JSON-ready list:
    ``[python executable, torch version, module, version, {distribution: version}, import path]``.

    The distributions are those :func:`requirement_versions` lists for ``dist`` (default ``module``): an
    upgrade of any of them (``pip install -U triton``) asks again. The import path is this process's
    ``sys.path`` with each entry made absolute (``""`` is the working directory): the checking subprocess
    imports from exactly that path (so ``PYTHONPATH``, a virtual environment's site-packages and the working
    directory are in it), and a module found elsewhere is another answer.
    """
    import torch

    path = [os.path.abspath(p) if isinstance(p, str) else repr(p) for p in sys.path]
    return [sys.executable, torch.__version__, module, version, requirement_versions(dist or module), path]


def _read_record(path: Path, key: list[Any]) -> dict[str, Any] | None:
    """The cached answer at ``path`` for ``key``; ``None`` when absent, unreadable, corrupt or for another key
    (a hash collision or a record of an older format), so that the caller checks again and rewrites it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("format") != _IMPORT_FORMAT or data.get("key") != key
            or not isinstance(data.get("ok"), bool) or not isinstance(data.get("error"), str)):
        return None
    return data


def _write_record(path: Path, key: list[Any], ok: bool, error: str) -> None:
    """Write the answer atomically (a concurrent reader sees the old record or the new one, never half)."""
    text = json.dumps({"format": _IMPORT_FORMAT, "key": key, "ok": ok, "error": error}, indent=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        # The cache only saves time: a read-only or full cache directory means checking again next time.
        return


def import_check(module: str, version: str | None, *, dist: str | None = None, timeout: float = IMPORT_TIMEOUT_S,
                 cache_dir: Path | None = None) -> ImportCheck:
    """Whether ``import <module>`` works with the running torch, decided in a fresh subprocess.

    The subprocess is ``sys.executable`` with this process's ``sys.path`` and environment, so it imports
    what this process would. Answers are cached on disk, keyed by :func:`import_key`: the Python
    executable, torch's version, the module and ``version``, the versions of the distributions ``dist``
    requires and of Triton, and the import path. Installing another version of any of them, or importing
    from another path, asks again. One record per (Python executable, module) is kept, the latest key's.
    A corrupt cache record is ignored and rewritten; an import that timed out is not cached.

    Args:
        module: import name, e.g. ``"helion"``.
        version: the module's installed distribution version (from :func:`module_version`), the part of
            the cache key that changes when the package is upgraded.
        dist: the module's distribution, whose requirements are keyed (``"nvidia-cutlass-dsl"`` for
            ``cutlass``; default ``module``).
        timeout: seconds the subprocess may take.
        cache_dir: where the answers live (default :func:`import_cache_dir`).

    Returns:
        An :class:`ImportCheck`.

    .. note:: Side effects: may start a subprocess that imports ``module`` (and torch), for up to
       ``timeout`` seconds; writes one small JSON file under ``cache_dir``. Nothing is imported here.
    """
    key = import_key(module, version, dist)
    # one file per (executable, module), holding the latest key: a changed key rewrites it, never adds files
    digest = hashlib.sha256(json.dumps([key[0], key[2]]).encode()).hexdigest()[:24]
    path = (cache_dir if cache_dir is not None else import_cache_dir()) / f"{module}-{digest}.json"
    hit = _read_record(path, key)
    if hit is not None:
        return ImportCheck(module, version, hit["ok"], hit["error"], cached=True)
    try:
        proc = subprocess.run([sys.executable, "-c", _IMPORT_SCRIPT, module, json.dumps(sys.path)],
                              check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ImportCheck(module, version, None, f"import {module} did not finish within {timeout:g} s")
    except OSError as exc:
        return ImportCheck(module, version, None, f"could not start {sys.executable}: {exc}")
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        # Killed or crashed before reporting (a signal, out of memory): not cached, it may not happen again.
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return ImportCheck(module, version, False, f"the process importing {module} exited with code "
                                                   f"{proc.returncode}: {tail}")
    res = json.loads(line[len(_MARK):])
    ok, error = bool(res["ok"]), str(res["error"])
    _write_record(path, key, ok, error)
    return ImportCheck(module, version, ok, error)
