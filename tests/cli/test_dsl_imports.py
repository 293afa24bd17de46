"""DSL compatibility is a real import with this torch, in a subprocess, cached on disk per (Python, torch
version, DSL, DSL version, the versions of the distributions it requires and of Triton, the import path):
``accel info`` / ``doctor`` say "installed, does not import with torch ...".

The DSLs here are fake packages (a module and its ``.dist-info``) on a temporary ``sys.path`` entry: one
raises on import the way Helion 1.5.1 does with torch 2.9.1, one imports.
"""

import json
import textwrap

import pytest
import torch

from accel import _compat, diagnostics
from accel._compat import versions
from accel.cli import main
from accel.testing import pytest_plugin

pytestmark = pytest.mark.cpu

#: What Helion 1.5.1 does at import with torch 2.9.1 (a name torch 2.9 does not have).
BROKEN = "from torch._inductor.exc import IntelGPUError  # torch 2.9 has no such class\n"
FINE = "import torch\nVALUE = 42\n"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary ``sys.path`` entry for fake DSL packages, and an empty import-check cache."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    cache = tmp_path / "cache"
    monkeypatch.setattr(versions, "import_cache_dir", lambda: cache)

    def install(name: str, version: str, body: str, requires: tuple[str, ...] = ()) -> None:
        pkg = root / name
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text(body)
        for old in root.glob(f"{name}-*.dist-info"):
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                       + "".join(f"Requires-Dist: {r}\n" for r in requires))

    install.root, install.cache = root, cache
    return install


def _spawns(monkeypatch):
    """Count the subprocesses import_check starts."""
    calls = []
    real = versions.subprocess.run

    def run(*args, **kwargs):
        calls.append(args[0][3])  # the module name
        return real(*args, **kwargs)

    monkeypatch.setattr(versions.subprocess, "run", run)
    return calls


def test_a_dsl_that_raises_on_import_is_reported_with_its_error(site):
    site("accelfake_broken", "1.5.1", BROKEN)
    check = _compat.import_check("accelfake_broken", "1.5.1")
    assert check.ok is False and not check.cached
    assert check.error.startswith("ImportError: cannot import name 'IntelGPUError' from 'torch._inductor.exc'"), check
    # the caller's process never imported it
    import sys

    assert "accelfake_broken" not in sys.modules


def test_a_dsl_that_imports_is_compatible(site):
    site("accelfake_fine", "2.0.0", FINE)
    check = _compat.import_check("accelfake_fine", "2.0.0")
    assert (check.ok, check.error, check.cached) == (True, "", False)


def test_the_answer_is_cached_and_keyed_by_the_dsl_version(site, monkeypatch):
    calls = _spawns(monkeypatch)
    site("accelfake_cached", "1.0.0", FINE)
    assert _compat.import_check("accelfake_cached", "1.0.0").ok is True
    # same version, now broken on disk: the cached answer stands and no process is started
    site("accelfake_cached", "1.0.0", BROKEN)
    again = _compat.import_check("accelfake_cached", "1.0.0")
    assert (again.ok, again.cached) == (True, True) and calls == ["accelfake_cached"]
    # another version is another key: checked afresh
    site("accelfake_cached", "1.0.1", BROKEN)
    newer = _compat.import_check("accelfake_cached", _compat.module_version("accelfake_cached"))
    assert (newer.version, newer.ok, newer.cached) == ("1.0.1", False, False)
    assert calls == ["accelfake_cached", "accelfake_cached"]
    # the key also holds this Python and this torch
    record = json.loads(next(site.cache.glob("accelfake_cached-*.json")).read_text())
    assert record["key"][:3] == [__import__("sys").executable, torch.__version__, "accelfake_cached"]


#: A DSL that imports its dependency (as Helion imports Triton): whether it imports is the dependency's doing.
USES_DEP = "import accelfake_dep\n"


