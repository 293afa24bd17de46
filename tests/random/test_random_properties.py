"""Property tests of accel.random (hypothesis): fork_rng and snapshot/restore over random draw sequences.

Streams: Python ``random``, NumPy's global state, the torch CPU generator and two
faked XPU generators (:func:`accel.testing.fake_rng`), through both torch code paths.
"""

from __future__ import annotations

import io
import random

import pytest
import torch

import accel
import accel._compat
import accel.random as ar
from accel.testing import fake_backend, fake_rng

np = pytest.importorskip("numpy", reason="the properties cover NumPy's stream too; install the 'test' extra")
hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis; install the 'test' extra")
st = pytest.importorskip("hypothesis.strategies")
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

STREAMS = ["python", "numpy", "cpu", "dev0", "dev1"]
draws = st.lists(st.tuples(st.sampled_from(STREAMS), st.integers(min_value=1, max_value=9)), max_size=12)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def draw(rng, stream, n):
    if stream == "python":
        return [random.random() for _ in range(n)]
    if stream == "numpy":
        return np.random.rand(n).tolist()
    if stream == "cpu":
        return torch.rand(n).tolist()
    return rng.draw(int(stream[-1]), n).tolist()


def torch_states(rng):
    return torch.get_rng_state().tolist(), [g.get_state().tolist() for g in rng.generators]


@pytest.fixture(params=["accelerator", "device_module"])
def path(request, monkeypatch):
    monkeypatch.setattr(accel._compat, "has_accelerator_random", lambda: request.param == "accelerator")
    return request.param


@SETTINGS
@given(inside=draws, after=draws, raise_inside=st.booleans(), all_streams=st.booleans())
def test_fork_rng_leaves_every_stream_as_before(path, inside, after, raise_inside, all_streams):
    with fake_backend("xpu", device_count=2), fake_rng("xpu", device_count=2) as rng:
        snap = ar.snapshot()
        before = torch_states(rng), random.getstate(), repr(np.random.get_state())
        try:
            with ar.fork_rng(all_streams=all_streams):
                for stream, n in inside:
                    draw(rng, stream, n)
                if raise_inside:
                    raise KeyError("leave the block early")
        except KeyError:
            pass
        # Every torch stream is forked; Python and NumPy only with all_streams (as torch.random.fork_rng).
        forked = STREAMS if all_streams else ["cpu", "dev0", "dev1"]
        assert torch_states(rng) == before[0]
        if all_streams or not any(s in ("python", "numpy") for s, _ in inside):
            assert (random.getstate(), repr(np.random.get_state())) == before[1:]
        replay = [(s, n) for s, n in after if s in forked]
        got = [draw(rng, s, n) for s, n in replay]
        ar.restore(snap, strict=True)  # what the streams gave before the fork
        assert [draw(rng, s, n) for s, n in replay] == got


@SETTINGS
@given(before=draws, after=draws)
def test_snapshot_draws_restore_gives_the_same_draws(path, before, after):
    with fake_backend("xpu", device_count=2), fake_rng("xpu", device_count=2) as rng:
        for stream, n in before:
            draw(rng, stream, n)
        buf = io.BytesIO()
        torch.save(ar.snapshot(), buf)
        first = [draw(rng, s, n) for s, n in after]
        buf.seek(0)
        ar.restore(torch.load(buf, weights_only=True), strict=True)
        assert [draw(rng, s, n) for s, n in after] == first
