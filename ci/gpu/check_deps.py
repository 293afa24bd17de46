"""Exit 1, naming them, when a requirement accel declares (not an extra) is not installed here.

The GPU machine installs accel with ``pip --no-deps`` (it has no network), so a dependency its image lacks
(platformdirs) must be carried as a wheel; without it every kernel's cond raised and nothing routed.
Usage: ``python3 ci/gpu/check_deps.py`` after accel is installed (on ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib.metadata as md
import sys

from packaging.requirements import Requirement


def missing(dist: str = "accel-portability") -> list[str]:
    """Requirements of ``dist`` outside any extra whose distribution is not installed."""
    out = []
    for text in md.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            md.version(req.name)
        except md.PackageNotFoundError:
            out.append(str(req))
    return out


if __name__ == "__main__":
    lacking = missing()
    if lacking:
        print(f"accel's dependencies missing here: {', '.join(lacking)}. Carry their wheels in .whl "
              f"(python3 -m pip download --no-deps ... -d .whl NAME).")
        sys.exit(1)
    print("accel's dependencies: all installed")
