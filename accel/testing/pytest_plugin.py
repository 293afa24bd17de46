"""pytest plugin: hardware markers decided at run time, with the probe's reason.

Use it with ``pytest_plugins = ["accel.testing.pytest_plugin"]`` in a ``conftest.py``.

Markers ``cuda``, ``rocm``, ``xpu``, ``mps`` and ``accelerator`` skip a test when the
probe says the backend is unavailable, naming the probe's reason; the skip is attached to the
test at collection (a ``skip`` marker), so the summary shows the test's own file and line.
``ACCEL_REQUIRE_BACKEND=<name>`` turns such a skip into a failure on a vendor runner
(so a broken driver cannot pass as "skipped"). Fixture ``fake_backend`` is
:func:`accel.testing.fake_backend`.

Tests of a DSL runtime (Triton, Helion, CuTeDSL) call :func:`require_dsl` or
:func:`importorskip_dsl`: ``pytest.importorskip`` skips only a *missing* module, while
a DSL that is installed but does not import with the running torch (Helion 1.5.1 with
torch 2.9.1 raises ``ImportError: cannot import name 'IntelGPUError'``) would fail the
test, or the whole module's collection. The import is tried in a subprocess
(:func:`accel.diagnostics.dsl_imports`, cached on disk), never in the test process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

__all__ = ["HARDWARE_MARKERS", "dsl_skip_reason", "importorskip_dsl", "require_dsl"]

HARDWARE_MARKERS = ("cuda", "rocm", "xpu", "mps", "accelerator")


def pytest_configure(config: pytest.Config) -> None:
    for name in ("cpu", *HARDWARE_MARKERS):
        config.addinivalue_line("markers", f"{name}: accel backend marker (skipped at run time when unavailable)")


def _missing(marker: str) -> str | None:
    from accel._probe import probes

    found = probes()
    if marker == "accelerator":
        if any(p.available for n, p in found.items() if n != "cpu"):
            return None
        return "no accelerator: " + "; ".join(f"{n}: {p.reason}" for n, p in found.items() if n != "cpu")
    p = found.get(marker)
    if p is None or not p.available:
        return f"{marker} unavailable: {p.reason if p else 'backend not registered'}"
    return None


def _required(required: str, marker: str) -> bool:
    """Whether ``ACCEL_REQUIRE_BACKEND=required`` turns a skip of ``marker`` into a failure."""
    return bool(required) and (required == marker or marker == "accelerator" and required != "cpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Attach each hardware skip to its test: a ``skip`` marker with the probe's reason, added at collection, so
    pytest reports the skip at the test's own location (``tests/test_x.py:12``), not at this plugin's line.
    Tests of a backend ``ACCEL_REQUIRE_BACKEND`` names get no marker: they fail in :func:`pytest_runtest_setup`."""
    required = os.environ.get("ACCEL_REQUIRE_BACKEND", "").strip()
    reasons: dict[str, str | None] = {}
    for item in items:
        for marker in HARDWARE_MARKERS:
            if item.get_closest_marker(marker) is None or _required(required, marker):
                continue
            if marker not in reasons:
                reasons[marker] = _missing(marker)
            if reasons[marker] is not None:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))
                break


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test of the backend ``ACCEL_REQUIRE_BACKEND`` names when its probe says it is unavailable (a broken
    driver cannot pass as "skipped"); skip one whose backend became unavailable after collection."""
    required = os.environ.get("ACCEL_REQUIRE_BACKEND", "").strip()
    for marker in HARDWARE_MARKERS:
        if item.get_closest_marker(marker) is None:
            continue
        why = _missing(marker)
        if why is None:
            continue
        if _required(required, marker):
            pytest.fail(f"ACCEL_REQUIRE_BACKEND={required}: {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture
def fake_backend():
    """:func:`accel.testing.fake_backend` as a fixture (a context-manager factory)."""
    from accel.testing import fake_backend as _fake

    return _fake


def dsl_skip_reason(dsl: str) -> str | None:
    """Why tests of DSL runtime ``dsl`` cannot run here, or ``None`` when it imports with this torch.

    Args:
        dsl: ``"triton"``, ``"helion"`` or ``"cutedsl"`` (keys of :data:`accel.diagnostics.DSL_MODULES`).

    Returns:
        ``"<dist> is not installed ..."``, ``"<dist> <version> is installed but does not import with torch
        <version>: <Type>: <message>"``, or ``None`` (it imports, or the import check did not finish in
        time: then the test runs and shows what happens).

    .. note:: May start a subprocess that imports the DSL (once per Python, import path and versions
       of torch, the DSL, its requirements and Triton: the answer is cached on disk).
    """
    import torch

    from accel import diagnostics

    module, dist = diagnostics.DSL_MODULES[dsl], diagnostics.DSL_DISTRIBUTIONS[dsl]
    if importlib.util.find_spec(module) is None:
        return f"{dist} is not installed (import {module} finds no module)"
    version = diagnostics.dsl_versions()[dsl]
    check = diagnostics.dsl_imports(dsl, version)
    if check.ok is False:
        return f"{dist} {version} is installed but does not import with torch {torch.__version__}: {check.error}"
    return None


def require_dsl(dsl: str) -> None:
    """Skip the calling test (or, called at module level, the whole module) unless ``dsl`` imports here.

    The skip names the reason (:func:`dsl_skip_reason`). Raises ``pytest.skip.Exception``.
    """
    why = dsl_skip_reason(dsl)
    if why is not None:
        pytest.skip(why, allow_module_level=True)


def importorskip_dsl(dsl: str) -> ModuleType:
    """``pytest.importorskip`` for a DSL runtime: its module, or a skip saying why it cannot be imported.

    Unlike ``pytest.importorskip``, an installed DSL that raises on import with this torch is a skip
    with its error (decided in a subprocess first), not a failure of the test module.
    """
    require_dsl(dsl)
    from accel import diagnostics

    return importlib.import_module(diagnostics.DSL_MODULES[dsl])
