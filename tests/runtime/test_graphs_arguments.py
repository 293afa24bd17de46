"""accel.graphs.graphed: which arguments are allowed, and how later calls are matched against the sample.

Tensors (also inside nested lists/tuples) are copied into static buffers; every other
value must equal the captured one (identity, then ==, errors caught, NaN equal to NaN).
Every mismatch is a GraphInputError, on the eager path as on replay.
"""

from __future__ import annotations

import math
import warnings
from collections import namedtuple

import pytest
import torch

import accel.graphs as graphs
from accel.errors import GraphInputError, UnknownBackendError
from accel.testing import fake_graph_capture

np = pytest.importorskip("numpy")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(graphs, "_WARNED", set())
    monkeypatch.setattr(graphs, "_PLANS", {})


def _eager(fn, sample):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = graphs.graphed(fn, sample)
    assert not g.captured
    return g


def _sum_list(x, xs):
    return x + sum(xs)


# -- eager path (CPU) ------------------------------------------------------------------------------------------
def test_eager_nested_list_of_tensors_is_matched_structurally():
    x = torch.ones(3)
    g = _eager(_sum_list, (x, [torch.ones(3), torch.ones(3)]))
    out = g(x, [torch.ones(3), torch.full((3,), 2.0)])
    assert torch.equal(out, torch.full((3,), 4.0))
    assert torch.equal(g(x, (torch.ones(3), torch.ones(3))), torch.full((3,), 3.0))  # a tuple for a list
    with pytest.raises(GraphInputError, match=r"argument 1\[1\] is a tensor of shape \(4,\).*shape \(3,\)"):
        g(x, [torch.ones(3), torch.ones(4)])
    with pytest.raises(GraphInputError, match=r"argument 1 is list .* a list of 2 item\(s\)"):
        g(x, [torch.ones(3)])
    with pytest.raises(GraphInputError, match=r"argument 1 is int 3, but the graph was captured with a list"):
        g(x, 3)


def test_eager_numpy_array_argument():
    a = np.arange(3)
    g = _eager(lambda x, arr: x + torch.from_numpy(arr), (torch.zeros(3, dtype=torch.int64), a))
    assert torch.equal(g(torch.zeros(3, dtype=torch.int64), a), torch.tensor([0, 1, 2]))  # the same array
    with pytest.raises(GraphInputError, match=r"argument 1 is ndarray .* \(baked into the graph\)"):
        g(torch.zeros(3, dtype=torch.int64), np.arange(3))  # another array: == is elementwise, not comparable


@pytest.mark.parametrize("nan", [float("nan"), np.float64("nan"), np.float32("nan")])
def test_nan_argument_matches_a_nan(nan):
    g = _eager(lambda x, s: x * s, (torch.ones(2), nan))
    assert torch.isnan(g(torch.ones(2), type(nan)("nan"))).all()  # another NaN object of the same type
    with pytest.raises(GraphInputError, match="argument 1 is"):
        g(torch.ones(2), type(nan)(1.0))


def test_values_are_compared_safely():
    class Raises:
        def __eq__(self, other):
            raise RuntimeError("no comparing me")

        __hash__ = object.__hash__

    r = Raises()
    g = _eager(lambda x, o: x, (torch.ones(1), r))
    assert torch.equal(g(torch.ones(1), r), torch.ones(1))  # identity first: __eq__ never called
    with pytest.raises(GraphInputError, match="argument 1 is Raises"):
        g(torch.ones(1), Raises())
    g = _eager(lambda x, k: x * k, (torch.ones(1), 2))
    assert torch.equal(g(torch.ones(1), 2), torch.full((1,), 2.0))
    with pytest.raises(GraphInputError, match=r"argument 1 is float 2.0.*int 2"):
        g(torch.ones(1), 2.0)  # another type would change what the graph computes
    g = _eager(lambda x, cfg: x, (torch.ones(1), {"scale": math.nan}))
    with pytest.raises(GraphInputError, match="argument 1 is dict"):
        g(torch.ones(1), {"scale": 1.0})


def test_nested_tensors_on_several_devices_are_refused():
    with pytest.raises(GraphInputError, match="several devices: cpu, meta"):
        graphs.graphed(_sum_list, (torch.ones(1), [torch.ones(1, device="meta")]))


# -- replay path (fake capture on CPU) -----------------------------------------------------------------------
def test_replay_copies_nested_tensors_into_static_buffers():
    Pair = namedtuple("Pair", "a b")
    seen = []

    def step(x, xs, pair, scale):
        seen.append((xs, pair))
        return x + xs[0] + xs[1][0] + pair.a * scale

    with fake_graph_capture() as log:
        sample = (torch.zeros(2), [torch.zeros(2), (torch.zeros(2),)], Pair(torch.zeros(2), "tag"), float("nan"))
        g = graphs.graphed(step, sample, warmup=1)
        assert g.captured
        static_x, static_xs, static_pair, _ = g.static_inputs
        assert isinstance(static_xs, list) and isinstance(static_xs[1], tuple) and isinstance(static_pair, Pair)
        assert static_xs[0] is not sample[1][0] and static_pair.b == "tag"
        assert all(s == (static_xs, static_pair) for s in seen)  # warm-up and capture ran on the static copies
        new = (torch.ones(2), [torch.full((2,), 2.0), (torch.full((2,), 3.0),)], Pair(torch.full((2,), 4.0), "tag"),
               float("nan"))
        out = g(*new)
        assert out is g.static_outputs and log.replays == 1
        assert torch.equal(static_xs[0], new[1][0]) and torch.equal(static_xs[1][0], new[1][1][0])
        assert torch.equal(static_pair.a, new[2].a) and torch.equal(static_x, new[0])
        with pytest.raises(GraphInputError, match=r"argument 2\[1\] is str 'other'.*str 'tag'"):
            g(*new[:2], Pair(torch.ones(2), "other"), float("nan"))
        with pytest.raises(GraphInputError, match=r"argument 1\[1\]\[0\] is a tensor of shape \(3,\)"):
            g(new[0], [new[1][0], (torch.ones(3),)], *new[2:])
        assert log.replays == 1  # refused calls replay nothing


# -- compare_step_time -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [5, None, "x"])
def test_compare_step_time_rejects_non_sequence_sample_args(bad):
    with pytest.raises(GraphInputError, match=rf"compare_step_time: sample_args is {type(bad).__name__}"):
        graphs.compare_step_time(lambda x: x, bad, iters=1)


def test_compare_step_time_on_meta_tensors_is_a_typed_error():
    calls = []
    with pytest.raises(UnknownBackendError, match="unknown backend 'meta'"):
        graphs.compare_step_time(lambda x: calls.append(x), (torch.ones(2, device="meta"),), iters=1)
    assert calls == []  # refused before any step ran


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_compare_step_time_rejects_bad_warmup(bad):
    with pytest.raises(GraphInputError, match=rf"compare_step_time: warmup={bad!r}"):
        graphs.compare_step_time(lambda x: x, (torch.ones(1),), iters=1, warmup=bad)
