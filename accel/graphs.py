"""Portable graph capture: one API over ``torch.accelerator.Graph``, CUDA/HIP graphs and XPU graphs.

A launch-bound step (small batch, small model, decoding) spends most of its time
launching kernels. Capturing it once as a device graph and replaying the graph
launches all its kernels in one call. This module does that the same way on
every vendor, and says plainly where it cannot:

* :class:`Graph` captures the work of a ``with`` block; :meth:`Graph.replay` runs it again.
* :func:`graphed` turns a function of tensors into a callable that copies new
  inputs into static buffers and replays a captured graph (the warm-up on a side
  stream is done for you).
* :func:`is_supported` says whether this device has graph capture, and why.
* :func:`graph_pool_handle` makes a memory-pool id several graphs can share.
* :func:`compare_step_time` times a step eagerly and graphed (for demos and reports).

The graph class comes from the active backend's ``graph_class()`` hook, which asks
:mod:`accel._compat` what the running torch has: ``torch.accelerator.Graph`` (torch 2.12+), else
``torch.cuda.CUDAGraph`` (CUDA and ROCm builds), else ``torch.xpu.XPUGraph``.
MPS and CPU have no graph capture: :func:`graphed` then runs the function
eagerly and warns once (``strict=True`` raises :class:`GraphCaptureUnsupported`).

An operation that a graph cannot hold (``.item()`` and other host
synchronisations, a host-to-device copy from pageable memory, data-dependent
shapes) aborts the capture cleanly: the capture is closed, its memory pool
released, the previous current stream restored, and :class:`GraphCaptureError`
is raised (or, with ``graphed(..., fallback=True)``, the function runs eagerly).

Example:
    >>> import warnings, torch, accel.graphs
    >>> ok, why = accel.graphs.is_supported("cpu")
    >>> ok, why.startswith("CPU has no graph capture")
    (False, True)
    >>> def step(x):
    ...     return (x * 2).sum()
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # "runs eagerly" is said once per process
    ...     fast = accel.graphs.graphed(step, (torch.ones(4),))
    >>> fast(torch.ones(4)), fast.captured
    (tensor(8.), False)
"""

from __future__ import annotations

import contextlib
import numbers
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from accel import _caches, _compat
from accel._once import warn_once
from accel._options import check_choice
from accel._select import selection
from accel.backends import Backend
from accel.errors import (
    GraphCaptureError,
    GraphCaptureUnsupported,
    GraphFallbackWarning,
    GraphInputError,
    GraphStateError,
)

__all__ = [
    "CAPTURE_ERROR_MODES",
    "Graph",
    "GraphSupport",
    "GraphedCallable",
    "StepTimes",
    "compare_step_time",
    "graph_pool_handle",
    "graphed",
    "is_supported",
]

#: Reasons already warned about by :func:`graphed` (said once per process per reason).
_WARNED: set[str] = set()


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


_PLANS: dict[str, CapturePlan] = {}
_caches.on_clear(_PLANS.clear)  # a plan holds its backend's facts (ROCm and CUDA share the device type "cuda")


def plan_for(device: Any = None) -> tuple[GraphSupport, CapturePlan | None]:
    """The :class:`GraphSupport` of ``device`` and, when supported, its :class:`CapturePlan`.

    Never initialises a device runtime.
    """
    sel = selection(device)
    backend = sel.backend
    name, dev = backend.name, sel.device
    if backend.no_graphs_reason is not None:
        return GraphSupport(False, backend.no_graphs_reason, name, dev), None
    found = backend.graph_class()
    if found is None:
        wanted = backend.vendor_graph_class or f"a graph class for {dev.type!r}"
        return GraphSupport(
            False,
            f"torch {torch.__version__} has no graph class for {name} devices (neither torch.accelerator.Graph "
            f"nor {wanted}); upgrade torch to a build that has one",
            name,
            dev,
        ), None
    graph_name, graph_type = found
    plan = _PLANS.get(dev.type)
    if plan is None or plan.graph_type is not graph_type:
        plan = _PLANS[dev.type] = CapturePlan(backend, graph_name, graph_type)
    return GraphSupport(True, f"{name} graph capture through {graph_name}", name, dev, graph_name), plan


