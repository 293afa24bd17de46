"""Fake graph capture on CPU: exercise :mod:`accel.graphs` capture, replay and abort logic without a GPU.

Inside :func:`fake_graph_capture`, CPU tensors count as a device with graph capture
backed by :class:`FakeGraph`, which records what a real graph would be asked to do
(capture on which stream, with which pool, replays, resets) and a fake allocator
that tracks which memory pools a capture left open. While a capture is underway,
``Tensor.item()`` behaves like it does under a CUDA stream capture: it invalidates
the capture and raises ``RuntimeError("... operation not permitted when stream is
capturing")``; ending an invalidated capture raises like CUDA does, without closing
the pool (torch leaves that to the caller).

A replay does not run the captured operators again (nothing was recorded): test
numerics on real devices.

Example:
    >>> import torch, accel.graphs
    >>> from accel.testing import fake_graph_capture
    >>> with fake_graph_capture() as log:
    ...     g = accel.graphs.graphed(lambda x: x + 1, (torch.zeros(2),), warmup=1)
    ...     out = g(torch.ones(2))
    >>> g.captured, log.replays, log.open_pools
    (True, 1, set())
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from accel.testing._standin import stand_in

__all__ = ["FakeGraph", "FakeGraphLog", "fake_graph_capture"]

_CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"
_INVALIDATED = "CUDA error: operation failed due to a previous error during capture"


@dataclass
class FakeGraphLog:
    """What the fake graphs and fake allocator were asked to do.

    Attributes:
        events: ``("begin", pool, mode)``, ``("end",)``, ``("end-failed",)``, ``("replay",)``,
            ``("reset",)``, ``("end_allocate", pool)``, ``("release", pool)`` in order.
        capture_streams: the current stream at each ``capture_begin``.
        open_pools: pools a capture routed allocations to and nobody closed yet.
        pool_refs: references held on each pool (taken at begin, given back on reset/release).
        capturing: the graph whose capture is underway, or ``None``.
        replays: completed replays.
    """

    events: list[tuple[Any, ...]] = field(default_factory=list)
    capture_streams: list[Any] = field(default_factory=list)
    open_pools: set[Any] = field(default_factory=set)
    pool_refs: dict[Any, int] = field(default_factory=dict)
    capturing: FakeGraph | None = None
    replays: int = 0


class FakeGraph:
    """A stand-in graph class: same methods as ``torch.cuda.CUDAGraph``, records instead of capturing."""

    def __init__(self, log: FakeGraphLog) -> None:
        self.log = log
        self.pool_id: Any = None
        self.state = "empty"  # empty | capturing | invalidated | captured

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if self.log.capturing is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing (nested capture)")
        self.pool_id = pool
        self.state = "capturing"
        self.log.capturing = self
        self.log.open_pools.add(pool)
        self.log.pool_refs[pool] = self.log.pool_refs.get(pool, 0) + 1
        self.log.capture_streams.append(torch.cpu.current_stream())
        self.log.events.append(("begin", pool, capture_error_mode))

    def capture_end(self) -> None:
        self.log.capturing = None
        if self.state == "invalidated":
            self.log.events.append(("end-failed",))
            self.state = "empty"
            raise RuntimeError(_INVALIDATED)  # like torch: raised before the pool is closed
        self.log.open_pools.discard(self.pool_id)
        self.state = "captured"
        self.log.events.append(("end",))

    def replay(self) -> None:
        if self.state != "captured":
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        self.log.replays += 1
        self.log.events.append(("replay",))

    def reset(self) -> None:
        if self.state == "captured":
            self.log.pool_refs[self.pool_id] -= 1
        self.state = "empty"
        self.log.events.append(("reset",))


def _fake_plan(log: FakeGraphLog, counter: Iterator[int]) -> Any:
    from accel.graphs import CapturePlan

    class _CpuPlan(CapturePlan):
        def __init__(self) -> None:
            self.device_type = "cpu"
            self.graph_name = "accel.testing.FakeGraph"
            self.graph_type = FakeGraph
            self.module = torch.cpu
            self.pool_handle_fn = lambda: (0, next(counter))
            self.end_allocate = self._end_allocate
            self.release_pool = self._release
            self._side_streams = {}

        def _end_allocate(self, index: int, pool: Any) -> None:
            if pool not in log.open_pools:
                raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
            log.open_pools.discard(pool)
            log.events.append(("end_allocate", pool))

        def _release(self, index: int, pool: Any) -> None:
            if pool not in log.pool_refs:
                raise RuntimeError("INTERNAL ASSERT FAILED: no private pool with this id")
            log.pool_refs[pool] -= 1
            log.events.append(("release", pool))

        def make_graph(self, pool: Any, mode: str | None) -> Any:
            return FakeGraph(log)

        def begin(self, graph: Any, pool: Any, mode: str | None) -> None:
            graph.capture_begin(pool=pool, capture_error_mode=mode or "global")

        def index_of(self, device: torch.device) -> int:
            return 0

        def device_guard(self, index: int) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

        def synchronize(self, index: int) -> None:
            pass

        def current_stream(self, index: int) -> Any:
            return torch.cpu.current_stream()

        def new_stream(self, index: int) -> Any:
            return torch.cpu.Stream()

    return _CpuPlan()


@contextlib.contextmanager
def fake_graph_capture() -> Iterator[FakeGraphLog]:
    """Make CPU tensors capturable by :mod:`accel.graphs` with :class:`FakeGraph`; yield the log.

    Yields:
        :class:`FakeGraphLog`, filled as graphs are captured, replayed and reset.

    .. note:: Side effects: patches ``accel.graphs.plan_for`` and ``torch.Tensor.item``
       until the block exits.
    """
    import accel.graphs as graphs

    log = FakeGraphLog()
    plan = _fake_plan(log, itertools.count(1))
    real_lookup = graphs.plan_for
    real_item = torch.Tensor.item

    def lookup(device: Any = None) -> tuple[Any, Any]:
        support, real_plan = real_lookup(device)
        if support.backend != "cpu":
            return support, real_plan
        return graphs.GraphSupport(
            True, "cpu graph capture through accel.testing.FakeGraph", "cpu", support.device,
            "accel.testing.FakeGraph",
        ), plan

    def item(self: torch.Tensor) -> Any:
        if log.capturing is not None:
            log.capturing.state = "invalidated"
            raise RuntimeError(_CAPTURE_ERROR)
        return real_item(self)

    with mock.patch.object(graphs, "plan_for", lookup), mock.patch.object(torch.Tensor, "item", stand_in(real_item, item)):
        yield log
