"""Packages are found, not listed: every folder with an ``__init__.py`` under the three source roots.

``backends/`` and ``kernels/`` install as ``accel.backends`` and ``accel.kernels`` (``package-dir`` in
pyproject.toml), so a new op folder under ``kernels/ops/`` ships without an edit here.
"""

from setuptools import find_packages, setup

ROOTS = {"accel": "accel", "accel.backends": "backends", "accel.kernels": "kernels"}

setup(packages=[pkg for name, root in ROOTS.items() for pkg in (name, *(f"{name}.{p}" for p in find_packages(root)))])
