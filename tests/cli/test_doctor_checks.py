"""``accel doctor``'s checks of the user tuning tables and of a ``LOCAL_RANK`` that selection refuses."""

from __future__ import annotations

import json

import pytest

import accel
from accel import diagnostics
from accel.kernels.tuning import table
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu


def _check(name, info=None):
    found = [c for c in diagnostics.checks(info or diagnostics.collect()) if c.name == name]
    assert len(found) == 1, [c.name for c in diagnostics.checks(info or diagnostics.collect())]
    return found[0]


def test_an_unreadable_user_tuning_table_fails_its_check_with_the_file_and_key(tmp_path, monkeypatch):
    monkeypatch.setenv(table.TUNING_DIR_ENV, str(tmp_path))
    table.reload()
    assert _check("user tuning tables").ok
    good = dict(op="rms_norm_fwd", dtype="bfloat16", m=4096, n=4096, impl="triton", rounds=3)
    table.write_user_table("gfx942", [good])
    assert _check("user tuning tables").ok
    (tmp_path / "sm_90.json").write_text(json.dumps({"format": 1, "arch": "sm_90", "entries": [{**good, "imp": 1}]}))
    c = _check("user tuning tables")
    assert not c.ok and "1 of 2" in c.detail and "sm_90.json" in c.detail and "'imp'" in c.detail
    assert "accel bench --tune" in c.fix
    table.reload()


@pytest.mark.parametrize("value", ["x", "5"])
def test_a_local_rank_selection_refuses_gets_the_launchers_fix(monkeypatch, value):
    monkeypatch.setenv("LOCAL_RANK", value)
    with fake_backend("cuda", device_count=2):
        accel.clear_cache()
        c = _check("selection")
        assert not c.ok and "LOCAL_RANK" in c.detail and "torchrun --nproc-per-node" in c.fix
    accel.clear_cache()
