"""accel.random on a real NVIDIA GPU (marker ``cuda``: skipped with the probe's reason elsewhere).

Run on the GPU machine: ``ACCEL_REQUIRE_BACKEND=cuda pytest -m cuda tests/random/test_random_cuda.py``.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
import warnings

import pytest
import torch

import accel.random as ar
from accel.errors import RngRestoreWarning, RngStateError

try:
    import numpy as np
except ImportError:  # NumPy's stream is then simply not part of the snapshot
    np = None

pytestmark = pytest.mark.cuda


def _draws():
    numpy_draw = float(np.random.rand()) if np is not None else None
    return [random.random(), numpy_draw, torch.rand(4).tolist(), torch.rand(4, device="cuda").tolist()]


@pytest.mark.parametrize("device", [None, "cuda", "cuda:0", 0, torch.device("cuda", 0)])
def test_get_set_rng_state_reproduces_cuda_draws(device):
    state = ar.get_rng_state(device)
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    a = torch.rand(4, device="cuda")
    ar.set_rng_state(state, device)
    assert torch.equal(a, torch.rand(4, device="cuda"))


def test_rng_state_all_round_trips():
    states = ar.get_rng_state_all()
    assert len(states) == torch.cuda.device_count()
    a = [torch.rand(4, device=f"cuda:{i}") for i in range(len(states))]
    ar.set_rng_state_all(states)
    assert all(torch.equal(a[i], torch.rand(4, device=f"cuda:{i}")) for i in range(len(states)))


def test_snapshot_restore_reproduces_python_numpy_cpu_cuda_draws():
    torch.rand(8, device="cuda")
    snap = ar.snapshot()
    assert snap["vendor"] == "cuda" and snap["device_count"] == torch.cuda.device_count()
    buf = io.BytesIO()
    torch.save(snap, buf)
    expected = _draws()
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RngRestoreWarning)
        report = ar.restore(loaded, strict=True)
    streams = ["python", "numpy", "torch_cpu"] if np is not None else ["python", "torch_cpu"]
    assert report["restored"][: len(streams)] == streams and "cuda:0" in report["restored"]
    assert _draws() == expected


def test_manual_seed_reproduces_cuda_draws():
    ar.manual_seed(1234)
    a = torch.rand(4, device="cuda"), torch.rand(4)
    ar.manual_seed(1234)
    assert torch.equal(a[0], torch.rand(4, device="cuda")) and torch.equal(a[1], torch.rand(4))
    assert ar.initial_seed() == 1234 == ar.initial_seed(0)


def test_fork_rng_restores_cuda():
    before = torch.cuda.get_rng_state()
    with ar.fork_rng():
        torch.rand(100, device="cuda")
    assert torch.equal(before, torch.cuda.get_rng_state())


def test_philox_seed_offset_round_trip():
    ar.manual_seed(7)
    assert ar.get_philox_state() == (7, 0)
    torch.rand(4, device="cuda")
    st = ar.get_philox_state()
    assert st.seed == 7 and st.offset > 0
    a = torch.rand(4, device="cuda")
    ar.set_philox_state(st)
    assert torch.equal(a, torch.rand(4, device="cuda"))
    assert ar.default_generator() is torch.cuda.default_generators[torch.cuda.current_device()]


def test_bad_states_leave_the_cuda_generator_unchanged():
    before = torch.cuda.get_rng_state()
    for bad, match in [
        (torch.get_rng_state(), "looks like a torch CPU"),
        (before.to("cuda"), "is on cuda"),
        (before.to(torch.int64), "dtype"),
    ]:
        with pytest.raises(RngStateError, match=match):
            ar.set_rng_state(bad)
    bad_offset = before.clone()
    bad_offset[8] = 2  # offset 2: CUDA's Philox generator takes multiples of 4 only
    with pytest.raises(RngStateError, match="rejects this state"):
        ar.set_rng_state(bad_offset)
    assert torch.equal(before, torch.cuda.get_rng_state())


def test_manual_seed_does_not_initialise_cuda():
    code = ("import torch, accel.random; accel.random.manual_seed(0); accel.random.seed(); "
            "print(torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_rng_check_script_passes():
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "ci" / "gpu" / "rng_check.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAIL" not in out.stdout
