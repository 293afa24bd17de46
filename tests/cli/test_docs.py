"""Every docstring example in the shipped modules runs (doctest)."""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import accel

pytestmark = pytest.mark.cpu


def _modules():
    names = []
    for m in pkgutil.walk_packages(accel.__path__, "accel."):
        if m.name.endswith("__main__") or ".ops." in m.name and m.name.endswith("_kernel"):
            continue  # DSL kernel sources import triton/helion; their numerics are tested separately
        names.append(m.name)
    return names


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