def test_an_upgraded_requirement_asks_again(site, monkeypatch):
    """``pip install -U <a requirement>`` that fixes (or breaks) the import: the DSL's own version is unchanged,
    the verdict is not kept."""
    calls = _spawns(monkeypatch)
    site("accelfake_dsl", "1.0", USES_DEP, requires=("accelfake_dep>=1", "accelfake_absent; extra == 'docs'"))
    site("accelfake_dep", "1.0", BROKEN)
    before = _compat.import_check("accelfake_dsl", "1.0")
    assert (before.ok, before.cached) == (False, False) and "IntelGPUError" in before.error
    assert _compat.import_check("accelfake_dsl", "1.0").cached  # nothing changed: the cache answers
    site("accelfake_dep", "1.1", FINE)  # the upgrade that fixes it
    after = _compat.import_check("accelfake_dsl", "1.0")
    assert (after.ok, after.error, after.cached) == (True, "", False) and len(calls) == 2
    record = json.loads(next(site.cache.glob("accelfake_dsl-*.json")).read_text())
    assert record["key"][4]["accelfake-dep"] == "1.1"
    assert "accelfake-absent" not in record["key"][4]  # an extra's requirement is not the import's
    assert _compat.import_check("accelfake_dsl", "1.0").cached


def test_an_upgraded_triton_asks_again_though_the_dsl_does_not_declare_it(site, monkeypatch):
    """Triton's version keys every check (Helion imports it); a fake distribution stands in for it here."""
    calls = _spawns(monkeypatch)
    monkeypatch.setattr(versions, "_ALWAYS_KEYED", (*versions._ALWAYS_KEYED, "accelfake_dep"))
    site("accelfake_dsl_tri", "1.0", USES_DEP)  # declares nothing
    site("accelfake_dep", "3.5.1", BROKEN)
    assert _compat.import_check("accelfake_dsl_tri", "1.0").ok is False
    site("accelfake_dep", "3.6.0", FINE)
    again = _compat.import_check("accelfake_dsl_tri", "1.0")
    assert (again.ok, again.cached) == (True, False) and len(calls) == 2
    record = json.loads(next(site.cache.glob("accelfake_dsl_tri-*.json")).read_text())
    assert record["key"][4]["triton"] == _compat.module_version("triton")