def is_supported(device: Any = None, /) -> GraphSupport:
    """Whether ``device`` has graph capture in the running torch, and why.

    Args:
        device: anything :func:`accel.device` accepts (``None``: the selected device).

    Returns:
        :class:`GraphSupport`; unpacks as ``(supported, reason)``.

    Raises:
        accel.errors.UnknownBackendError: ``device`` names no known backend.
        accel.errors.BackendUnavailableError: ``device`` names a backend that is not usable here.

    Example:
        >>> import accel.graphs
        >>> accel.graphs.is_supported("cpu").supported
        False
    """
    return plan_for(device)[0]


def graph_pool_handle(device: Any = None, /) -> Any:
    """A fresh memory-pool id that several graphs can share (pass it as ``pool=``).

    Graphs sharing a pool must be replayed in the order they were captured (their
    private memory overlaps). Backed by ``torch.cuda.graph_pool_handle`` (CUDA and
    ROCm) or ``torch.xpu.graph_pool_handle``.

    Args:
        device: anything :func:`accel.device` accepts (``None``: the selected device).

    Returns:
        An opaque pool id (a ``tuple[int, int]`` in current torch).

    Raises:
        GraphCaptureUnsupported: the device has no graph capture (MPS, CPU).
    """
    support, plan = plan_for(device)
    if plan is None or plan.pool_handle_fn is None:
        raise GraphCaptureUnsupported(
            f"graph_pool_handle: no graph memory pools on {support.device} ({support.reason}). "
            "Graph pools exist only where graph capture does. Call it only when "
            "accel.graphs.is_supported() is true."
        )
    return plan.pool_handle()


def _unsupported_error(what: str, support: GraphSupport) -> GraphCaptureUnsupported:
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


