"""Issue 24 item 8: every option a user hands to accel is checked where accel receives it, before any torch
call, with a typed accel error naming the bad key or value and the closest valid ones; a compile plan says
what it did with every key it was given.

(``accel.kernels.register`` arguments are checked in ``kernels/core``, not here; the CLI flags are
fuzzed in ``tests/cli/test_cli_fuzz.py``.)
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import accel
import accel.distributed as ad
import accel.graphs as ag
import accel.quant as q
from accel import _compat
from accel.errors import (
    CompileOptionError,
    DistributedError,
    GraphInputError,
    KernelFallbackWarning,
    KernelRegistrationError,
    QuantizationError,
    TuningTableError,
)
from accel.testing import fake_backend


@pytest.fixture
def no_torch_compile(monkeypatch):
    """torch.compile must not be reached: accel refuses first."""
    def refuse(*a, **k):
        raise AssertionError("torch.compile was called")

    monkeypatch.setattr(torch, "compile", refuse)


# -- accel.compile / compile_plan ------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(mode="max-autotun"), "Did you mean 'max-autotune'"),
    (dict(mode="MAX-AUTOTUNE"), "Did you mean 'max-autotune'"),
    (dict(mode=3), "unknown torch.compile mode 3"),
    (dict(options={"max_autotun": True}), "'max_autotun' is not an Inductor option (closest: 'max_autotune'"),
    (dict(options={"triton.cudagraph": True}), "closest: 'triton.cudagraphs'"),
    (dict(options={"max_autotune": "yes"}), "max_autotune='yes' is str; torch takes bool"),
    (dict(options={"coordinate_descent_tuning": True, "epilogue_fuson": True}), "'epilogue_fuson'"),
])
@pytest.mark.parametrize("call", ["compile", "compile_plan"])
def test_compile_modes_and_options_are_checked(no_torch_compile, call, kwargs, says):
    with pytest.raises(CompileOptionError, match=None) as info:
        if call == "compile":
            accel.compile(lambda x: x, **kwargs)
        else:
            accel.compile_plan(kwargs.get("mode"), options=kwargs.get("options"))
    assert says in str(info.value)
    assert len(str(info.value)) < 1500  # not torch's list of every option


def test_dash_spelling_and_good_options_still_pass(monkeypatch):
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda model=None, **k: seen.update(k) or model)
    accel.compile(len, options={"coordinate-descent-tuning": True}, loss_pass=False)  # torch reads "-" as "_"
    assert seen["options"] == {"coordinate-descent-tuning": True}


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(fullgrap=True), "'fullgrap' (closest: 'fullgraph')"),
    (dict(dynamc=True), "'dynamc' (closest: 'dynamic'"),
    (dict(backend="eagr"), "Did you mean 'eager'"),
    (dict(backend=3), "neither a backend name nor a callable"),
    (dict(backend="eager", mode="default", options={}), "mode='default' and options together"),
])
def test_compile_keywords_and_backend_are_checked(no_torch_compile, kwargs, says):
    with pytest.raises(CompileOptionError) as info:
        accel.compile(lambda x: x, **kwargs)
    assert says in str(info.value)


def test_a_plan_says_what_it_did_with_every_key(all_inductor_keys):
    opts = {"max_autotune": False, "coordinate_descent_tuning": True}
    plan = accel.compile_plan("max-autotune", options=opts)
    given = {item.key: item for item in plan.given}
    assert set(given) == set(opts)
    assert given["max_autotune"].reason.startswith("yours: passed to torch.compile as given")
    assert "overrides mode='max-autotune''s True" in given["max_autotune"].reason
    assert given["coordinate_descent_tuning"].value is True
    assert accel.compile_plan().given == []


def test_a_plan_says_when_yours_overrides_accels(all_inductor_keys, monkeypatch):
    monkeypatch.setattr(_compat, "nvgemm_available", lambda: True)
    monkeypatch.setattr(_compat, "cutedsl_available", lambda: True)
    with fake_backend("cuda", arch="sm_100"):
        mine = "TRITON"
        plan = accel.compile_plan("max-autotune", options={"max_autotune_gemm_backends": mine})
    item = next(i for i in plan.given if i.key == "max_autotune_gemm_backends")
    assert "overrides accel's" in item.reason and item.value == mine


@pytest.fixture
def all_inductor_keys(monkeypatch):
    """Every key accel plans exists (a torch without NVGEMM would skip them before the user's win)."""
    real = _compat.inductor_config_has
    monkeypatch.setattr(_compat, "inductor_config_has", lambda key: True if "nvgemm" in key or "cutedsl" in key
                        else real(key))


# -- accel.quant --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("call", "says"), [
    (lambda x: q.quantize(x, "mxfp9"), "Did you mean 'mxfp8'"),
    (lambda x: q.quantize(x, "fp8_e4m3", granularity="rows"), "Did you mean 'row'"),
    (lambda x: q.quantize(x, "fp8_e4m3", granularity="block"), "granularity 'block' for fp8_e4m3"),
    (lambda x: q.quantize(x, "mxfp8", granularity="row"), "block-scaled"),
    (lambda x: q.quantize(x, "fp8_e4m3", dim=2), "dim=2 (int) is not a dimension of x"),
    (lambda x: q.quantize(x, "fp8_e4m3", dim=-3), "is not a dimension"),
    (lambda x: q.quantize(x, "fp8_e4m3", dim=1.0), "dim=1.0 (float)"),
    (lambda x: q.quantize(x, "fp8_e4m3", nonfinite="saturated"), "Did you mean 'saturate'"),
    (lambda x: q.fp8_dtype("e4m4"), "Did you mean 'e4m3'"),
    (lambda x: q.native_support("nvfp5", "cpu"), "Did you mean 'nvfp4'"),
])
def test_quant_names_are_checked(call, says):
    with pytest.raises(QuantizationError) as info:
        call(torch.ones(4, 32))
    assert says in str(info.value)


