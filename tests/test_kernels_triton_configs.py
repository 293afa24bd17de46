"""Shared Triton launch-config heuristics (pure Python)."""

import pytest

from accel.kernels._triton_configs import next_power_of_2, row_config, warps

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
