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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from accel import _caches, _compat
# the public face is here; how a capture begins, ends and aborts is in _graph_capture, argument matching in _graphed
from accel._graph_capture import Capture, CapturePlan, GraphSupport
from accel._graph_capture import check_pool as _check_pool
from accel._graph_capture import unsupported_error as _unsupported_error
from accel._graphed import GraphedCallable
from accel._graphed import check_count as _check_count
from accel._graphed import check_flag as _check_flag
from accel._graphed import positional_args as _positional_args
from accel._graphed import sample_device as _sample_device
from accel._graphed import static_copy as _static_copy
from accel._once import warn_once
from accel._options import check_choice
from accel._select import selection
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

#: The ``capture_error_mode`` values of a graph capture (``cudaStreamCaptureMode``).
CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")

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
        self._replayable: Any = None
        self._capture: Capture | None = None

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
        pool = self._pool if self._pool is not None else self._plan.pool_handle()
        self._capture = Capture(self._plan, self.device, pool, self._mode)
        self._pool = pool
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        capture, self._capture = self._capture, None
        if capture is None:
            return None
        graph = None
        try:
            graph = capture.end(exc)  # None: an ordinary error in the user's code, which propagates unchanged
        finally:
            self._replayable = graph
            if graph is None:
                self._pool = self._user_pool  # a pool made for this capture is gone; a given one stays
        return None

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