def test_quant_dim_no_longer_wraps_around():
    """dim=5 of a 2-D tensor was read as 5 % 2 = 1."""
    with pytest.raises(QuantizationError, match="dim=5"):
        q.quantize(torch.ones(4, 32), "mxfp8", dim=5)


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(fallback="referenc"), "Did you mean 'reference'"),
    (dict(fallback="reference", out_dtype=torch.int8), "out_dtype=torch.int8"),
    (dict(fallback="reference", out_dtype="bf16"), "out_dtype='bf16'"),
])
def test_scaled_mm_options_are_checked(kwargs, says):
    a, b = q.quantize(torch.ones(4, 32), "mxfp8"), q.quantize(torch.ones(32, 8), "mxfp8", dim=0)
    with pytest.raises(QuantizationError) as info:
        q.scaled_mm(a.data, b.data, a.scale, b.scale, **kwargs)
    assert says in str(info.value)
    with pytest.raises(QuantizationError, match="out_dtype"):
        q.reference_mm(a.data, b.data, a.scale, b.scale, out_dtype=torch.int32)


# -- accel.graphs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(strict="yes"), "strict='yes' (str) is not a bool"),
    (dict(fallback=1), "fallback=1 (int) is not a bool"),
    (dict(pool=7), "pool=7 (int) is not a graph memory-pool id"),
    (dict(pool=(1, 2, 3)), "is not a graph memory-pool id"),
    (dict(pool=(True, 1)), "is not a graph memory-pool id"),
])
def test_graphed_arguments_are_checked_before_anything_runs(monkeypatch, kwargs, says):
    ran = []
    monkeypatch.setattr(ag, "plan_for", lambda *a: ran.append(a))
    with pytest.raises(GraphInputError) as info:
        ag.graphed(lambda x: ran.append(x), (torch.ones(2),), **kwargs)
    assert says in str(info.value) and ran == []


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(capture_error_mode="thread-local"), "Did you mean 'thread_local'"),
    (dict(capture_error_mode="Global"), "Did you mean 'global'"),
    (dict(pool="pool"), "is not a graph memory-pool id"),
])
def test_graph_arguments_are_checked(kwargs, says):
    with pytest.raises(GraphInputError) as info:
        ag.Graph("cpu", **kwargs)
    assert says in str(info.value)


def test_good_graph_arguments_still_pass():
    from accel.testing import fake_graph_capture

    with fake_graph_capture(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = ag.Graph("cpu", pool=(0, 5), capture_error_mode="relaxed")
        assert g.pool() == (0, 5)
        assert ag.graphed(lambda x: x + 1, torch.ones(2), strict=True, fallback=False, pool=None).captured


# -- accel.distributed --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(world_sise=2), "'world_sise' (closest: 'world_size')"),
    (dict(rank=0, init_metod="tcp://127.0.0.1:1"), "'init_metod' (closest: 'init_method')"),
    (dict(timout=5), "'timout' (closest: 'timeout')"),
])
def test_init_process_group_keywords_are_checked_before_torch(monkeypatch, kwargs, says):
    import torch.distributed as dist

    called = []
    real = dist.init_process_group

    def spy(*a, **k):  # keeps torch's signature visible to accel's check
        called.append(k)

    spy.__signature__ = __import__("inspect").signature(real)
    monkeypatch.setattr(dist, "init_process_group", spy)
    with pytest.raises(DistributedError) as info:
        ad.init_process_group(**kwargs)
    assert says in str(info.value) and called == []


