"""accel's pytest plugin in a downstream-style project (issue 25 item 5): a hardware skip is reported at the
skipped test's own file and line with the probe's reason, never at the plugin's; ``ACCEL_REQUIRE_BACKEND``
turns it into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from accel import _probe

pytestmark = pytest.mark.cpu

TESTS = textwrap.dedent('''
    import pytest


    def test_plain():
        pass


    @pytest.mark.{backend}
    def test_needs_it():
        pass


    class TestGroup:
        @pytest.mark.accelerator
        def test_needs_any(self):
            pass
''')


def _project(tmp_path, backend: str):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["accel.testing.pytest_plugin"]\n')
    (tmp_path / "test_downstream.py").write_text(TESTS.format(backend=backend))
    return tmp_path


def _pytest(path, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "PYTEST_"))}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-ra", "-q", "-p", "no:cacheprovider", str(path)],
                          cwd=path, env=environ, capture_output=True, text=True, timeout=300)


def test_a_hardware_skip_names_the_test_and_the_probe(tmp_path):
    missing = next((n for n, p in _probe.probes().items() if not p.available), None)
    if missing is None or any(p.available for n, p in _probe.probes().items() if n != "cpu"):
        pytest.skip("an accelerator is available here: nothing to skip")
    proc = _pytest(_project(tmp_path, missing))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2, out
    reason = _probe.probes()[missing].reason
    # each at its own test's line: the decorator of test_needs_it (line 9) and of test_needs_any (line 15)
    assert f"SKIPPED [1] test_downstream.py:9: {missing} unavailable: {reason}" in skipped, out
    assert any(line.startswith("SKIPPED [1] test_downstream.py:15: no accelerator: ") for line in skipped), out
    assert "pytest_plugin.py" not in out
    assert "1 passed, 2 skipped" in out

    required = _pytest(tmp_path, ACCEL_REQUIRE_BACKEND=missing)
    assert required.returncode == 1
    assert f"ACCEL_REQUIRE_BACKEND={missing}: {missing} unavailable: {reason}" in required.stdout, required.stdout
    assert "2 errors" in required.stdout and "skipped" not in required.stdout
