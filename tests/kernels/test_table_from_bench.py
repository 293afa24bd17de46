"""ci/gpu/table_from_bench.py: the rules that turn benchmark reports into the shipped tuning table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

_spec = importlib.util.spec_from_file_location(
    "table_from_bench", Path(__file__).resolve().parents[2] / "ci" / "gpu" / "table_from_bench.py")
tfb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tfb)


def _row(shape, aten, triton, helion, routed=None, routed_to="aten"):
    impls = {"aten": {"gbs": aten}, "triton": {"gbs": triton}, "helion": {"gbs": helion}}
    if routed is not None:
        impls["routed"] = {"gbs": routed}
    return {"op": "rms_norm", "direction": "fwd", "dtype": "bf16", "shape": list(shape), "impls": impls,
            "routed_to": routed_to}


def _report(*rows):
    return {"arch": "sm_90", "device": "H200", "torch": "2.11", "versions": {}, "copy_ceiling_gbs": 4160.0,
            "rows": list(rows)}


def _impls(table):
    return {(e["m"], e["n"]): e["impl"] for e in table["entries"]}


BIG, SMALL = (32768, 4096), (4096, 4096)


def test_margin_best_of_runs_and_host_sensitive_preference():
    t = tfb.build([_report(_row(BIG, 1000, 1050, 1080), _row(SMALL, 1000, 1300, 1400)),
                   _report(_row(BIG, 1000, 900, 1200), _row(SMALL, 1000, 1250, 1350))])
    # BIG: helion best of runs 1200 >= 1.1x ATen; SMALL: helion fastest but triton passes the margin
    assert _impls(t) == {BIG: "helion", SMALL: "triton"}
    t = tfb.build([_report(_row(BIG, 1000, 1050, 1090))])
    assert _impls(t) == {BIG: "aten"}  # under the 10 % margin


def test_routed_losses_count_on_small_shapes_always_on_big_only_when_the_direct_call_won():
    base = _report(_row(BIG, 1000, 1100, 1500), _row(SMALL, 1000, 1500, 1000))
    slowed_gpu = _report(_row(BIG, 1000, 700, 900, routed=800, routed_to="rms_norm_fwd.helion"),
                         _row(SMALL, 1000, 900, 900, routed=600, routed_to="rms_norm_fwd.triton"))
    assert _impls(tfb.build([base, slowed_gpu])) == {BIG: "helion", SMALL: "aten"}
    host_bound = _report(_row(BIG, 1000, 1100, 1500, routed=800, routed_to="rms_norm_fwd.helion"))
    assert _impls(tfb.build([base, host_bound]))[BIG] == "aten"


def test_evidence_limits_rule_4_to_the_newest_reports_of_a_dsl():
    old = _report(_row(BIG, 1000, 1100, 1500, routed=800, routed_to="rms_norm_fwd.helion"))
    new = _report(_row(BIG, 1000, 1100, 1500, routed=1490, routed_to="rms_norm_fwd.helion"))
    assert _impls(tfb.build([old, new]))[BIG] == "aten"
    assert _impls(tfb.build([old, new], evidence={"helion": 1}))[BIG] == "helion"
    # a window per op and direction overrides the DSL's: this op's host path did not change
    assert _impls(tfb.build([old, new], evidence={"helion": 1, "helion.rms_norm_fwd": 2}))[BIG] == "aten"


def test_the_last_tune_file_supplies_the_config():
    tuned = {"entries": [
        {"op": "rms_norm_fwd", "dtype": "bfloat16", "m": 32768, "n": 4096, "impl": "helion", "config": {"a": 1}},
        {"op": "rms_norm_fwd", "dtype": "bfloat16", "m": 32768, "n": 4096, "impl": "helion", "config": {"a": 2}},
        {"op": "rms_norm_fwd", "dtype": "bfloat16", "m": 32768, "n": 4096, "impl": "triton", "config": {"a": 3}}]}
    t = tfb.build([_report(_row(BIG, 1000, 1100, 1500))], tuned)
    assert t["entries"][0]["config"] == {"a": 2} and t["entries"][0]["evidence"].count("config from") == 1


def test_a_tuned_dsl_config_is_used_even_where_the_tune_picked_another_implementation():
    tuned = {"entries": [
        {"op": "rms_norm_fwd", "dtype": "bfloat16", "m": 4096, "n": 4096, "impl": "helion", "config": {"h": 1},
         "configs": {"helion": {"h": 1}, "triton": {"t": 1}}}]}
    t = tfb.build([_report(_row(SMALL, 1000, 1500, 1000), _row(BIG, 1000, 1100, 1500))], tuned)
    # every row survives a tuned match on an earlier one (the GB/s table is not the tune's configs)
    assert [(e["m"], e["impl"], e["config"]) for e in t["entries"]] == [(4096, "triton", {"t": 1}), (32768, "helion", None)]


def test_a_measured_routed_helion_call_keeps_helion_on_a_host_sensitive_shape():
    plain = _report(_row(SMALL, 1000, 1500, 1700))
    assert _impls(tfb.build([plain]))[SMALL] == "triton"
    routed = _report(_row(SMALL, 1000, 1500, 1700, routed=1650, routed_to="rms_norm_fwd.helion"))
    assert _impls(tfb.build([plain, routed]))[SMALL] == "helion"
    assert _impls(tfb.build([routed, plain], evidence={"helion": 1}))[SMALL] == "triton"  # outside the window


def test_a_host_bound_winner_gives_way_to_a_dsl_whose_routed_call_held():
    """Session 4's final run: routed Helion LayerNorm 65536x1024 lost to ATen on a slow host while Triton,
    routed in earlier runs, never did: Triton, not ATen (which would forfeit ~2x)."""
    tri_routed = _report(_row(SMALL, 1000, 2000, 2200, routed=1950, routed_to="rms_norm_fwd.triton"))
    hel_lost = _report(_row(SMALL, 1000, 2000, 2200, routed=980, routed_to="rms_norm_fwd.helion"))
    hel_won = _report(_row(SMALL, 1000, 2000, 2200, routed=2150, routed_to="rms_norm_fwd.helion"))
    t = tfb.build([tri_routed, hel_won, hel_lost])
    assert _impls(t) == {SMALL: "triton"} and "routed never lost" in t["entries"][0]["evidence"]
    # no routed evidence for Triton (never routed), or Triton lost too: ATen
    assert _impls(tfb.build([hel_won, hel_lost])) == {SMALL: "aten"}
    tri_lost = _report(_row(SMALL, 1000, 2000, 2200, routed=900, routed_to="rms_norm_fwd.triton"))
    assert _impls(tfb.build([tri_routed, tri_lost, hel_won, hel_lost])) == {SMALL: "aten"}
    # Triton under the 10 % margin: ATen
    slow_tri = _report(_row(SMALL, 1000, 1050, 2200, routed=1040, routed_to="rms_norm_fwd.triton"))
    slow_tri_hel_lost = _report(_row(SMALL, 1000, 1050, 2200, routed=980, routed_to="rms_norm_fwd.helion"))
    slow_tri_hel_won = _report(_row(SMALL, 1000, 1050, 2200, routed=2150, routed_to="rms_norm_fwd.helion"))
    assert _impls(tfb.build([slow_tri, slow_tri_hel_won, slow_tri_hel_lost])) == {SMALL: "aten"}
