"""accel.graphs: support detection, graph-class selection, eager fallback, capture/abort logic, real capture."""

from __future__ import annotations

import doctest
import gc
import warnings

import pytest
import torch

import accel
import accel.graphs as graphs
from accel import _compat
from accel.errors import (
    GraphCaptureError,
    GraphCaptureUnsupported,
    GraphFallbackWarning,
    GraphInputError,
    GraphStateError,
)
from accel.testing import fake_backend, fake_graph_capture


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Every test sees the 'runs eagerly' warnings afresh and a fresh plan cache."""
    monkeypatch.setattr(graphs, "_WARNED", set())
    monkeypatch.setattr(graphs, "_PLANS", {})


def _fallback_warnings(record):
    return [w for w in record if issubclass(w.category, GraphFallbackWarning)]


# --------------------------------------------------------------------------- docs


@pytest.mark.parametrize("module", ["accel.graphs", "accel.testing.graphs"])
def test_docstring_examples_run(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# --------------------------------------------------------------------------- CPU: unsupported


def test_cpu_is_unsupported_with_reason():
    support = graphs.is_supported("cpu")
    ok, why = support
    assert not support and ok is False
    assert "CPU has no graph capture" in why
    assert support.backend == "cpu" and support.graph_class is None


def test_graphed_runs_eagerly_on_cpu_and_warns_once():
    calls = []

    def step(x, scale):
        calls.append(1)
        return x * scale

    x = torch.arange(4.0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        g = graphs.graphed(step, (x, 3.0))
        g2 = graphs.graphed(step, (x, 3.0))
    assert len(_fallback_warnings(record)) == 1
    assert "CPU has no graph capture" in str(_fallback_warnings(record)[0].message)
    assert _fallback_warnings(record)[0].filename == __file__  # points at the line that calls graphed
    assert not g.captured and not g2.captured and g.graph is None
    assert g.reason.startswith("runs eagerly")
    assert calls == []  # no warm-up, no capture where nothing is captured
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(g(y, 3.0), y * 3.0)
    assert "eager" in repr(g)


def test_strict_raises_where_unsupported():
    with pytest.raises(GraphCaptureUnsupported, match=r"graphed step \(strict=True\): graph capture is unsupported on cpu"):
        graphs.graphed(_named("step"), (torch.ones(2),), strict=True)


def _named(name):
    def f(*a):
        return a

    f.__name__ = name
    return f


def test_graph_and_pool_handle_raise_on_cpu():
    with pytest.raises(GraphCaptureUnsupported, match="accel.graphs.Graph: graph capture is unsupported on cpu"):
        graphs.Graph("cpu")
    with pytest.raises(GraphCaptureUnsupported, match="graph_pool_handle: no graph memory pools on cpu"):
        graphs.graph_pool_handle("cpu")


# --------------------------------------------------------------------------- argument checks


def test_calls_are_checked_against_the_sample_and_change_nothing():
    calls = []

    def step(x, k):
        calls.append(1)
        return x + k

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphFallbackWarning)
        g = graphs.graphed(step, (torch.zeros(2, 3), 1))
    with pytest.raises(GraphInputError, match=r"called with 1 argument\(s\), but the graph was captured with 2"):
        g(torch.zeros(2, 3))
    with pytest.raises(GraphInputError, match=r"argument 0 is a tensor of shape \(3, 3\).*captured with a tensor of shape \(2, 3\)"):
        g(torch.zeros(3, 3), 1)
    with pytest.raises(GraphInputError, match="dtype torch.float64"):
        g(torch.zeros(2, 3, dtype=torch.float64), 1)
    with pytest.raises(GraphInputError, match="on meta"):
        g(torch.empty(2, 3, device="meta"), 1)
    with pytest.raises(GraphInputError, match=r"argument 1 is int 2.*int 1 \(baked into the graph\)"):
        g(torch.zeros(2, 3), 2)
    with pytest.raises(GraphInputError, match="argument 0 is list"):
        g([0.0], 1)
    assert calls == []  # rejected calls never reach the function
    assert torch.equal(g(torch.ones(2, 3), 1), torch.full((2, 3), 2.0))


def test_graphed_rejects_bad_arguments():
    with pytest.raises(GraphInputError, match="graphed: fn is int 3, not callable"):
        graphs.graphed(3, ())
    for bad in (-1, True, 1.5):
        with pytest.raises(GraphInputError, match=r"warmup=.*an int >= 0"):
            graphs.graphed(_named("step"), (), warmup=bad)
    with pytest.raises(GraphInputError, match="sample_args is dict"):
        graphs.graphed(_named("step"), {"x": 1})
    with pytest.raises(GraphInputError, match="tensors on several devices: cpu, meta"):
        graphs.graphed(_named("step"), (torch.ones(1), torch.ones(1, device="meta")))


def test_compare_step_time_on_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphFallbackWarning)
        t = graphs.compare_step_time(lambda x: x @ x, torch.eye(16), iters=4, warmup=1)
    assert not t.captured and t.iters == 4
    assert t.eager_ms > 0 and t.graphed_ms > 0 and t.speedup == t.eager_ms / t.graphed_ms
    with pytest.raises(GraphInputError, match=r"compare_step_time: iters=0"):
        graphs.compare_step_time(lambda x: x, (torch.ones(1),), iters=0)


# --------------------------------------------------------------------------- faked vendors: class selection


class _Recorder:
    """Stands in for a torch graph class: records construction and capture_begin arguments."""

    def __init__(self, *args, **kwargs):
        self.init = (args, kwargs)
        self.begin = None

    def capture_begin(self, *args, **kwargs):
        self.begin = (args, kwargs)


@pytest.mark.parametrize("vendor", ["cuda", "rocm"])
def test_cuda_and_rocm_use_cudagraph_without_accelerator_graph(vendor, monkeypatch):
    monkeypatch.setattr(_compat, "has_accelerator_graph", lambda: False)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Recorder)
    with fake_backend(vendor):
        support, plan = graphs.plan_for()
        assert support.supported and support.backend == vendor
        assert support.graph_class == "torch.cuda.CUDAGraph" and plan.graph_type is _Recorder
        assert accel.backend().graph_class() == ("torch.cuda.CUDAGraph", _Recorder)
        assert "torch.cuda.CUDAGraph" in graphs.is_supported().reason
        g = plan.make_graph((0, 7), None)
        plan.begin(g, (0, 7), None)
        assert g.init == ((), {}) and g.begin == ((), {"pool": (0, 7), "capture_error_mode": "global"})
        g = plan.make_graph(None, "relaxed")
        plan.begin(g, None, "relaxed")
        assert g.begin[1]["capture_error_mode"] == "relaxed"


@pytest.mark.parametrize("vendor", ["cuda", "rocm", "xpu"])
def test_accelerator_graph_preferred_where_torch_has_it(vendor, monkeypatch):
    monkeypatch.setattr(_compat, "has_accelerator_graph", lambda: True)
    monkeypatch.setattr(torch.accelerator, "Graph", _Recorder, raising=False)
    with fake_backend(vendor):
        support, plan = graphs.plan_for()
        assert support.graph_class == "torch.accelerator.Graph" and plan.graph_type is _Recorder
        g = plan.make_graph((0, 3), None)
        plan.begin(g, (0, 3), None)
        # torch.accelerator.Graph takes pool and mode at construction, capture_begin() takes none
        assert g.init == ((), {"pool": (0, 3), "capture_error_mode": "default"})
        assert g.begin == ((), {})


def test_xpu_uses_xpugraph(monkeypatch):
    monkeypatch.setattr(_compat, "has_accelerator_graph", lambda: False)
    monkeypatch.setattr(_compat, "has_xpu_graph", lambda: True)
    monkeypatch.setattr(torch.xpu, "XPUGraph", _Recorder, raising=False)
    with fake_backend("xpu"):
        support, plan = graphs.plan_for()
        assert support.supported and support.backend == "xpu"
        assert support.graph_class == "torch.xpu.XPUGraph" and plan.graph_type is _Recorder
        g = plan.make_graph((0, 5), "global")
        plan.begin(g, (0, 5), "global")
        assert g.begin == ((), {"pool": (0, 5)})  # XPU graphs have no capture modes


def test_xpu_without_graph_class_falls_back(monkeypatch):
    monkeypatch.setattr(_compat, "has_accelerator_graph", lambda: False)
    monkeypatch.setattr(_compat, "has_xpu_graph", lambda: False)
    with fake_backend("xpu"):
        ok, why = graphs.is_supported()
        assert not ok
        assert "has no graph class for xpu devices" in why and "torch.xpu.XPUGraph" in why
        with pytest.raises(GraphCaptureUnsupported, match="unsupported on xpu"):
            graphs.graphed(_named("step"), (2,), strict=True)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            g = graphs.graphed(lambda k: k * 2, (2,))
        assert not g.captured and g(2) == 4
        assert len(_fallback_warnings(record)) == 1


def test_mps_has_no_graphs(monkeypatch):
    monkeypatch.setattr(_compat, "has_accelerator_graph", lambda: True)
    with fake_backend("mps"):
        support = graphs.is_supported()
        assert not support and support.backend == "mps" and "MPS has no graph capture" in support.reason
        with pytest.raises(GraphCaptureUnsupported, match="unsupported on mps"):
            graphs.Graph()
        with pytest.raises(GraphCaptureUnsupported, match="unsupported on mps"):
            graphs.graphed(_named("step"), (1,), strict=True)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            g = graphs.graphed(lambda k: k + 1, (1,))
        assert not g.captured and g(1) == 2
        assert "MPS has no graph capture" in str(_fallback_warnings(record)[0].message)


def test_cpu_and_mps_backends_have_no_graph_class():
    assert accel.backend("cpu").graph_class() is None
    with fake_backend("mps"):
        assert accel.backend().graph_class() is None


def test_compat_graph_pool_functions_are_per_vendor():
    handle, end, release = _compat.graph_pool_functions("cuda")
    assert handle is torch.cuda.graph_pool_handle
    assert end is not None and release is not None
    assert _compat.graph_pool_functions("cpu")[1:] == (None, None)


# --------------------------------------------------------------------------- fake capture on CPU: the logic


def test_graphed_captures_on_a_side_stream_and_replays_with_copied_inputs():
    calls = []

    def step(x):
        calls.append(x)
        return x * 2

    prev = torch.cpu.current_stream()
    with fake_graph_capture() as log:
        g = graphs.graphed(step, (torch.zeros(3),), warmup=2)
        assert g.captured and g.graph.graph_class == "accel.testing.FakeGraph"
        assert len(calls) == 3  # 2 warm-ups + 1 capture, all on the static input
        assert all(c is g.static_inputs[0] for c in calls)
        assert log.capture_streams[0] is not prev  # captured on the side stream
        assert torch.cpu.current_stream() is prev  # previous stream restored
        new = torch.tensor([1.0, 2.0, 3.0])
        out = g(new)
        assert out is g.static_outputs  # static outputs, rewritten by each replay
        assert torch.equal(g.static_inputs[0], new)  # copied into the static input
        assert log.replays == 1 and len(calls) == 3  # replay does not call the function
        g(g.static_inputs[0])
        assert log.replays == 2
        g.graph.reset()
        with pytest.raises(GraphStateError, match="has no completed capture"):
            g(new)
        assert log.open_pools == set()
        assert "graph" in repr(g)


def test_graph_context_manager_states():
    with fake_graph_capture() as log:
        g = graphs.Graph("cpu")
        assert not g.captured and "empty" in repr(g)
        with pytest.raises(GraphStateError, match="Graph.replay: this graph has no completed capture"):
            g.replay()
        with pytest.raises(GraphStateError, match="Graph.pool: this graph has no memory pool yet"):
            g.pool()
        with g:
            with pytest.raises(GraphStateError, match="Graph.reset: called inside the `with graph:` block"):
                g.reset()
            with pytest.raises(GraphStateError, match="capture started on a graph that is capturing"):
                g.__enter__()
        assert g.captured and "captured" in repr(g)
        pool = g.pool()
        g.replay()
        assert log.replays == 1
        with pytest.raises(GraphStateError, match="already captured"):
            with g:
                pass
        g.reset()
        assert not g.captured and log.pool_refs[pool] == 0
        with g:  # a reset graph captures again
            pass
        assert g.captured


def test_shared_pool_is_passed_to_every_capture():
    with fake_graph_capture() as log:
        pool = graphs.graph_pool_handle("cpu")
        a, b = graphs.Graph("cpu", pool=pool), graphs.Graph("cpu", pool=pool, capture_error_mode="relaxed")
        with a:
            pass
        with b:
            pass
        assert [e for e in log.events if e[0] == "begin"] == [("begin", pool, "global"), ("begin", pool, "relaxed")]
        assert a.pool() == b.pool() == pool


def test_uncapturable_op_aborts_cleanly_and_device_stays_usable():
    prev = torch.cpu.current_stream()
    with fake_graph_capture() as log:
        g = graphs.Graph("cpu")
        with pytest.raises(GraphCaptureError, match=r"capture aborted on cpu.*operation not permitted when stream is capturing") as info:
            with g:
                torch.ones(2).sum().item()
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "device is usable" in str(info.value)
        assert log.capturing is None  # no capture left open
        assert log.open_pools == set()  # allocator routing closed
        assert all(n == 0 for n in log.pool_refs.values())  # pool released
        assert torch.cpu.current_stream() is prev
        assert torch.ones(2).sum().item() == 2.0  # item() works again
        with g:  # and the same graph captures fine afterwards
            pass
        g.replay()
        assert log.replays == 1


def test_capture_invalidated_without_an_exception_in_the_block():
    with fake_graph_capture() as log:
        g = graphs.Graph("cpu")
        with pytest.raises(GraphCaptureError, match="operation failed due to a previous error during capture"):
            with g:
                log.capturing.state = "invalidated"  # e.g. another thread broke the capture
        assert log.open_pools == set() and not g.captured


def test_ordinary_errors_propagate_unchanged_after_cleanup():
    with fake_graph_capture() as log:
        g = graphs.Graph("cpu")
        with pytest.raises(KeyError, match="a bug in the step"):
            with g:
                raise KeyError("a bug in the step")
        assert not g.captured and log.open_pools == set()
        assert all(n == 0 for n in log.pool_refs.values())


def test_capture_that_cannot_start_is_reported():
    with fake_graph_capture() as log:
        outer, inner = graphs.Graph("cpu"), graphs.Graph("cpu")
        with outer:
            with pytest.raises(GraphCaptureError, match="capture could not start on cpu"):
                with inner:
                    pass
        assert outer.captured and not inner.captured
        assert log.open_pools == set()


def test_graphed_fallback_runs_eagerly_when_capture_aborts():
    def step(x):
        return x * x.sum().item()

    with fake_graph_capture() as log:
        with pytest.raises(GraphCaptureError, match="operation not permitted"):
            graphs.graphed(step, (torch.ones(2),), warmup=1)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            g = graphs.graphed(step, (torch.ones(2),), warmup=1, fallback=True)
        assert not g.captured and "capture aborted" in g.reason
        assert len(_fallback_warnings(record)) == 1
        assert torch.equal(g(torch.full((2,), 2.0)), torch.full((2,), 8.0))
        assert log.open_pools == set() and log.capturing is None


# --------------------------------------------------------------------------- real devices


def _mlp(device, width=64, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device)


@pytest.mark.cuda
def test_cuda_graphed_forward_matches_eager():
    dev = accel.device("cuda")
    support = graphs.is_supported(dev)
    assert support, support.reason
    model = _mlp(dev)
    with torch.no_grad():
        g = graphs.graphed(model, (torch.randn(8, 64, device=dev),))
        assert g.captured and g.graph.graph_class == _compat.graph_class("cuda")[0]
        for _ in range(3):
            x = torch.randn(8, 64, device=dev)
            assert torch.allclose(g(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_cuda_graphed_training_step_matches_eager():
    dev = accel.device("cuda")

    def make():
        model = _mlp(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return model, step

    torch.manual_seed(1)
    data = [(torch.randn(8, 64, device=dev), torch.randn(8, 64, device=dev)) for _ in range(8)]
    eager_model, eager_step = make()
    graph_model, graph_step = make()
    for x, y in data[:3]:  # graphed() warms up 3 times on the sample: mirror that eagerly
        eager_step(data[0][0], data[0][1])
    g = graphs.graphed(graph_step, data[0], warmup=3)
    assert g.captured
    for x, y in data:
        le = eager_step(x, y).item()
        lg = g(x, y).item()
        assert abs(le - lg) <= 1e-4 * max(1.0, abs(le))
    for pe, pg in zip(eager_model.parameters(), graph_model.parameters()):
        assert torch.allclose(pe, pg, atol=1e-4, rtol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("on_side_stream", [False, True])
def test_cuda_graph_capture_from_any_stream_restores_it(on_side_stream):
    dev = accel.device("cuda")
    x = torch.zeros(1000, device=dev)
    user = torch.cuda.Stream(device=dev)
    ctx = torch.cuda.stream(user) if on_side_stream else torch.cuda.stream(torch.cuda.current_stream(dev))
    with ctx:
        before = torch.cuda.current_stream(dev)
        g = graphs.Graph(dev)
        with g:
            x += 1
        assert torch.cuda.current_stream(dev) == before
        for _ in range(5):
            g.replay()
        torch.cuda.current_stream(dev).synchronize()
    assert torch.all(x == 5)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["item", "pageable_h2d"])
def test_cuda_uncapturable_op_aborts_and_device_recovers(kind):
    dev = accel.device("cuda")
    x = torch.ones(256, device=dev)
    host = torch.ones(256)  # pageable
    first = graphs.Graph(dev)  # the first capture allocates the RNG's graph-safe seed/offset tensors
    with first:
        x.add_(0)
    del first
    torch.cuda.synchronize()
    gc.collect()
    allocated = torch.cuda.memory_allocated(dev)
    before = torch.cuda.current_stream(dev)
    g = graphs.Graph(dev)
    with pytest.raises(GraphCaptureError, match="capture aborted"):
        with g:
            y = x * 2
            if kind == "item":
                y.sum().item()
            else:
                y.copy_(host)
    assert not g.captured
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.cuda.current_stream(dev) == before
    # the device is usable: eager work, host syncs, and a new capture all work
    assert (x * 3).sum().item() == 768.0
    z = torch.zeros(256, device=dev)
    with g:
        z += x
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    assert torch.all(z == 2)
    del y, z
    g.reset()
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(dev) == allocated  # nothing left in the aborted capture's pool


@pytest.mark.cuda
def test_cuda_graphed_fallback_on_host_sync():
    dev = accel.device("cuda")

    def step(x):
        return x * x.sum().item()

    with pytest.raises(GraphCaptureError):
        graphs.graphed(step, (torch.ones(4, device=dev),))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        g = graphs.graphed(step, (torch.ones(4, device=dev),), fallback=True)
    assert not g.captured and _fallback_warnings(record)
    assert torch.equal(g(torch.full((4,), 2.0, device=dev)), torch.full((4,), 16.0, device=dev))
    assert not torch.cuda.is_current_stream_capturing()


@pytest.mark.cuda
def test_cuda_graphs_share_a_pool():
    dev = accel.device("cuda")
    pool = graphs.graph_pool_handle(dev)
    x = torch.ones(64, device=dev)
    a, b = graphs.Graph(dev, pool=pool), graphs.Graph(dev, pool=pool)
    with a:
        y = x + 1
    with b:
        z = y * 3
    a.replay()
    b.replay()
    torch.cuda.synchronize()
    assert torch.all(z == 6) and a.pool() == b.pool() == pool