def test_init_process_group_backend_name_is_checked(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "init_process_group", lambda **k: pytest.fail("torch was called"))
    with pytest.raises(DistributedError, match="Did you mean 'gloo'"):
        ad.init_process_group("glo")
    with pytest.raises(DistributedError, match=r"backend=3 \(int\)"):
        ad.init_process_group(3)


# -- tuning tables ------------------------------------------------------------------------------------------------
GOOD = dict(op="layer_norm_bwd", dtype="bfloat16", m=4096, n=4096, impl="triton")


@pytest.fixture
def table(tmp_path, monkeypatch):
    from accel.kernels.tuning import table as t

    monkeypatch.setenv(t.TUNING_DIR_ENV, str(tmp_path))
    t.reload()
    yield t
    t.reload()


@pytest.mark.parametrize(("entry", "says"), [
    ({**GOOD, "imp": "triton"}, "unknown key(s) 'imp' (closest: 'impl')"),
    ({**GOOD, "confg": {}}, "'confg' (closest: 'config', 'configs')"),
    ({**GOOD, "impl": "tritn"}, "Did you mean 'triton'"),
    ({**GOOD, "dtype": "bf16"}, "Did you mean 'bfloat16'"),
    ({**GOOD, "op": "layernorm_bwd"}, "Did you mean 'layer_norm_bwd'"),
    ({**GOOD, "config": [1]}, "config=[1], not a dict"),
    ({**GOOD, "us": {"aten": "fast"}}, "must be numbers"),
    ({**GOOD, "m": True}, "m or n that is not an integer >= 1"),
    ("not a dict", "is str, not a dict"),
])
def test_write_user_table_names_the_bad_key(table, tmp_path, entry, says):
    with pytest.raises(TuningTableError) as info:
        table.write_user_table("sm_90", [GOOD, entry])
    assert says in str(info.value) and "entry 1" in str(info.value) and "nothing was written" in str(info.value)
    assert isinstance(info.value, KernelRegistrationError) and isinstance(info.value, ValueError)
    assert not (tmp_path / "sm_90.json").exists()


@pytest.mark.parametrize("arch", ["../sm_90", "sm_90/x", "", None, 90, "a b"])
def test_write_user_table_refuses_an_arch_that_is_no_file_name(table, arch):
    with pytest.raises(TuningTableError, match="is not an arch name"):
        table.write_user_table(arch, [GOOD])


def test_write_user_table_refuses_one_entry_for_a_list(table):
    with pytest.raises(TuningTableError, match="entries is dict, not a list"):
        table.write_user_table("sm_90", GOOD)


@pytest.mark.parametrize(("data", "says"), [
    ({"format": 1, "arch": "sm_90", "entries": [{**GOOD, "imp": "aten"}]}, "'imp' (closest: 'impl')"),
    ({"format": 1, "arch": "sm_90", "entrie": []}, "not a format-1 table"),
    ({"format": 1, "arch": "sm_90", "entries": [], "sorce": "me"}, "'sorce' (closest: 'source', 'sources')"),
])
def test_a_bad_user_table_file_is_named_and_ignored(table, tmp_path, data, says):
    f = tmp_path / "sm_90.json"
    f.write_text(json.dumps(data))
    with pytest.raises(TuningTableError) as info:
        table.check_file(f)
    assert says in str(info.value)
    table.reload()
    with pytest.warns(KernelFallbackWarning, match="Ignored as a whole") as said:
        folded = table.table("sm_90")
    assert says in str(said[0].message)
    assert all(c.source == "shipped" for c in folded.values())  # the shipped defaults apply


def test_the_shipped_tables_pass_the_check():
    from importlib import resources

    from accel.kernels.tuning import table as t

    files = [p for p in resources.files("accel.kernels").joinpath("tuning").iterdir() if p.name.endswith(".json")]
    assert files
    for p in files:
        t.check_file(p)
