"""pytest plugin: hardware markers decided at run time, with the probe's reason.

Use it with ``pytest_plugins = ["accel.testing.pytest_plugin"]`` in a ``conftest.py``.

Markers ``cuda``, ``rocm``, ``xpu``, ``mps`` and ``accelerator`` skip a test when the
probe says the backend is unavailable, naming the probe's reason.
``ACCEL_REQUIRE_BACKEND=<name>`` turns such a skip into a failure on a vendor runner
(so a broken driver cannot pass as "skipped"). Fixture ``fake_backend`` is
:func:`accel.testing.fake_backend`.
"""

from __future__ import annotations

import os

import pytest

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


def pytest_runtest_setup(item: pytest.Item) -> None:
    required = os.environ.get("ACCEL_REQUIRE_BACKEND", "").strip()
    for marker in HARDWARE_MARKERS:
        if item.get_closest_marker(marker) is None:
            continue
        why = _missing(marker)
        if why is None:
            continue
        if required and (required == marker or marker == "accelerator" and required != "cpu"):
            pytest.fail(f"ACCEL_REQUIRE_BACKEND={required}: {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture
def fake_backend():
    """:func:`accel.testing.fake_backend` as a fixture (a context-manager factory)."""
    from accel.testing import fake_backend as _fake

    return _fake
