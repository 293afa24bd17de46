"""Issue 24 item 7: an aborted graph capture with ``graphed(..., fallback=True)`` warns once in total.

Before: accel's one ``GraphFallbackWarning`` and torch's own "The CUDA Graph is empty" from
``capture_end`` (a capture aborted by an operation torch refuses before it reaches the driver, such as
a host-to-device copy from pageable memory or a private generator, ends fine with nothing recorded).
accel's abort owns that warning. Here the fake graph of :mod:`accel.testing` issues torch's warning from
``capture_end`` as torch does; the real run is ``ci/gpu/reliability.py`` on the H200.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import accel.graphs as ag
from accel.errors import GraphCaptureError, GraphFallbackWarning
from accel.testing import FakeGraph, fake_graph_capture

TORCH_EMPTY = ("The CUDA Graph is empty. This usually means that the graph was attempted to be captured on "
               "wrong device or stream.")


@pytest.fixture
def torch_like_capture_end(monkeypatch):
    """FakeGraph.capture_end warns like torch's CUDAGraph::capture_end for a graph with no nodes."""
    real = FakeGraph.capture_end

    def capture_end(self):
        if self.state == "capturing":  # not invalidated: the driver ends it, with nothing recorded
            warnings.warn(TORCH_EMPTY, UserWarning, stacklevel=2)
        return real(self)

    monkeypatch.setattr(FakeGraph, "capture_end", capture_end)
    monkeypatch.setattr(ag, "_WARNED", set())


def _refused_by_torch(x):
    """What torch does for a pageable host-to-device copy (or a private generator) under capture: it
    raises before anything is recorded, and the capture itself stays valid."""
    if _refused_by_torch.capturing:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
    return x + 1


def test_fallback_after_an_aborted_capture_warns_once(torch_like_capture_end):
    with fake_graph_capture() as log:
        real_begin = FakeGraph.capture_begin

        def begin(self, *a, **k):
            real_begin(self, *a, **k)
            _refused_by_torch.capturing = True

        _refused_by_torch.capturing = False
        with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            mp.setattr(FakeGraph, "capture_begin", begin)
            g = ag.graphed(_refused_by_torch, (torch.zeros(2),), warmup=1, fallback=True)
        _refused_by_torch.capturing = False
        assert not g.captured and "capture aborted" in g.reason
        assert log.open_pools == set()
    shown = [(w.category.__name__, str(w.message)[:60]) for w in said]
    assert len(said) == 1, shown
    assert issubclass(said[0].category, GraphFallbackWarning)
    assert torch.equal(g(torch.ones(2)), torch.full((2,), 2.0))


def test_graph_abort_raises_without_torchs_warning(torch_like_capture_end):
    with fake_graph_capture(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        g = ag.Graph("cpu")
        with pytest.raises(GraphCaptureError, match="capture aborted"):  # noqa: SIM117 - the raise is inside
            with g:
                raise RuntimeError("operation not permitted when stream is capturing")
    assert [str(w.message) for w in said] == []


def test_invalidated_capture_falls_back_with_one_warning(torch_like_capture_end):
    """``.item()`` invalidates the capture: capture_end raises (no empty-graph warning there): still one."""
    with fake_graph_capture(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        g = ag.graphed(lambda x: x * x.sum().item(), (torch.ones(2),), warmup=0, fallback=True)
    assert not g.captured
    assert [w.category for w in said] == [GraphFallbackWarning]


def test_a_completed_capture_keeps_torchs_warnings(torch_like_capture_end):
    """Only an aborted capture owns the empty-graph warning: a completed empty capture still shows torch's."""
    with fake_graph_capture(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        g = ag.graphed(lambda x: x, (torch.ones(2),), warmup=0)
    assert g.captured
    assert [str(w.message) for w in said] == [TORCH_EMPTY]


def test_other_warnings_from_an_abort_are_kept(monkeypatch):
    real = FakeGraph.capture_end

    def capture_end(self):
        warnings.warn("some other torch warning", UserWarning, stacklevel=2)
        return real(self)

    monkeypatch.setattr(FakeGraph, "capture_end", capture_end)
    with fake_graph_capture(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        g = ag.Graph("cpu")
        with pytest.raises(GraphCaptureError):  # noqa: SIM117
            with g:
                raise RuntimeError("not permitted when stream is capturing")
    assert [str(w.message) for w in said] == ["some other torch warning"]
