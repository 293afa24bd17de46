"""Every docstring example of accel.kernels runs (on CPU)."""

import doctest
import importlib

import pytest

import accel.kernels as ak

MODULES = ["accel.kernels.core.registry", "accel.kernels.core.explain", "accel.kernels.catalog", "accel.kernels.tuning.tolerance",
           "accel.kernels.ops.rms_norm.reference", "accel.kernels.ops.rms_norm.conditions", "accel.kernels.ops.conds",
           "accel.kernels.tuning.table", "accel.kernels.dsl.triton_configs", "accel.kernels.dsl.launch", "accel.backends.xpu", "accel.backends._base"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_TUNING_DIR", str(tmp_path))  # the tables' examples see the shipped tables only
    import accel

    accel.clear_cache()
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    if name.endswith((".registry", ".catalog")):
        assert result.attempted >= 3
    for o in ak.overrides():
        ak.unregister(o.name)


def test_examples_exist_for_the_public_api():
    documented = [f for f in ("register", "disable", "disabled", "overrides", "explain", "availability", "install")
                  if ">>>" in (getattr(ak, f).__doc__ or "")]
    assert len(documented) == 7