class Graph:
    """A device graph: capture the work of a ``with`` block once, :meth:`replay` it many times.

    Capture runs on a side stream that first waits for the current stream, so it
    works whichever stream is current (CUDA forbids capturing the default stream);
    the previous current stream is restored afterwards and waits for the capture
    stream. Replay runs on the current stream. Tensors created inside the block live
    in the graph's private memory pool and are rewritten by every replay.

    Args:
        device: anything :func:`accel.device` accepts (``None``: the selected device).
        pool: a pool id from :func:`graph_pool_handle` or another graph's :meth:`pool`
            to share memory with (``None``: a fresh private pool).
        capture_error_mode: ``"global"``, ``"thread_local"`` or ``"relaxed"`` (see
            ``cudaStreamCaptureMode``); ``None`` keeps the backend's default (global on
            CUDA/ROCm). Ignored by ``torch.xpu.XPUGraph``.

    Raises:
        GraphCaptureUnsupported: the device has no graph capture (MPS, CPU).
        GraphInputError: ``capture_error_mode`` is not one of :data:`CAPTURE_ERROR_MODES`, or ``pool`` is
            not a pool id (checked before the device is looked at).

    Example (on a CUDA, ROCm or XPU device)::

        x = torch.zeros(1000, device="cuda")
        g = accel.graphs.Graph()
        with g:
            x += 1
        g.replay()  # x is now 1 (capture does not run the work, replay does)

    .. note:: Entering the block synchronises the device.
    """

    def __init__(self, device: Any = None, /, *, pool: Any = None, capture_error_mode: str | None = None) -> None:
        _check_pool(pool, "accel.graphs.Graph")
        if capture_error_mode is not None:
            check_choice(capture_error_mode, CAPTURE_ERROR_MODES, what="accel.graphs.Graph: capture_error_mode",
                         error=GraphInputError, fix="None keeps the backend's default (global on CUDA/ROCm).")
        support, plan = plan_for(device)
        if plan is None:
            raise _unsupported_error("accel.graphs.Graph", support)
        self._init(support, plan, pool, capture_error_mode)

    def _init(self, support: GraphSupport, plan: CapturePlan, pool: Any, mode: str | None) -> None:
        self.device: torch.device = support.device
        self.graph_class: str = plan.graph_name
        self._plan = plan
        self._pool = self._user_pool = pool
        self._mode = mode
        self._graph: Any = None
        self._replayable: Any = None
        self._capture: tuple[Any, ...] | None = None

    @property
    def captured(self) -> bool:
        """Whether a capture has completed (the graph can be replayed)."""
        return self._replayable is not None

    def __enter__(self) -> Graph:
        if self._capture is not None or self._replayable is not None:
            raise GraphStateError(
                f"accel.graphs.Graph: capture started on a graph that is "
                f"{'capturing' if self._capture is not None else 'already captured'}. "
                "A graph holds one capture. Call reset() first, or create a new Graph."
            )
        plan = self._plan
        index = plan.index_of(self.device)
        pool = self._pool if self._pool is not None else plan.pool_handle()
        with contextlib.ExitStack() as stack:
            stack.enter_context(plan.device_guard(index))
            plan.synchronize(index)
            prev = plan.current_stream(index)
            side = plan.side_stream(index)
            side.wait_stream(prev)
            stack.enter_context(plan.stream_ctx(side))
            graph = plan.make_graph(pool, self._mode)
            try:
                plan.begin(graph, pool, self._mode)
            except RuntimeError as exc:
                stack.close()
                self._abandon(graph, index, pool, ended=False)
                raise GraphCaptureError(
                    f"accel.graphs.Graph: capture could not start on {self.device} ({self.graph_class}): "
                    f"{type(exc).__name__}: {exc}. Only one capture may be underway per stream, and not "
                    "inside another capture. Finish the other capture first."
                ) from exc
            self._graph = graph
            self._capture = (stack.pop_all(), index, pool, prev, side)
        self._pool = pool
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._capture is None:
            return None
        stack, index, pool, prev, side = self._capture
        self._capture = None
        plan, graph = self._plan, self._graph
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
            stack.close()  # previous current stream and device restored
            prev.wait_stream(side)
        if end_exc is None and exc is None:
            _say_again(said, drop_empty=False)  # a capture that completed: torch's own warnings stand
            self._replayable = graph
            return None
        _say_again(said, drop_empty=True)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            self._abandon(graph, index, pool, ended=end_exc is None)
        _say_again(said, drop_empty=True)
        if end_exc is None and not _mentions_capture(exc):
            return None  # an ordinary error in the user's code: propagate it unchanged
        cause = exc if exc is not None else end_exc
        raise GraphCaptureError(
            f"accel.graphs.Graph: capture aborted on {self.device} ({self.graph_class}): "
            f"{type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}. "
            "A graph cannot hold host synchronisations (.item(), .cpu(), .tolist(), printing a device "
            "tensor, synchronize()), host-to-device copies from pageable memory, or data-dependent shapes "
            "(nonzero, boolean masks). The capture was closed and its memory released; the device is "
            "usable. Move such operations out of the captured code, or use "
            "accel.graphs.graphed(..., fallback=True) to run it eagerly."
        ) from cause

    def _abandon(self, graph: Any, index: int, pool: Any, *, ended: bool) -> None:
        """Close what an aborted capture left open: allocator routing, the graph, the pool."""
        plan = self._plan
        if not ended and plan.end_allocate is not None and pool is not None:
            # torch ends pool routing only after the driver ends the capture; when the driver
            # reported the abort first, routing is still open. If torch did end it, it says
            # "not currently recording" (RuntimeError): nothing left to close.
            with contextlib.suppress(RuntimeError):
                plan.end_allocate(index, pool)
        graph.reset()  # forgets the capture; releases the pool when the capture had ended
        if not ended and plan.release_pool is not None and pool is not None:
            # The capture took a reference on the pool at begin; give it back. A pool torch
            # never created raises RuntimeError: nothing to release.
            with contextlib.suppress(RuntimeError):
                plan.release_pool(index, pool)
        self._graph = None
        self._pool = self._user_pool  # a pool made for this capture is gone; a given one stays

    def replay(self) -> None:
        """Run the captured work again, on the current stream (asynchronous, like any launch).

        Raises:
            GraphStateError: nothing has been captured yet.
        """
        g = self._replayable
        if g is None:
            raise GraphStateError(
                "accel.graphs.Graph.replay: this graph has no completed capture. A graph replays only "
                "what a `with graph:` block captured. Capture first (and check that the capture did not raise)."
            )
        g.replay()

    def reset(self) -> None:
        """Forget the captured graph (frees its memory pool once no other graph shares it)."""
        if self._capture is not None:
            raise GraphStateError(
                "accel.graphs.Graph.reset: called inside the `with graph:` block that is capturing. "
                "A capture must end before it is reset. Call reset() after the block."
            )
        if self._replayable is not None:
            self._replayable.reset()
        self._replayable = None
        self._graph = None
        self._pool = self._user_pool

    def pool(self) -> Any:
        """This graph's memory-pool id, to share with another graph (``Graph(pool=g.pool())``).

        Raises:
            GraphStateError: no pool yet (no capture started and none was given).
        """
        if self._pool is None:
            raise GraphStateError(
                "accel.graphs.Graph.pool: this graph has no memory pool yet. A pool is chosen when the "
                "capture starts. Capture first, or create the graph with pool=graph_pool_handle()."
            )
        return self._pool

    def __repr__(self) -> str:
        state = "captured" if self.captured else "capturing" if self._capture else "empty"
        return f"<accel.graphs.Graph {state} on {self.device} via {self.graph_class}>"


