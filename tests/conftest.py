"""Shared test setup: accel's own pytest plugin (hardware markers, fake_backend fixture)."""

import pytest

import accel

pytest_plugins = ["accel.testing.pytest_plugin"]


@pytest.fixture(autouse=True)
def _fresh_detection(monkeypatch):
    """Every test starts with ACCEL_DEVICE unset and accel's caches empty."""
    monkeypatch.delenv("ACCEL_DEVICE", raising=False)
    accel.clear_cache()
    yield
    accel.clear_cache()
