"""How one graph capture begins, ends and is abandoned on a device: the machinery under :mod:`accel.graphs`.

:class:`CapturePlan` holds what capturing on one device type needs: the graph class, and the device
module's stream and caching-allocator functions (from the active backend's hooks). :class:`Capture` is one
capture underway: it begins on a side stream that waits for the current one, ends on that stream, and when
the capture aborts it closes what the abort left open (the allocator's routing into the pool, the graph,
the pool's reference), so the device stays usable and :class:`~accel.errors.GraphCaptureError` says why.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from accel.backends import Backend
from accel.errors import GraphCaptureError, GraphCaptureUnsupported, GraphInputError


@dataclass(frozen=True)
class GraphSupport:
    """Whether a device has graph capture, and why.

    Unpacks as ``(supported, reason)`` and is truthy when supported.

    Attributes:
        supported: graph capture can be used on :attr:`device`.
        reason: one line saying why (also when supported: which graph class).
        backend: accel backend name (``"cuda"``, ``"rocm"``, ``"xpu"``, ``"mps"``, ``"cpu"``).
        device: the ``torch.device`` asked about.
        graph_class: qualified name of the graph class used (``"torch.cuda.CUDAGraph"``), or ``None``.
    """

    supported: bool
    reason: str
    backend: str
    device: torch.device
    graph_class: str | None = None

    def __bool__(self) -> bool:
        return self.supported

    def __iter__(self):
        yield self.supported
        yield self.reason


class CapturePlan:
    """How to capture on one device type: the graph class and the stream/allocator functions.

    Not part of the public API (not in ``__all__``); :mod:`accel.testing` subclasses it to fake graph capture on CPU.
    """

    def __init__(self, backend: Backend, graph_name: str, graph_type: type) -> None:
        self.device_type = backend.torch_device_type
        self.graph_name = graph_name
        self.graph_type = graph_type
        self.module = backend.device_module()
        self.default_mode = backend.graph_capture_error_mode
        self.pool_handle_fn, self.end_allocate, self.release_pool = backend.graph_pool_functions()
        self._side_streams: dict[int, Any] = {}

    # graph construction and capture start differ per class
    def make_graph(self, pool: Any, mode: str | None) -> Any:
        if self.graph_name == "torch.accelerator.Graph":
            return self.graph_type(pool=pool, capture_error_mode=mode or "default")
        return self.graph_type()

    def begin(self, graph: Any, pool: Any, mode: str | None) -> None:
        if self.graph_name == "torch.accelerator.Graph":
            graph.capture_begin()  # pool and mode were given at construction
        elif self.default_mode is not None:  # the vendor class takes a mode (CUDA graphs: "global")
            graph.capture_begin(pool=pool, capture_error_mode=mode or self.default_mode)
        else:  # a vendor class without capture modes (torch.xpu.XPUGraph)
            graph.capture_begin(pool=pool)

    def pool_handle(self) -> Any:
        if self.pool_handle_fn is None:
            return None
        return self.pool_handle_fn()

    # device and streams
    def index_of(self, device: torch.device) -> int:
        return device.index if device.index is not None else int(self.module.current_device())

    def device_guard(self, index: int) -> contextlib.AbstractContextManager:
        return self.module.device(index)

    def synchronize(self, index: int) -> None:
        self.module.synchronize(index)

    def current_stream(self, index: int) -> Any:
        return self.module.current_stream(index)

    def stream_ctx(self, stream: Any) -> contextlib.AbstractContextManager:
        return self.module.stream(stream)

    def new_stream(self, index: int) -> Any:
        return self.module.Stream(device=index)

    def side_stream(self, index: int) -> Any:
        """The stream warm-ups and captures run on (one per device, reused so pools can be shared)."""
        s = self._side_streams.get(index)
        if s is None:
            s = self._side_streams[index] = self.new_stream(index)
        return s


def check_pool(pool: Any, label: str) -> None:
    """``pool`` is ``None`` or a pool id (a ``(int, int)`` tuple, as ``graph_pool_handle()`` and ``Graph.pool()`` return)."""
    if pool is None or (isinstance(pool, tuple) and len(pool) == 2
                        and all(isinstance(v, int) and not isinstance(v, bool) for v in pool)):
        return
    raise GraphInputError(
        f"{label}: pool={pool!r:.80} ({type(pool).__name__}) is not a graph memory-pool id. A pool id is the "
        "(int, int) tuple accel.graphs.graph_pool_handle() or another Graph's pool() returns. Pass one of "
        "those, or None for a private pool."
    )


def unsupported_error(what: str, support: GraphSupport) -> GraphCaptureUnsupported:
    return GraphCaptureUnsupported(
        f"{what}: graph capture is unsupported on {support.device} ({support.reason}). "
        "Only CUDA, ROCm and XPU devices have graphs. Check accel.graphs.is_supported() first, or use "
        "accel.graphs.graphed(..., strict=False), which runs the function eagerly there."
    )


def _mentions_capture(exc: BaseException | None) -> bool:
    return isinstance(exc, Exception) and "captur" in str(exc).lower()


#: torch's warning from ``capture_end`` when a capture recorded nothing (``CUDAGraph``: "The CUDA Graph is
#: empty. This usually means that the graph was attempted to be captured on wrong device or stream.").
_EMPTY_GRAPH = re.compile(r"\bgraph is empty\b", re.IGNORECASE)


def _say_again(said: list[warnings.WarningMessage], *, drop_empty: bool) -> None:
    """Re-issue warnings held back around ``capture_end`` (where torch issued them, through the user's
    filters), leaving out torch's empty-graph warning when ``drop_empty``: an aborted capture is empty
    because it aborted, and accel reports the abort itself."""
    for w in said:
        if drop_empty and _EMPTY_GRAPH.search(str(w.message)):
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


class Capture:
    """One capture underway on ``plan``, begun on the device's side stream (which first waits for the current stream).

    CUDA forbids capturing the default stream, so a capture runs on a side stream whichever stream is
    current; :meth:`end` restores the previous current stream and device, and makes that stream wait for
    the capture stream.

    Args:
        plan: the device type's :class:`CapturePlan`.
        device: the device captured on.
        pool: the memory-pool id the capture allocates from.
        mode: the ``capture_error_mode`` (``None``: the graph class's default).

    Raises:
        GraphCaptureError: the capture could not begin (another capture underway on the stream); what began
            was closed.

    .. note:: Synchronises the device.
    """

    def __init__(self, plan: CapturePlan, device: torch.device, pool: Any, mode: str | None) -> None:
        self.plan, self.device, self.pool = plan, device, pool
        self.index = index = plan.index_of(device)
        with contextlib.ExitStack() as stack:
            stack.enter_context(plan.device_guard(index))
            plan.synchronize(index)
            self.prev = plan.current_stream(index)
            self.side = plan.side_stream(index)
            self.side.wait_stream(self.prev)
            stack.enter_context(plan.stream_ctx(self.side))
            self.graph = plan.make_graph(pool, mode)
            try:
                plan.begin(self.graph, pool, mode)
            except RuntimeError as exc:
                stack.close()
                self.abandon(ended=False)
                raise GraphCaptureError(
                    f"accel.graphs.Graph: capture could not start on {device} ({plan.graph_name}): "
                    f"{type(exc).__name__}: {exc}. Only one capture may be underway per stream, and not "
                    "inside another capture. Finish the other capture first."
                ) from exc
            self._stack = stack.pop_all()

    def end(self, exc: BaseException | None) -> Any:
        """End the capture (the ``with`` block ended, raising ``exc`` or not) and restore the previous stream.

        Args:
            exc: what the captured block raised (``None``: it completed).

        Returns:
            The captured vendor graph, ready to replay; ``None`` when the block raised an error that has
            nothing to do with capture (the capture was abandoned; the caller lets that error propagate).

        Raises:
            GraphCaptureError: the capture aborted (an operation a graph cannot hold); it was closed and its
                memory released.
        """
        plan, graph, side = self.plan, self.graph, self.side
        end_exc: RuntimeError | None = None
        try:
            # End on the capture stream even if the block changed the current stream. torch's warnings
            # from capture_end are held back: an aborted capture's "The CUDA Graph is empty" is accel's to
            # report (one GraphCaptureError, or graphed's one fallback warning), not a second warning.
            with warnings.catch_warnings(record=True) as said, plan.stream_ctx(side):
                warnings.simplefilter("always")
                graph.capture_end()
        except RuntimeError as e:
            end_exc = e
        finally:
            self._stack.close()  # previous current stream and device restored
            self.prev.wait_stream(side)
        if end_exc is None and exc is None:
            _say_again(said, drop_empty=False)  # a capture that completed: torch's own warnings stand
            return graph
        _say_again(said, drop_empty=True)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            self.abandon(ended=end_exc is None)
        _say_again(said, drop_empty=True)
        if end_exc is None and not _mentions_capture(exc):
            return None  # an ordinary error in the user's code: propagate it unchanged
        cause = exc if exc is not None else end_exc
        raise GraphCaptureError(
            f"accel.graphs.Graph: capture aborted on {self.device} ({plan.graph_name}): "
            f"{type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}. "
            "A graph cannot hold host synchronisations (.item(), .cpu(), .tolist(), printing a device "
            "tensor, synchronize()), host-to-device copies from pageable memory, or data-dependent shapes "
            "(nonzero, boolean masks). The capture was closed and its memory released; the device is "
            "usable. Move such operations out of the captured code, or use "
            "accel.graphs.graphed(..., fallback=True) to run it eagerly."
        ) from cause

    def abandon(self, *, ended: bool) -> None:
        """Close what an aborted capture left open: allocator routing, the graph, the pool."""
        plan, index, pool = self.plan, self.index, self.pool
        if not ended and plan.end_allocate is not None and pool is not None:
            # torch ends pool routing only after the driver ends the capture; when the driver
            # reported the abort first, routing is still open. If torch did end it, it says
            # "not currently recording" (RuntimeError): nothing left to close.
            with contextlib.suppress(RuntimeError):
                plan.end_allocate(index, pool)
        self.graph.reset()  # forgets the capture; releases the pool when the capture had ended
        if not ended and plan.release_pool is not None and pool is not None:
            # The capture took a reference on the pool at begin; give it back. A pool torch
            # never created raises RuntimeError: nothing to release.
            with contextlib.suppress(RuntimeError):
                plan.release_pool(index, pool)
