"""Every docstring example in the shipped modules runs (doctest)."""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest


pytestmark = pytest.mark.cpu


def _modules():
    # accel.backends and accel.kernels install from their own folders (setup.py): in an editable install they
    # are not under accel.__path__, so each is walked from its own __path__.
    names = set()
    for package in ("accel", "accel.backends", "accel.kernels"):
        root = importlib.import_module(package)
        for m in pkgutil.walk_packages(root.__path__, f"{package}."):
            if m.name.endswith("__main__") or ".ops." in m.name and m.name.endswith("_kernel"):
                continue  # DSL kernel sources import triton/helion; their numerics are tested separately
            names.add(m.name)
    return sorted({"accel.backends", "accel.kernels", *names})


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name}: optional dependency missing: {exc}")
    # a module whose examples need an optional package says so (accel.integrations.transformers: transformers)
    missing = [d for d in getattr(module, "__doctest_requires__", ()) if importlib.util.find_spec(d) is None]
    if missing:
        pytest.skip(f"{name}: its examples need {', '.join(missing)}, not installed here (tox env cpu installs it)")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


# --- the README and the documentation site (docs/): text that names code is checked against the code ---------

import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
#: Pages whose ``python`` blocks are complete programs a reader copies; each block runs in a fresh interpreter.
RUNNABLE = ["quickstart.md", "portable.md", "checkpoint.md", "kernels.md"]
#: accel's environment variables a page may name (accel.diagnostics.ACCEL_ENV, ACCEL_DEVICE, the tests' own).
_DOTTED = re.compile(r"`[^`\n]*?(?<![\w.])(accel(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
_PATH = re.compile(r"`((?:examples|tests|benchmarks|kernels|backends|accel|ci|docs)/[\w./-]*\.(?:py|md|json|sh))`")
_ENV = re.compile(r"\b(ACCEL_[A-Z_]+)\b")
_CI_READ = re.compile(r"\$\{(ACCEL_[A-Z_]+)")


def _resolve(dotted: str) -> object:
    """The object ``accel.x.y.z`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)  # AttributeError: the text names something that does not exist
        return obj
    raise ImportError(dotted)


def _code_names(page: Path) -> list[str]:
    """The ``accel.x.y`` names in the page's code spans and blocks; the JSON schema names (``accel.info``) are
    names of reports, not of code."""
    from accel.cli.schemas import SCHEMAS

    text = page.read_text()
    spans = _DOTTED.findall(text)
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        spans += re.findall(r"(?<![\w.])(accel(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", block)
    return sorted(set(spans) - set(SCHEMAS))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_accel_name_a_page_gives_exists(page):
    """``accel.kernels.tuning.table.MIN_NUMEL`` in a README that no module defines fails here (issue 25 item 6)."""
    import torch

    import accel.nn  # noqa: F401  (registers accel's custom ops: torch names them accel.<op>.<overload>)

    missing = []
    for dotted in _code_names(page):
        try:
            first = dotted.split(".")[1]
            if not hasattr(accel, first) and importlib.util.find_spec(f"accel.{first}") is None:
                obj = torch.ops.accel  # torch's name of an accel custom op (accel.rms_norm_hf.default)
                for name in dotted.split(".")[1:]:
                    obj = getattr(obj, name)
                continue
            _resolve(dotted)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{dotted} ({type(exc).__name__}: {exc})")
    assert not missing, f"{page.name} names code that does not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_and_variable_a_page_names_exists(page):
    from accel import diagnostics

    text = page.read_text()
    paths = [p for p in _PATH.findall(text) if "<" not in p and "*" not in p]
    assert [p for p in paths if not (ROOT / p).exists()] == [], page.name
    # The CI scripts' own knobs (ACCEL_TOX_ENVS, ACCEL_CI_KEEP_ENVS) exist where a script reads them.
    ci_reads = {m for script in (ROOT / "ci").rglob("*.sh") for m in _CI_READ.findall(script.read_text())}
    known = {*diagnostics.ACCEL_ENV, *ci_reads, "ACCEL_DEVICE", "ACCEL_TEST_ONCE", "ACCEL_KERNELS_VERIFY"}
    assert sorted(set(_ENV.findall(text)) - known) == [], page.name


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", RUNNABLE)
def test_the_python_blocks_of_a_guide_run(page, tmp_path):
    """Each ``python`` block of the quickstart, portable-script guide, checkpoint recipe and kernels guide runs as
    a reader would run it (a fresh interpreter, without accel's variables) and exits 0; the checkpoint recipe asserts that the
    resumed losses equal the uninterrupted run's."""
    blocks = _python_blocks(DOCS / page)
    assert blocks, f"{page} has no python block"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    for i, code in enumerate(blocks):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f"{page} block {i}:\n{code}\n{r.stderr}"


def test_the_checkpoint_recipe_is_right_about_the_order(tmp_path):
    """The recipe's warning holds: restoring the RNG *before* building the model silently gives other losses."""
    (code,) = _python_blocks(DOCS / "checkpoint.md")
    right = "accel.random.restore(state[\"rng\"], strict=True)\n"
    assert right in code
    wrong = code.replace(right, "").replace("model, opt, sched = build(dev)\nstate = torch.load(",
                                            "state = torch.load(").replace(
        "sched.load_state_dict(state[\"scheduler\"])\n", "sched.load_state_dict(state[\"scheduler\"])\n")
    wrong = wrong.replace("weights_only=True, map_location=\"cpu\")\n",
                          "weights_only=True, map_location=\"cpu\")\naccel.random.restore(state[\"rng\"], strict=True)\n"
                          "model, opt, sched = build(dev)\n", 1)
    assert wrong != code and wrong.index("restore(") < wrong.index("model, opt, sched = build(dev)\nmodel.load")
    r = subprocess.run([sys.executable, "-c", wrong], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ACCEL_DEVICE": "cpu"})
    assert r.returncode == 1 and "the resumed losses differ" in r.stderr, r.stderr


def test_every_error_class_has_its_troubleshooting_entry():
    from accel import errors

    text = (DOCS / "troubleshooting.md").read_text()
    headings = set(re.findall(r"^### `([\w.]+)`$", text, flags=re.M))
    assert sorted(set(errors.__all__) - headings) == []
    assert {"accel.demo.DemoError", "accel.demo.DemoArgumentError"} <= headings
    for name in headings:
        _resolve(name if name.startswith("accel.") else f"accel.errors.{name}")


def test_the_readme_says_how_to_build_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert "python -m sphinx -W --keep-going -b html docs docs/_build/html" in readme
    assert "pip install '.[docs]'" in readme


@pytest.mark.slow
@pytest.mark.once
def test_the_documentation_site_builds_without_a_warning(tmp_path):
    """The docs build as CI builds them: Sphinx with warnings as errors (``-W``), from the docstrings."""
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        pytest.fail("the docs build needs sphinx and myst-parser: pip install '.[docs]' (tox env cpu installs them)")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d",
                        str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "html" / "index.html").exists()
    for page in DOCS.glob("*.md"):  # every page is built and reachable from the navigation
        assert (tmp_path / "html" / f"{page.stem}.html").exists(), page.name
    index = (tmp_path / "html" / "index.html").read_text()
    assert all(f'href="{p.stem}.html"' in index for p in DOCS.glob("*.md") if p.stem != "index")
    cli = (tmp_path / "html" / "cli.html").read_text()
    assert "Exit status" in cli and "--plot" in cli  # the commands' own --help texts