def test_another_import_path_asks_again(site, monkeypatch, tmp_path):
    """The same module and versions found on another ``sys.path`` (``PYTHONPATH``, another working directory)."""
    calls = _spawns(monkeypatch)
    site("accelfake_where", "1.0", FINE)
    assert _compat.import_check("accelfake_where", "1.0").ok is True
    other = tmp_path / "other"
    (other / "accelfake_where").mkdir(parents=True)
    (other / "accelfake_where" / "__init__.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(other))
    there = _compat.import_check("accelfake_where", "1.0")
    assert (there.ok, there.cached) == (False, False) and len(calls) == 2
    record = json.loads(next(site.cache.glob("accelfake_where-*.json")).read_text())
    assert record["key"][5][0] == str(other)
    assert len(list(site.cache.glob("accelfake_where-*.json"))) == 1  # the record was rewritten, not added to


@pytest.mark.parametrize("junk", ["{not json", "[]", '{"format": 1, "key": ["x"], "ok": true, "error": ""}',
                                  '{"format": 1, "ok": "yes"}', "\xff\xfe"])
def test_a_corrupt_cache_record_is_ignored_and_rewritten(site, monkeypatch, junk):
    calls = _spawns(monkeypatch)
    site("accelfake_corrupt", "3.0", FINE)
    assert _compat.import_check("accelfake_corrupt", "3.0").ok is True
    (path,) = site.cache.glob("accelfake_corrupt-*.json")
    path.write_text(junk, encoding="latin-1")
    site("accelfake_corrupt", "3.0", BROKEN)  # what a fresh check now finds
    check = _compat.import_check("accelfake_corrupt", "3.0")
    assert (check.ok, check.cached) == (False, False) and len(calls) == 2
    assert json.loads(path.read_text())["ok"] is False  # rewritten
    assert _compat.import_check("accelfake_corrupt", "3.0").cached


def test_an_import_that_does_not_finish_is_undecided_and_not_cached(site, monkeypatch):
    site("accelfake_slow", "0.1", "import time\ntime.sleep(60)\n")
    check = _compat.import_check("accelfake_slow", "0.1", timeout=3)
    assert check.ok is None and "did not finish within 3 s" in check.error
    assert list(site.cache.glob("accelfake_slow-*.json")) == []


def _as_helion(monkeypatch, module: str, version: str) -> None:
    """diagnostics sees ``module`` (a fake package) as the installed Helion ``version``, declaring no torch range."""
    monkeypatch.setitem(diagnostics.DSL_MODULES, "helion", module)
    monkeypatch.setattr(diagnostics, "dsl_versions", lambda: {"triton": None, "helion": version, "cutedsl": None})
    monkeypatch.setattr(diagnostics, "_requirement_on", lambda dist, target: None)


def test_info_and_doctor_say_an_installed_helion_does_not_import_with_this_torch(site, monkeypatch, capsys):
    site("accelfake_helion", "1.5.1", BROKEN)
    _as_helion(monkeypatch, "accelfake_helion", "1.5.1")
    assert main(["info", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["dsl"]["helion"]
    assert row["version"] == "1.5.1" and row["compatible"] is False and row["imports"] is False
    assert row["detail"].startswith(
        f"helion (import accelfake_helion) 1.5.1 installed, does not import with torch {torch.__version__}: "
        f"ImportError: cannot import name 'IntelGPUError' from 'torch._inductor.exc'"), row
    assert main(["doctor", "--json"]) == 1
    check = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "helion version")
    assert not check["ok"] and check["detail"] == row["detail"]
    assert check["fix"].startswith(f"pip install a helion version that imports with torch {torch.__version__}")


def test_info_says_an_importing_helion_is_compatible(site, monkeypatch, capsys):
    site("accelfake_helion_ok", "1.5.0", FINE)
    _as_helion(monkeypatch, "accelfake_helion_ok", "1.5.0")
    assert main(["info", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["dsl"]["helion"]
    assert (row["compatible"], row["imports"]) == (True, True)
    assert row["detail"] == f"helion 1.5.0 (no torch requirement declared); imports with torch {torch.__version__}"


def test_a_metadata_refusal_is_reported_without_trying_the_import(site, monkeypatch):
    calls = _spawns(monkeypatch)
    monkeypatch.setattr(diagnostics, "_requirement_on", lambda dist, target: diagnostics.Requirement("torch>=99"))
    row = diagnostics.dsl_status("helion", "1.5.1", torch.__version__)
    assert (row["compatible"], row["imports"]) == (False, None) and "needs torch>=99" in row["detail"]
    assert calls == []
    assert diagnostics.dsl_status("helion", None, torch.__version__) == {
        "version": None, "compatible": True, "detail": "not installed", "imports": None}


def test_pytest_helpers_skip_a_dsl_that_does_not_import_naming_the_error(site, monkeypatch):
    site("accelfake_helion_skip", "1.5.1", BROKEN)
    _as_helion(monkeypatch, "accelfake_helion_skip", "1.5.1")
    why = pytest_plugin.dsl_skip_reason("helion")
    assert why.startswith(f"helion 1.5.1 is installed but does not import with torch {torch.__version__}: "
                          f"ImportError: cannot import name 'IntelGPUError'"), why
    with pytest.raises(pytest.skip.Exception, match="does not import with torch"):
        pytest_plugin.importorskip_dsl("helion")
    site("accelfake_helion_skip", "1.5.2", FINE)
    monkeypatch.setattr(diagnostics, "dsl_versions", lambda: {"triton": None, "helion": "1.5.2", "cutedsl": None})
    assert pytest_plugin.dsl_skip_reason("helion") is None
    assert pytest_plugin.importorskip_dsl("helion").VALUE == 42
    monkeypatch.setitem(diagnostics.DSL_MODULES, "helion", "accelfake_not_there")
    assert pytest_plugin.dsl_skip_reason("helion") == "helion is not installed (import accelfake_not_there finds no module)"


def test_accel_import_and_kernel_availability_import_no_dsl():
    """Availability stays a metadata question: neither ``import accel`` nor the kernels' ``available()``
    imports a DSL or starts an import check."""
    import subprocess
    import sys

    code = textwrap.dedent("""
        import subprocess, sys
        started = []
        real = subprocess.run
        subprocess.run = lambda *a, **k: started.append(a) or real(*a, **k)
        import accel, accel.kernels
        from accel.kernels.dsl import cutedsl_utils, helion_utils, triton_utils
        for m in (triton_utils, helion_utils, cutedsl_utils):
            m.available()
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('triton', 'helion', 'cutlass')), len(started))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] 0"


def test_versions_docstring_examples_run():
    import doctest

    result = doctest.testmod(versions, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