def _describe(a: Any) -> str:
    if isinstance(a, torch.Tensor):
        return f"a tensor of shape {tuple(a.shape)}, dtype {a.dtype} on {a.device}"
    return f"{type(a).__name__} {a!r:.80}"


# -- arguments: tensors (also inside lists/tuples) become static buffers; other values are baked in --------------
# A spec mirrors one sample argument: ("tensor", shape, dtype, device), ("seq", kind, (specs...)) for a list or
# tuple (namedtuples included), ("value", v) for anything else.
def _spec(a: Any) -> tuple[Any, ...]:
    if isinstance(a, torch.Tensor):
        return ("tensor", a.shape, a.dtype, a.device)
    if isinstance(a, (list, tuple)):
        return ("seq", type(a).__name__, tuple(_spec(x) for x in a))
    return ("value", a)


def _leaves(a: Any) -> list[torch.Tensor]:
    """The tensors of ``a``, depth first (the order static buffers are kept in)."""
    if isinstance(a, torch.Tensor):
        return [a]
    if isinstance(a, (list, tuple)):
        return [t for x in a for t in _leaves(x)]
    return []


def _static_copy(a: Any) -> Any:
    """``a`` with every tensor replaced by a detached copy (the static input buffers); other values kept."""
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    if isinstance(a, (list, tuple)):
        items = [_static_copy(x) for x in a]
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return type(a)(*items)  # a namedtuple
        if type(a) in (list, tuple):
            return type(a)(items)
        return list(items) if isinstance(a, list) else tuple(items)  # other subclasses: the plain container
    return a


def _is_nan(x: Any) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, numbers.Integral) and x != x


