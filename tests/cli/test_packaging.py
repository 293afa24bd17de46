"""Wheel namespace hygiene: only ``accel`` is installed; backends/kernels live under it."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                        str(ROOT)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    (wheel,) = out.glob("accel_portability-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_only_accel_is_a_top_level_name(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"accel"}
    assert not any(n.startswith(("backends/", "kernels/")) for n in wheel_names)


def test_backends_and_kernels_install_under_accel(wheel_names):
    for vendor in ("_base", "cuda", "rocm", "xpu", "mps", "cpu"):
        assert f"accel/backends/{vendor}.py" in wheel_names
    assert "accel/kernels/__init__.py" in wheel_names


def test_every_source_package_is_in_the_wheel(wheel_names):
    """Every folder with an ``__init__.py`` ships (setup.py finds them; a new op folder needs no list edit),
    and so do the shipped tuning tables."""
    mapping = {"accel": "accel", "backends": "accel/backends", "kernels": "accel/kernels"}
    for src, dest in mapping.items():
        for init in (ROOT / src).rglob("__init__.py"):
            rel = init.relative_to(ROOT / src).as_posix()
            assert f"{dest}/{rel}" in wheel_names, f"{src}/{rel} is missing from the wheel"
        for module in (ROOT / src).rglob("*.py"):  # a folder of modules without __init__.py would not ship
            assert (module.parent / "__init__.py").is_file(), f"{module.parent} has modules but no __init__.py"
    for table in (ROOT / "kernels" / "tuning").glob("*.json"):
        assert f"accel/kernels/tuning/{table.name}" in wheel_names, f"{table.name} is missing from the wheel"


def test_console_script_declared(wheel_names):
    ep = next(n for n in wheel_names if n.endswith("entry_points.txt"))
    assert ep


def test_installed_accel_is_not_the_source_tree_only():
    import accel
    import accel.backends
    import accel.kernels

    assert accel.backends.__name__ == "accel.backends" and accel.kernels.__name__ == "accel.kernels"


def test_python_started_in_the_source_checkout_imports_accel(tmp_path):
    """`python script.py` in the repository root finds ./accel first; backends and kernels must resolve."""
    r = subprocess.run([sys.executable, "-c", "import accel, accel.backends, accel.kernels; "
                        "print(accel.backends.__name__, accel.device())"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "accel.backends"


def test_readme_portable_script_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    script = readme.split("## A portable script", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    (tmp_path / "portable.py").write_text(script)
    r = subprocess.run([sys.executable, "-W", "error::UserWarning", str(tmp_path / "portable.py")],
                       capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "via torch device" in r.stdout and "bytes allocated" in r.stdout
