"""Every docstring example of the issue-8 modules runs (on CPU)."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["accel.compile", "accel.quant", "accel._quant_formats", "accel._quantize", "accel.distributed",
                                  "accel.tunable"])
def test_docstring_examples(name):
    import sys

    importlib.import_module(name)
    module = sys.modules[name]  # accel.compile the attribute is the function; the module lives here
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