def _same_value(a: Any, v: Any) -> bool:
    """Whether a non-tensor argument ``a`` equals the captured ``v``: identity, then ``==`` of the same type.

    ``==`` must give a truth value (NumPy arrays compare elementwise: only the same array
    matches); an ``__eq__`` that raises counts as unequal; NaN equals NaN (a NaN baked
    into a graph is reproduced by any NaN).
    """
    if a is v:
        return True
    if type(a) is not type(v):
        return False  # 2 and 2.0 compare equal but a graph may have baked in int or float arithmetic
    try:
        equal = a == v
        if not isinstance(equal, bool):
            equal = bool(equal) if isinstance(equal, numbers.Number) else False  # np.bool_ yes; arrays no
    except Exception:  # noqa: BLE001 - a user type's __eq__ may raise anything; then the values do not match
        return False
    return equal or (_is_nan(a) and _is_nan(v))


class GraphedCallable:
    """What :func:`graphed` returns: call it like the function it wraps.

    When :attr:`captured`, each call checks the arguments against the sample
    (count; shape, dtype and device of tensors, also inside nested lists and tuples,
    which must have the sample's lengths; other values must equal the sample's, which
    the graph baked in), copies the tensors into the static input buffers, replays
    the graph and returns the static outputs. Otherwise it checks the same way (so a
    call that would fail on a device with graphs fails on the CPU too) and calls the
    function eagerly with the arguments as given.

    A non-tensor value matches when it is the sample's object, or of the same type
    and ``==`` to it (NaN matches NaN); an ``==`` that raises or gives no single
    truth value (NumPy arrays) matches only the same object.

    Attributes:
        captured: a graph is replayed (``False``: the function runs eagerly).
        reason: why (which graph class, or why it runs eagerly).
        static_inputs: the input buffers the graph reads (``()`` when eager).
        static_outputs: what the function returned during capture; every call
            rewrites these same tensors (``None`` when eager).
        graph: the :class:`Graph` (``None`` when eager).

    .. note:: Returned tensors are the graph's static outputs: the next call
       overwrites them. Clone what you keep. Autograd does not flow through the
       graph boundary (capture the whole step, backward and optimizer included).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        sample: tuple[Any, ...],
        *,
        graph: Graph | None = None,
        static_inputs: tuple[Any, ...] = (),
        static_outputs: Any = None,
        reason: str,
    ) -> None:
        self.fn = fn
        self.graph = graph
        self.captured = graph is not None
        self.reason = reason
        self.static_inputs = static_inputs
        self.static_outputs = static_outputs
        self._n = len(sample)
        self._specs = tuple(_spec(a) for a in sample)
        self._buffers = tuple(_leaves(tuple(static_inputs))) if graph is not None else ()
        self._replay = graph.replay if graph is not None else None

    def _mismatch(self, where: str, got: Any, want: str) -> GraphInputError:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return GraphInputError(
            f"graphed {name}: {where} is {_describe(got)}, but the graph was captured with {want}. "
            "A captured graph replays fixed shapes, dtypes, devices and non-tensor values. Pass a matching "
            "argument (pad or bucket inputs to the captured shape), or call accel.graphs.graphed() again "
            "with sample arguments of the new shape."
        )

    def _match(self, a: Any, spec: tuple[Any, ...], where: str, tensors: list[torch.Tensor]) -> None:
        """Check ``a`` against ``spec``; append its tensors to ``tensors`` in buffer order."""
        kind = spec[0]
        if kind == "tensor":
            _, shape, dtype, dev = spec
            if not isinstance(a, torch.Tensor) or a.shape != shape or a.dtype != dtype or a.device != dev:
                raise self._mismatch(where, a, f"a tensor of shape {tuple(shape)}, dtype {dtype} on {dev}")
            tensors.append(a)
        elif kind == "seq":
            _, type_name, items = spec
            if not isinstance(a, (list, tuple)) or len(a) != len(items):
                raise self._mismatch(where, a, f"a {type_name} of {len(items)} item(s)")
            for j, (x, s) in enumerate(zip(a, items)):
                self._match(x, s, f"{where}[{j}]", tensors)
        elif not _same_value(a, spec[1]):
            raise self._mismatch(where, a, f"{_describe(spec[1])} (baked into the graph)")

    def __call__(self, *args: Any) -> Any:
        if len(args) != self._n:
            name = getattr(self.fn, "__name__", type(self.fn).__name__)
            raise GraphInputError(
                f"graphed {name}: called with {len(args)} argument(s), but the graph was captured with "
                f"{self._n}. A graphed callable takes the same positional arguments as its sample_args. "
                "Pass exactly those."
            )
        tensors: list[torch.Tensor] = []
        match = self._match
        for i, (a, spec) in enumerate(zip(args, self._specs)):
            match(a, spec, f"argument {i}", tensors)
        replay = self._replay
        if replay is None:
            return self.fn(*args)
        for buf, a in zip(self._buffers, tensors):
            if a is not buf:
                buf.copy_(a)
        replay()
        return self.static_outputs

    def __repr__(self) -> str:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return f"<accel.graphs.GraphedCallable {name}: {'graph' if self.captured else 'eager'} ({self.reason})>"


#: The ``capture_error_mode`` values of a graph capture (``cudaStreamCaptureMode``).
CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")


def _check_pool(pool: Any, label: str) -> None:
    """``pool`` is ``None`` or a pool id (a ``(int, int)`` tuple, as ``graph_pool_handle()`` and ``Graph.pool()`` return)."""
    if pool is None or (isinstance(pool, tuple) and len(pool) == 2
                        and all(isinstance(v, int) and not isinstance(v, bool) for v in pool)):
        return
    raise GraphInputError(
        f"{label}: pool={pool!r:.80} ({type(pool).__name__}) is not a graph memory-pool id. A pool id is the "
        "(int, int) tuple accel.graphs.graph_pool_handle() or another Graph's pool() returns. Pass one of "
        "those, or None for a private pool."
    )


def _check_flag(label: str, what: str, value: Any) -> None:
    """``value`` is a bool (``strict="no"`` would be truthy)."""
    if not isinstance(value, bool):
        raise GraphInputError(f"{label}: {what}={value!r:.60} ({type(value).__name__}) is not a bool. Pass "
                              f"{what}=True or {what}=False.")


def _check_count(label: str, what: str, value: Any, minimum: int, meaning: str, example: int) -> None:
    """Raise :class:`GraphInputError` unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GraphInputError(
            f"{label}: {what}={value!r}. {what} is {meaning}, an int >= {minimum}. Pass e.g. {what}={example}."
        )


