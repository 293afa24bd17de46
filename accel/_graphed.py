"""Graphed callables: a function's sample arguments become a graph's static buffers, later calls are matched to them.

:class:`GraphedCallable` is what :func:`accel.graphs.graphed` returns. Tensor arguments, also inside nested
lists and tuples, become static input buffers (detached copies); other values are baked into the graph, so a
later call must pass equal ones. The checks of ``graphed``'s own arguments live here too.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import torch

from accel.errors import GraphInputError


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


def static_copy(a: Any) -> Any:
    """``a`` with every tensor replaced by a detached copy (the static input buffers); other values kept."""
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    if isinstance(a, (list, tuple)):
        items = [static_copy(x) for x in a]
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
        graph: the :class:`accel.graphs.Graph` replayed (``None`` when eager).

    .. note:: Returned tensors are the graph's static outputs: the next call
       overwrites them. Clone what you keep. Autograd does not flow through the
       graph boundary (capture the whole step, backward and optimizer included).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        sample: tuple[Any, ...],
        *,
        graph: Any = None,
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


def check_flag(label: str, what: str, value: Any) -> None:
    """``value`` is a bool (``strict="no"`` would be truthy)."""
    if not isinstance(value, bool):
        raise GraphInputError(f"{label}: {what}={value!r:.60} ({type(value).__name__}) is not a bool. Pass "
                              f"{what}=True or {what}=False.")


def check_count(label: str, what: str, value: Any, minimum: int, meaning: str, example: int) -> None:
    """Raise :class:`GraphInputError` unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GraphInputError(
            f"{label}: {what}={value!r}. {what} is {meaning}, an int >= {minimum}. Pass e.g. {what}={example}."
        )


def positional_args(sample_args: Any, label: str, called_with: str) -> tuple[Any, ...]:
    """``sample_args`` as a tuple of positional arguments (a single tensor is wrapped); else GraphInputError."""
    if isinstance(sample_args, torch.Tensor):
        return (sample_args,)
    if isinstance(sample_args, (tuple, list)):
        return tuple(sample_args)
    raise GraphInputError(
        f"{label}: sample_args is {type(sample_args).__name__} {sample_args!r:.60}. sample_args is a tuple (or "
        f"list) of the positional arguments {called_with}, or a single tensor. Wrap it: (x,)."
    )


def sample_device(args: tuple[Any, ...], name: str) -> torch.device | None:
    devices = {a.device for a in _leaves(args)}
    if len(devices) > 1:
        raise GraphInputError(
            f"graphed {name}: sample_args hold tensors on several devices: "
            f"{', '.join(sorted(str(d) for d in devices))}. A graph runs on one device. "
            "Move every tensor argument to the same device."
        )
    return next(iter(devices), None)

