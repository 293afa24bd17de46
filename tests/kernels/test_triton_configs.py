"""Shared Triton launch-config heuristics (pure Python)."""

import pytest

from accel.kernels.dsl.triton_configs import next_power_of_2, row_config, warps

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("n,want", [(1, 1), (2, 2), (3, 4), (1000, 1024), (4096, 4096), (4097, 8192)])
def test_next_power_of_2(n, want):
    assert next_power_of_2(n) == want


def test_warps_steps():
    assert [warps(e) for e in (1024, 2048, 8192)] == [4, 8, 16]
    assert [warps(e, (4096, 16384)) for e in (2048, 4096, 16384)] == [4, 8, 16]


def test_row_config_in_registers_and_looped():
    assert row_config(1000, 16384) == {"looped": False, "block_n": 1024, "rows": 4, "num_warps": 8}
    assert row_config(16384, 16384)["rows"] == 1 and not row_config(16384, 16384)["looped"]
    assert row_config(16385, 16384) == {"looped": True, "block_n": 4096, "rows": 1, "num_warps": 8}


def test_row_candidates_respect_program_size_and_per_thread_bounds():
    from accel.kernels.dsl.triton_configs import row_candidates, unique_configs

    got = row_candidates(1024, max_elements=4096, warp_choices=(4, 8), per_thread=(8, 16))
    # rows 1..4 (4096 max); 1024/(32*4)=8 ok, 1024/256=4 too few; 2048: 16 and 8; 4096: 32 no, 16 yes
    assert [(c["rows"], c["num_warps"]) for c in got] == [(1, 4), (2, 4), (2, 8), (4, 8)]
    assert all(c["block_n"] == 1024 and not c["looped"] for c in got)
    assert row_candidates(512, max_elements=65536, warp_choices=(4,), per_thread=(1, 999))[0]["rows"] == 1
    assert [c["rows"] for c in row_candidates(256, max_elements=65536, warp_choices=(4,), per_thread=(1, 999))] \
        == [1, 4, 8, 16]  # 2 rows of 256 = 512 < 1024: too small a program
    assert unique_configs([{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 2}]) == [{"a": 1, "b": 2}, {"a": 2}]