def _positional_args(sample_args: Any, label: str, called_with: str) -> tuple[Any, ...]:
    """``sample_args`` as a tuple of positional arguments (a single tensor is wrapped); else GraphInputError."""
    if isinstance(sample_args, torch.Tensor):
        return (sample_args,)
    if isinstance(sample_args, (tuple, list)):
        return tuple(sample_args)
    raise GraphInputError(
        f"{label}: sample_args is {type(sample_args).__name__} {sample_args!r:.60}. sample_args is a tuple (or "
        f"list) of the positional arguments {called_with}, or a single tensor. Wrap it: (x,)."
    )


def _sample_device(args: tuple[Any, ...], name: str) -> torch.device | None:
    devices = {a.device for a in _leaves(args)}
    if len(devices) > 1:
        raise GraphInputError(
            f"graphed {name}: sample_args hold tensors on several devices: "
            f"{', '.join(sorted(str(d) for d in devices))}. A graph runs on one device. "
            "Move every tensor argument to the same device."
        )
    return next(iter(devices), None)


def graphed(
    fn: Callable[..., Any],
    sample_args: Any,
    warmup: int = 3,
    *,
    strict: bool = False,
    fallback: bool = False,
    pool: Any = None,
) -> GraphedCallable:
    """Capture ``fn(*sample_args)`` as a graph; return a callable that replays it on new inputs.

    ``fn`` runs ``warmup`` times on a side stream (cuBLAS handles, autograd and
    optimizer state get created outside the capture), then once under capture.
    The capture runs on a copy of the tensor arguments (the static inputs). A
    whole training step can be captured: forward, ``loss.backward()`` and an
    optimizer created with ``capturable=True``; call ``zero_grad(set_to_none=True)``
    at the start of ``fn``.

    Args:
        fn: the step, a function of positional arguments.
        sample_args: a tuple of arguments (a single tensor is wrapped). Tensor
            arguments, also inside nested lists and tuples, fix the shapes, dtypes and
            device of every later call and are copied into static buffers; other
            values are baked into the graph (later calls must pass equal ones, see
            :class:`GraphedCallable`).
        warmup: eager runs before the capture (>= 0). They execute ``fn``, side effects included.
        strict: raise :class:`GraphCaptureUnsupported` where graphs are unsupported
            (MPS, CPU) instead of running eagerly with a one-time warning.
        fallback: when the capture aborts (an operation a graph cannot hold), run
            ``fn`` eagerly with a one-time warning instead of raising.
        pool: a memory-pool id from :func:`graph_pool_handle` to share.

    Returns:
        A :class:`GraphedCallable`; its ``captured`` attribute says whether it replays a graph.

    Raises:
        GraphCaptureUnsupported: ``strict=True`` and the device has no graph capture.
        GraphCaptureError: the capture aborted and ``fallback=False``.
        GraphInputError: bad ``sample_args``, ``warmup``, ``strict``, ``fallback`` (not bools) or ``pool``
            (not a pool id), before anything runs; later, calls whose arguments do not match.

    Example:
        >>> import warnings, torch, accel.graphs
        >>> with warnings.catch_warnings(record=True):
        ...     warnings.simplefilter("always")
        ...     double = accel.graphs.graphed(lambda x: x * 2, torch.ones(3))
        >>> double(torch.full((3,), 2.0))
        tensor([4., 4., 4.])
        >>> double(torch.ones(5))
        Traceback (most recent call last):
        ...
        accel.errors.GraphInputError: graphed <lambda>: argument 0 is a tensor of shape (5,), ...

    .. note:: On a device with graphs, synchronises the device and runs ``fn``
       ``warmup`` times.
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    if not callable(fn):
        raise GraphInputError(
            f"graphed: fn is {type(fn).__name__} {fn!r}, not callable. graphed() captures a function. "
            "Pass the step function (or an nn.Module)."
        )
    _check_count(f"graphed {name}", "warmup", warmup, 0, "the number of eager runs before capture", 3)
    _check_flag(f"graphed {name}", "strict", strict)
    _check_flag(f"graphed {name}", "fallback", fallback)
    _check_pool(pool, f"graphed {name}")
    args = _positional_args(sample_args, f"graphed {name}", "fn is called with")
    support, plan = plan_for(_sample_device(args, name))
    if plan is None:
        if strict:
            raise _unsupported_error(f"graphed {name} (strict=True)", support)
        reason = f"runs eagerly: {support.reason}"
        message = (f"accel.graphs.graphed: {support.reason}; functions run eagerly on {support.device} (same "
                   "results, no replay speed-up). Pass strict=True to make this an error.")
        warn_once(_WARNED, message, message, GraphFallbackWarning, stacklevel=2)
        return GraphedCallable(fn, args, reason=reason)

    static = tuple(_static_copy(a) for a in args)
    index = plan.index_of(support.device)
    with plan.device_guard(index):
        prev = plan.current_stream(index)
        side = plan.side_stream(index)
        side.wait_stream(prev)
        with plan.stream_ctx(side):
            for _ in range(warmup):
                fn(*static)
        prev.wait_stream(side)
        graph = Graph.__new__(Graph)
        graph._init(support, plan, pool, None)
        try:
            with graph:
                outputs = fn(*static)
        except GraphCaptureError as exc:
            if not fallback:
                raise
            message = f"accel.graphs.graphed: capture of {name} aborted, it runs eagerly (fallback=True): {exc}"
            warn_once(_WARNED, message, message, GraphFallbackWarning, stacklevel=2)
            return GraphedCallable(fn, args, reason=f"runs eagerly: capture aborted: {exc}")
    return GraphedCallable(
        fn, args, graph=graph, static_inputs=static, static_outputs=outputs, reason=support.reason
    )


@dataclass(frozen=True)
class StepTimes:
    """Wall-clock time of one step, eager and through :func:`graphed`.

    Attributes:
        eager_ms: mean ms per eager step.
        graphed_ms: mean ms per graphed step (an eager step where not captured).
        captured: whether the graphed step replayed a graph.
        reason: the graphed callable's reason (graph class, or why it ran eagerly).
        iters: steps timed per variant.
    """

    eager_ms: float
    graphed_ms: float
    captured: bool
    reason: str
    iters: int

    @property
    def speedup(self) -> float:
        """``eager_ms / graphed_ms`` (1.0 means no gain)."""
        return self.eager_ms / self.graphed_ms if self.graphed_ms > 0 else float("inf")


def compare_step_time(
    step: Callable[..., Any], sample_args: Sequence[Any] | torch.Tensor, *, iters: int = 50, warmup: int = 3
) -> StepTimes:
    """Time ``step(*sample_args)`` eagerly and through :func:`graphed` (for demos and reports).

    Each variant runs ``warmup`` untimed steps, then ``iters`` timed ones between two
    device synchronisations (host wall clock, ``time.perf_counter``). Where graphs
    are unsupported or the capture aborts, the graphed variant runs eagerly
    (``captured=False``; a one-time warning says why). For recorded numbers use
    ``benchmarks/graphs.py``.

    Args:
        step: the step function (it runs ``2 * (warmup + iters) + 1`` times: side effects!).
        sample_args: its positional arguments (tensors on one device), reused every step.
        iters: timed steps per variant (>= 1).
        warmup: untimed steps per variant (>= 0).

    Returns:
        :class:`StepTimes`.

    Raises:
        GraphInputError: ``iters < 1``, ``warmup < 0``, or ``sample_args`` not a tuple/list
            of arguments or a tensor; nothing ran.
        UnknownBackendError: the sample tensors are on a device no backend runs
            (``meta``); nothing ran.

    Example:
        >>> import warnings, torch, accel.graphs
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     t = accel.graphs.compare_step_time(lambda x: x @ x, (torch.eye(8),), iters=3)
        >>> t.captured, t.eager_ms > 0, t.graphed_ms > 0
        (False, True, True)

    .. note:: Initialises the device runtime and synchronises it.
    """
    _check_count("compare_step_time", "iters", iters, 1, "the number of timed steps", 50)
    _check_count("compare_step_time", "warmup", warmup, 0, "the number of untimed steps", 3)
    args = _positional_args(sample_args, "compare_step_time", "the step is called with")
    dev = _sample_device(args, getattr(step, "__name__", "step")) or selection().device
    dev = plan_for(dev)[0].device  # a device no backend runs (meta) raises here, before any step
    sync = _compat.device_module(dev.type).synchronize  # torch.cpu.synchronize returns at once

    def timed(call: Callable[..., Any]) -> float:
        for _ in range(warmup):
            call(*args)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            call(*args)
        sync()
        return (time.perf_counter() - t0) * 1e3 / iters

    eager_ms = timed(step)
    fast = graphed(step, args, warmup=warmup, fallback=True)
    graphed_ms = timed(fast)
    return StepTimes(eager_ms, graphed_ms, fast.captured, fast.reason, iters)
