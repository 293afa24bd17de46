"""The kernel registry: which override of which ATen op is installed where, and its state.

One :class:`_Override` per :func:`register` call. Overrides of one ATen op at one
dispatch key form a *slot*; a slot is installed by one of two paths:

- ``"native"``: torch's own native DSL registry (``torch._native``, torch 2.13+),
  reached only through :func:`accel._compat.native_dsl_registry`, so
  ``torch.backends.python_native`` switches accel's kernels like upstream ones;
- ``"accel"``: accel's router (:mod:`accel.kernels._router`): a ``torch.library``
  kernel at the backend key that redispatches to the captured ATen kernel.

Both paths call the same :meth:`_Override.accept` (cond, fail-safe deny list) and
:meth:`_Override.run` (impl, fail-safe, ``ACCEL_KERNELS_VERIFY``), so behaviour is
identical; only who owns the dispatcher registration differs.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from accel import _compat
from accel.errors import KernelFallbackWarning, KernelRegistrationError, KernelRegistrationWarning, UnknownKernelError

from . import _plans, _tolerance, _tuning

__all__ = [
    "Explanation",
    "OverrideInfo",
    "disable",
    "disabled",
    "enable",
    "explain",
    "overrides",
    "register",
    "registry_path",
    "reset_counters",
    "set_verify",
    "unregister",
    "use_registry",
]

#: Environment variable: ``1`` runs ATen beside every routed call and records the max error.
VERIFY_ENV = "ACCEL_KERNELS_VERIFY"
#: Environment variable: ``auto`` (default), ``native`` or ``accel``: which registration path to use.
REGISTRY_ENV = "ACCEL_KERNELS_REGISTRY"
_PATHS = ("auto", "native", "accel")

_LOCK = threading.RLock()
_MEMO_LOCK = threading.Lock()  # only on memo misses and table changes, never on a memo hit
_UNSET = object()


# --------------------------------------------------------------------------- ops
@dataclass(frozen=True)
class _Op:
    """A resolved operator overload: ``aten::_fused_rms_norm`` (overload ``default``)."""

    namespace: str
    name: str
    overload: str
    packet: Any = field(repr=False, compare=False)

    @property
    def qualname(self) -> str:
        """``aten::name`` or ``aten::name.overload`` (overload omitted when ``default``)."""
        return f"{self.namespace}::{self.symbol}"

    @property
    def symbol(self) -> str:
        """``name`` or ``name.overload``: what ``torch.library`` and ``torch._native`` call it."""
        return self.name if self.overload == "default" else f"{self.name}.{self.overload}"

    @property
    def overload_fn(self) -> Any:
        return getattr(self.packet, self.overload)


def _tensor_overloads(packet: Any) -> list[str]:
    """Overloads of ``packet`` that take a tensor and are not ``out=`` variants (TorchScript scalar ones excluded)."""
    found = []
    for overload in packet.overloads():
        args = getattr(packet, overload)._schema.arguments
        if any("Tensor" in str(a.type) for a in args) and not any(a.is_out for a in args):
            found.append(overload)
    return found


def _bare_overload(ns: str, name: str, packet: Any, error: type[Exception]) -> str:
    """The overload an op name without one means: ``default`` when it is the only tensor overload, else an error.

    ``aten::sin`` means ``sin.default`` (``sin.out`` and the TorchScript ``sin.int``
    do not count); ``aten::add`` is ambiguous: ``add.default`` is TorchScript's
    ``add(Scalar, Scalar)``, which tensor calls never reach.
    """
    overloads = packet.overloads()
    tensor = _tensor_overloads(packet)
    if tensor == ["default"] or (len(overloads) == 1 and overloads[0] == "default"):
        return "default"
    example = f"'{ns}::{name}.{tensor[0] if tensor else overloads[0]}'"
    raise error(f"accel.kernels: op '{ns}::{name}' names no single overload: it has {', '.join(overloads)} "
                f"(taking tensors, not out=: {', '.join(tensor) or 'none'}) and none is 'default'. Name one, e.g. "
                f"{example} or torch.ops.{ns}.{name}.{tensor[0] if tensor else overloads[0]}.")


def _resolve_op(op: object, *, error: type[Exception] = UnknownKernelError) -> _Op:
    """``"aten::_fused_rms_norm"``, ``"_fused_rms_norm"``, ``"aten::add.Tensor"`` or an OpOverload -> :class:`_Op`.

    A name (or OpOverloadPacket) without an overload must be unambiguous; see :func:`_bare_overload`.
    """
    if isinstance(op, torch._ops.OpOverload):
        ns, _, name = op._schema.name.partition("::")
        return _Op(ns, name, op._overloadname, getattr(getattr(torch.ops, ns), name))
    if isinstance(op, torch._ops.OpOverloadPacket):
        ns, _, name = op._qualified_op_name.partition("::")
        return _Op(ns, name, _bare_overload(ns, name, op, error), op)
    if not isinstance(op, str) or not op.strip():
        raise error(f"accel.kernels: op {op!r} is not an operator. Pass a name such as 'aten::_fused_rms_norm' "
                    f"or an OpOverload such as torch.ops.aten._fused_rms_norm.default.")
    ns, sep, rest = op.strip().partition("::")
    if not sep:
        ns, rest = "aten", ns
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        if overload:
            getattr(packet, overload)
    except (AttributeError, RuntimeError) as exc:
        raise error(f"accel.kernels: unknown op {op!r} ({type(exc).__name__}: {exc}). The op must exist in "
                    f"torch.ops (e.g. 'aten::_fused_rms_norm'). Check the spelling and the overload name.") from None
    return _Op(ns, name, overload or _bare_overload(ns, name, packet, error), packet)


def _shape_key(args: Sequence[Any]) -> tuple:
    """Shapes and dtypes of the tensor arguments: what the fail-safe deny list is keyed by."""
    return tuple((tuple(a.shape), a.dtype) for a in args if isinstance(a, torch.Tensor))


def _describe_shapes(args: Sequence[Any]) -> str:
    parts = [f"{list(a.shape)} {str(a.dtype).removeprefix('torch.')}" for a in args if isinstance(a, torch.Tensor)]
    return ", ".join(parts) or "no tensor arguments"


def _truth(result: Any) -> tuple[bool, str | None]:
    """``bool(result)``, or ``(False, problem)`` when ``result`` has no truth value (a 3-element tensor, an array)."""
    try:
        return bool(result), None
    except Exception as exc:  # noqa: BLE001 - __bool__ of a user's object may raise anything
        return False, f"returned {type(result).__name__}, which is not a bool ({type(exc).__name__}: {exc})"


#: Schema return types the cheap output check knows, and how messages name them.
_RETURN_KINDS = {"Tensor": "a Tensor", "List[Tensor]": "a list of Tensors"}


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _output_check(op: _Op) -> Callable[[Any], str | None] | None:
    """A per-call check that an impl's result is structured like ``op``'s, or ``None`` when nothing is checkable.

    Checked: the number of outputs, and that a ``Tensor`` output is a tensor (``None``
    only inside a multi-output result, where ATen returns it for an undefined tensor)
    and a ``Tensor[]`` output a list or tuple of tensors. Shapes and dtypes are not
    checked here (that needs ATen's result: ``ACCEL_KERNELS_VERIFY=1``). The returned
    function gives ``None`` when the result fits, else a phrase for the warning.
    """
    kinds = tuple(_RETURN_KINDS.get(str(r.type)) for r in op.overload_fn._schema.returns)
    if not any(kinds):
        return None
    q, tensor = op.qualname, torch.Tensor

    def misfit(kind: str, value: Any, where: str) -> str | None:
        if kind == "a Tensor":
            return None if isinstance(value, tensor) else f"{where} {_type_name(value)} where {q} returns {kind}"
        if not isinstance(value, (list, tuple)):
            return f"{where} {_type_name(value)} where {q} returns {kind}"
        for i, v in enumerate(value):
            if not isinstance(v, tensor):
                return f"output {i} is {_type_name(v)} where {q} returns {kind}"
        return None

    if kinds == ("a Tensor",):  # the common case, kept to one isinstance
        def check_tensor(out: Any) -> str | None:
            return None if isinstance(out, tensor) else f"returned {_type_name(out)} where {q} returns a Tensor"
        return check_tensor
    if len(kinds) == 1:
        return lambda out: misfit(kinds[0], out, "returned")
    n = len(kinds)

    def describe(out: Any) -> str | None:
        if not isinstance(out, (tuple, list)):
            return f"returned {_type_name(out)} where {q} returns {n} outputs"
        if len(out) != n:
            return f"returned {len(out)} outputs where {q} returns {n}"
        for i, (kind, value) in enumerate(zip(kinds, out)):
            if kind is not None and value is not None:
                problem = misfit(kind, value, f"output {i} is")
                if problem is not None:
                    return problem
        return None

    if any(k not in ("a Tensor", None) for k in kinds):
        return describe
    positions = tuple(i for i, k in enumerate(kinds) if k is not None)

    def check_outputs(out: Any) -> str | None:  # fast path: a tuple of tensors (or None, undefined)
        if (type(out) is tuple or type(out) is list) and len(out) == n:
            for i in positions:
                v = out[i]
                if v is not None and not isinstance(v, tensor):
                    return describe(out)
            return None
        return describe(out)

    return check_outputs


# --------------------------------------------------------------------- state
class _State:
    verify: bool = os.environ.get(VERIFY_ENV, "").strip() == "1"
    path_mode: str | None = None  # None: read REGISTRY_ENV at first use
    disabled_all: bool = False
    disabled: dict[str, set[str]] = {"op": set(), "dsl": set(), "backend": set(), "name": set()}
    #: Filters held by active :func:`disabled` blocks, counted: ``(kind, value)`` or ``("all", None)`` ->
    #: number of blocks holding it (kept apart from :func:`disable`'s, which a block never undoes).
    held: dict[tuple[str, Any], int] = {}
    #: ``(forward op, key)`` pairs already warned about as unable to train (:func:`_check_training`).
    orphans: set[tuple[str, str]] = set()


def _filters_in_force() -> tuple[bool, dict[str, set[str]]]:
    """``(all disabled, filters by kind)``: :func:`disable`'s plus those held by active :func:`disabled` blocks."""
    held = _STATE.held
    kinds = {kind: values | {v for (k, v), n in held.items() if k == kind and n > 0}
             for kind, values in _STATE.disabled.items()}
    return _STATE.disabled_all or held.get(("all", None), 0) > 0, kinds


_STATE = _State()


def set_verify(enabled: bool | None = None, /) -> bool:
    """Turn verification of routed calls on or off; returns the previous setting.

    With verification on, every routed call also runs the ATen kernel, records the
    max absolute error in :func:`overrides` (``verified``, ``max_error``) and, when
    the results disagree beyond the per-dtype tolerance of
    :mod:`accel.kernels._tolerance` (or differ in structure, shape, dtype or device,
    or cannot be compared), warns (:class:`~accel.errors.KernelFallbackWarning`),
    returns ATen's result and routes that shape to ATen from then on.

    Args:
        enabled: ``True``/``False``; ``None`` re-reads ``ACCEL_KERNELS_VERIFY`` (``"1"`` means on).

    Returns:
        The previous setting.
    """
    previous = _STATE.verify
    _STATE.verify = os.environ.get(VERIFY_ENV, "").strip() == "1" if enabled is None else bool(enabled)
    return previous


# ------------------------------------------------------------------ overrides
class _Override:
    """One registration. Counters are plain ints (updated without a lock: cheap, approximate under threads)."""

    __slots__ = ("name", "op", "dsl", "backends", "keys", "impl", "cond", "fallback", "routed", "declined",
                 "failed", "verified", "max_error", "denied", "cond_warned", "native_nodes", "order", "check",
                 "cacheable", "plans", "plans_gen")

    def __init__(self, name: str, op: _Op, dsl: str, backends: tuple[str, ...], keys: dict[str, str],
                 impl: Callable, cond: Callable | None, fallback: Callable | None, order: int) -> None:
        self.name, self.op, self.dsl, self.backends, self.keys = name, op, dsl, backends, keys
        self.impl, self.cond, self.fallback, self.order = impl, cond, fallback, order
        self.routed = self.declined = self.failed = self.verified = 0
        self.max_error = 0.0
        self.denied: set[tuple] = set()
        self.cond_warned = False
        self.native_nodes: dict[str, Any] = {}
        self.check = _output_check(op)
        #: the cond's answers by argument signature (:mod:`accel.kernels._plans`), where it promises
        #: they depend on nothing else; emptied on a deny and when the tuning tables change
        self.cacheable = cond is not None and getattr(cond, "cacheable", False) is True
        self.plans: dict[tuple, Any] = {}
        self.plans_gen = -1

    # -- the per-call path (keep lean: no dict building, no inspect) ------------
    def take(self, args: tuple, kwargs: dict, sig: Any = _UNSET) -> Callable | None:
        """The function that answers this call (the impl, or its plan for this signature), or ``None``
        where the override declines it, or :data:`accel.kernels._plans.FALLBACK` where planning failed
        (the fail-safe has warned and denied the shape: the caller returns ATen's result, as for an
        impl that raises). ``sig``: :func:`accel.kernels._plans.signature` of ``args`` when the caller
        has it (accel's router computes it once for all overrides of a call)."""
        if not self.cacheable or kwargs:
            return self.impl if self.accept(args, kwargs) else None
        if sig is _UNSET:
            sig = _plans.signature(args)
        if sig is None:
            return self.impl if self.accept(args, kwargs) else None
        plans = self.plans
        gen = _tuning.GENERATION
        if self.plans_gen != gen:
            with _MEMO_LOCK:  # ordered with _remember's check-and-store
                plans.clear()
                self.plans_gen = gen
        try:
            hit = plans.get(sig)
        except TypeError:  # an unhashable argument: no memo for this call
            return self.impl if self.accept(args, kwargs) else None
        if hit is not None:
            if hit is _plans.DECLINE:
                self.declined += 1
                return None
            return hit
        if not self.accept(args, kwargs):
            self._remember(sig, _plans.DECLINE, gen)
            return None
        try:
            fn = _plans.plan_of(self.impl, args)
        except Exception as exc:  # noqa: BLE001 - as an impl raising: fall back, never crash
            self._deny(args, f"raised {type(exc).__name__} while planning: {exc}")
            return _plans.FALLBACK
        if not callable(fn):
            self._deny(args, f"planned {_type_name(fn)}, not a function answering the call")
            return _plans.FALLBACK
        self._remember(sig, fn, gen)
        return fn

    def planned(self, args: tuple, kwargs: dict) -> Callable | None:
        """What :meth:`take` memoised for this call's signature (a plan or the impl), else ``None``.
        No cond runs and nothing is counted (torch's native registry asks the cond, then calls the impl)."""
        if not self.cacheable or kwargs:
            return None
        sig = _plans.signature(args)
        try:
            hit = None if sig is None else self.plans.get(sig)
        except TypeError:
            return None
        return None if hit is _plans.DECLINE else hit

    def _remember(self, sig: tuple, answer: Any, gen: int) -> None:
        """Keep ``answer`` for ``sig`` unless the tuning tables changed since the cond read them (generation
        ``gen``): an answer computed against an older table must not outlive the change."""
        with _MEMO_LOCK:  # a table change between the check and the store would keep a stale answer
            if gen != _tuning.GENERATION or self.plans_gen != gen:
                return
            if len(self.plans) >= _plans.MAX_ENTRIES:
                self.plans.clear()
            self.plans[sig] = answer

    def accept(self, args: tuple, kwargs: dict) -> bool:
        """Whether this override takes the call: not a failed shape, and ``cond`` says yes."""
        if self.denied and _shape_key(args) in self.denied:
            self.declined += 1
            return False
        cond = self.cond
        if cond is None:
            return True
        try:
            ok = cond(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a cond bug must never crash the user's model
            return self._cond_failed(args, f"raised {type(exc).__name__}: {exc}")
        if ok is True:
            return True
        if ok is not False:  # a tensor, an array, an object: its truth value may not exist
            ok, problem = _truth(ok)
            if problem is not None:
                return self._cond_failed(args, problem)
            if ok:
                return True
        self.declined += 1
        return False

    def _cond_failed(self, args: tuple, problem: str) -> bool:
        self.declined += 1
        if not self.cond_warned:
            self.cond_warned = True
            warnings.warn(f"accel.kernels: cond of {self.name!r} for {self.op.qualname} {problem} (inputs: "
                          f"{_describe_shapes(args)}). Treated as False: ATen runs. Fix the cond: it must return "
                          f"a bool and not raise.", KernelFallbackWarning, stacklevel=3)
        return False

    def run(self, args: tuple, kwargs: dict, call_aten: Callable, fn: Callable | None = None) -> Any:
        """Run ``fn`` (what :meth:`take` returned; default the impl); on an exception (or, when verifying,
        a wrong answer) return ATen's result instead."""
        try:
            out = (fn or self.impl)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - compile failures, unsupported shapes: fall back, never crash
            self._deny(args, f"raised {type(exc).__name__}: {exc}")
            return call_aten(*args, **kwargs)
        check = self.check
        if check is not None:
            problem = check(out)
            if problem is not None:
                self._deny(args, problem)
                return call_aten(*args, **kwargs)
        self.routed += 1
        if _STATE.verify:
            return self._verify(out, args, kwargs, call_aten)
        return out

    def _verify(self, out: Any, args: tuple, kwargs: dict, call_aten: Callable) -> Any:
        ref = call_aten(*args, **kwargs)
        try:
            err, problem = _tolerance.compare(out, ref)
        except Exception as exc:  # noqa: BLE001 - an uncomparable result is a wrong one: ATen's is returned
            err, problem = float("inf"), f"could not be compared with ATen's ({type(exc).__name__}: {exc})"
        self.verified += 1
        if err > self.max_error:
            self.max_error = err
        if problem is None:
            return out
        self.routed -= 1
        self._deny(args, f"disagreed with ATen: {problem}")
        return ref

    def _deny(self, args: tuple, what: str) -> None:
        self.failed += 1
        self.denied.add(_shape_key(args))
        self.plans.clear()
        warnings.warn(f"accel.kernels: {self.name!r} ({self.dsl}) for {self.op.qualname} with inputs "
                      f"[{_describe_shapes(args)}] {what}. ATen's result was used, and these shapes skip this "
                      f"override from now on (ATen, or the next override, answers them). Report it, or "
                      f"accel.kernels.unregister({self.name!r}).",
                      KernelFallbackWarning, stacklevel=3)

    # -- state --------------------------------------------------------------
    def disabled_reason(self, key: str) -> str | None:
        """Why accel's own filters keep this override off at ``key``, or ``None``."""
        off_all, d = _filters_in_force()
        if off_all:
            return "all accel kernels are disabled (accel.kernels.disable())"
        if self.name in d["name"]:
            return f"disabled by name (accel.kernels.disable(name={self.name!r}))"
        if self.op.qualname in d["op"]:
            return f"op disabled (accel.kernels.disable(op={self.op.qualname!r}))"
        if self.dsl in d["dsl"]:
            return f"DSL disabled (accel.kernels.disable(dsl={self.dsl!r}))"
        if d["backend"]:
            # The vendor serving ``key`` in this torch build decides ("cuda" and "rocm" share the
            # CUDA key); a registration for vendors that all are disabled is off as well.
            vendor = _vendor_at(key)
            mine = [b for b in self.backends if self.keys[b] == key]
            if vendor in d["backend"]:
                return f"backend disabled (accel.kernels.disable(backend={vendor!r}))"
            if all(b in d["backend"] for b in mine):
                return f"backend disabled (accel.kernels.disable(backend={mine[0]!r}))"
        # "cuda" and "rocm" share the CUDA key: a registration for the vendor this torch build does
        # not serve (backends=["rocm"] on an NVIDIA build) must not run there.
        vendor = _vendor_at(key)
        if vendor is not None and vendor not in self.backends:
            mine = [b for b in self.backends if self.keys[b] == key]
            return (f"registered for {', '.join(mine)}, but this torch build serves the {key} key with "
                    f"{vendor!r}")
        return None


@dataclass(frozen=True)
class OverrideInfo:
    """A snapshot of one registration, as :func:`overrides` reports it.

    Attributes:
        name: the registration name (unique).
        op: the ATen op (``"aten::_fused_rms_norm"``).
        dsl: the DSL of the impl (``"triton"``, ``"helion"``, ...).
        backends: accel backend names it was registered for.
        dispatch_keys: dispatch key per backend (``{"cuda": "CUDA"}``).
        paths: registration path per dispatch key: ``"native"`` (torch._native) or ``"accel"``.
        active: installed and enabled at one dispatch key at least.
        inactive_reason: why not active (``""`` when active).
        routed: calls the impl answered.
        declined: calls its cond (or the fail-safe deny list) sent elsewhere.
        failed: calls where the impl raised or disagreed with ATen (ATen's result was used).
        verified: routed calls checked against ATen (``ACCEL_KERNELS_VERIFY=1``).
        max_error: max absolute error seen while verifying (0.0 when none verified).
        denied_shapes: input shape sets routed to ATen after a failure.
    """

    name: str
    op: str
    dsl: str
    backends: tuple[str, ...]
    dispatch_keys: dict[str, str]
    paths: dict[str, str]
    active: bool
    inactive_reason: str
    routed: int
    declined: int
    failed: int
    verified: int
    max_error: float
    denied_shapes: int

    @property
    def fallbacks(self) -> int:
        """Calls that reached this override but ran ATen (declined + failed)."""
        return self.declined + self.failed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (adds ``fallbacks``)."""
        from dataclasses import asdict

        d = asdict(self)
        d["backends"] = list(self.backends)
        d["fallbacks"] = self.fallbacks
        return d


_OVERRIDES: dict[str, _Override] = {}
_ORDER = [0]


# ---------------------------------------------------------------------- slots
class _Inside(threading.local):
    """Per-thread flag; the class default makes the read cheap in threads that never set it
    (``getattr(local, name, default)`` on a missing name costs ~0.4 us: it raises internally)."""

    on = False


class _Slot:
    """Every override of one op at one dispatch key, and the path that installs them."""

    def __init__(self, op: _Op, key: str, path: Any) -> None:
        self.op, self.key, self.path = op, key, path
        self.keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
        self.original: Any = None  # the ATen kernel (SafeKernelFunction) under the override, or None
        self.fallback: Callable | None = None  # where ATen has no kernel at this key
        self.live: tuple[_Override, ...] = ()
        self.installed = False  # the path installed this slot once (ATen's kernel captured)
        self.composite_only = False  # ATen has only a composite of the op at this key (set at creation)
        self.state: Any = None  # the path's own bookkeeping
        #: Re-entrancy guard per thread: while an impl of this slot runs, a call of the same op from
        #: inside it (an impl handing a case back to ATen) skips accel's overrides: no infinite recursion.
        self.inside = _Inside()

    def run_guarded(self, ov: _Override, args: tuple, kwargs: dict, fn: Callable | None = None) -> Any:
        """``ov.run`` with :attr:`inside` set for its duration."""
        inside = self.inside
        inside.on = True
        try:
            return ov.run(args, kwargs, self.call_aten, fn)
        finally:
            inside.on = False

    def reentered(self) -> bool:
        """Whether this thread is inside one of this slot's impls."""
        return self.inside.on

    def call_aten(self, *args: Any, **kwargs: Any) -> Any:
        """The ATen result, bypassing every override at this key."""
        if self.original is not None:
            return self.original.call_boxed(self.keyset, *args, **kwargs)
        return self.fallback(*args, **kwargs)


_SLOTS: dict[tuple[str, str], _Slot] = {}


def _dispatch_key_of(backend: str, fn: str = "register", arg: str = "backends=['cuda']") -> str:
    from accel.backends import registered

    found = registered()
    if backend not in found:
        raise KernelRegistrationError(
            f"accel.kernels.{fn}: unknown backend {backend!r}. Valid: {', '.join(found)}. "
            f"Pass backend names (e.g. {arg}), not device strings.")
    return found[backend].dispatch_key


#: DSL names a filter may name before any registration uses them (those of accel's built-in
#: kernels and of torch's native DSL registry).
KNOWN_DSLS = ("triton", "helion", "cutedsl")


def _vendor_at(key: str) -> str | None:
    """The backend that serves dispatch key ``key`` in this torch build, or ``None`` when that is not one name.

    ``"CUDA"`` is served by ``"rocm"`` on a ROCm build of torch and by ``"cuda"``
    otherwise (the rule of :func:`accel.backend`); a key with one backend is that
    backend's. Reads build facts only: initialises no device.
    """
    from accel import _select
    from accel.backends import registered

    found = registered()
    names = [n for n, cls in found.items() if cls.dispatch_key == key]
    if len(names) == 1:
        return names[0]
    device_types = {found[n].torch_device_type for n in names}
    if len(device_types) != 1 or next(iter(device_types)) not in found:
        return None
    name = _select._name_for_device_type(device_types.pop(), key)
    return name if name in names else None


def _aten_kernel(op: _Op, key: str) -> Any:
    """The kernel ATen runs for ``op`` at ``key`` now (SafeKernelFunction), or ``None`` when there is none."""
    get_kernel = _compat.library_get_kernel()
    if get_kernel is None:
        return None
    try:
        return get_kernel(op.qualname, key)
    except RuntimeError:
        return None


def registry_path() -> str:
    """The configured registration path: ``"auto"``, ``"native"`` or ``"accel"``.

    Set by :func:`use_registry` or, before the first registration, by the
    ``ACCEL_KERNELS_REGISTRY`` environment variable (default ``"auto"``: the
    native registry where usable, accel's router elsewhere).
    """
    if _STATE.path_mode is None:
        mode = os.environ.get(REGISTRY_ENV, "auto").strip().lower() or "auto"
        if mode not in _PATHS:
            raise KernelRegistrationError(
                f"{REGISTRY_ENV}={mode!r}: not a registration path. Valid: {', '.join(_PATHS)}. "
                f"Unset it for 'auto'.")
        _STATE.path_mode = mode
    return _STATE.path_mode


def use_registry(mode: str, /) -> str:
    """Choose the registration path for later registrations; returns the previous mode.

    Args:
        mode: ``"auto"`` (torch's native DSL registry where usable, else accel's
            router), ``"native"`` (require the native registry) or ``"accel"``
            (always accel's router).

    Returns:
        The previous mode.

    Raises:
        KernelRegistrationError: unknown mode; ``"native"`` where this torch has no
            usable native registry; or overrides are still registered (unregister them first).
    """
    if mode not in _PATHS:
        raise KernelRegistrationError(f"accel.kernels.use_registry: unknown mode {mode!r}. Valid: {', '.join(_PATHS)}.")
    if mode == "native" and _compat.native_dsl_registry() is None:
        raise KernelRegistrationError(
            f"accel.kernels.use_registry('native'): {_compat.native_dsl_registry_reason()}. "
            f"Use 'auto' or 'accel' on this torch.")
    with _LOCK:
        if _OVERRIDES:
            raise KernelRegistrationError(
                f"accel.kernels.use_registry({mode!r}): {len(_OVERRIDES)} override(s) still registered "
                f"({', '.join(_OVERRIDES)}). The path is chosen per op and key at registration: unregister them first.")
        previous = registry_path()
        _STATE.path_mode = mode
        return previous


def _refuse_without_autograd(op: _Op) -> None:
    """Raise for an op that is CompositeImplicitAutograd with no Autograd kernel of its own.

    Such an op (``aten::softmax.int``, ``aten::rms_norm``, ``aten::layer_norm``) is differentiated
    through what it decomposes to; a kernel at its backend key would run with no autograd formula
    above it (torch warns "an autograd kernel was not registered", and gradients may be wrong).
    The op it decomposes to is the one to override.
    """
    full = f"{op.namespace}::{op.symbol}"
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(full, "CompositeImplicitAutograd") and not has(full, "Autograd"):
        raise KernelRegistrationError(
            f"accel.kernels.register({op.qualname}): {op.qualname} is CompositeImplicitAutograd: it has no "
            f"autograd formula of its own (autograd differentiates the ops it decomposes to), so a kernel at the "
            f"backend key would run without autograd. Override the op it decomposes to instead, e.g. "
            f"aten::_softmax for softmax, aten::_fused_rms_norm for rms_norm, aten::native_layer_norm for "
            f"layer_norm (torch.ops.{op.namespace}.{op.name}.{op.overload}._schema and a profiler trace show "
            f"which ops run).")


#: Forward op -> the op its autograd formula calls for the gradient, where ATen may lack a kernel for the
#: second at a key whose forward is only a composite (``aten::_fused_rms_norm`` on CPU).
_BACKWARD_OF = {"aten::_fused_rms_norm": "aten::_fused_rms_norm_backward"}


def _orphaned_forwards() -> set[tuple[str, str]]:
    """``(forward op, dispatch key)`` pairs whose installed kernel would break training.

    Where ATen has only a composite for a forward op at a key (``aten::_fused_rms_norm`` on CPU), autograd
    differentiates what the composite decomposes to; a live accel override of it at that key makes autograd
    use the op's own formula instead, which calls the backward op (:data:`_BACKWARD_OF`). Where that op has
    no kernel at the key either (no ATen kernel, no live accel override there: none registered, or disabled),
    every backward through the forward fails with "Could not run ... with arguments from the 'CPU' backend".
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    out = set()
    for (qualname, key), slot in _SLOTS.items():
        backward = _BACKWARD_OF.get(qualname)
        if backward is None or not slot.live or not slot.composite_only:
            continue
        if not has("aten::empty.memory_format", key):  # a key this torch build does not serve (CUDA on a CPU
            continue                                   # build): no tensor of it can reach the forward
        bslot = _SLOTS.get((backward, key))
        if bslot is not None:
            if bslot.live or bslot.original is not None:
                continue
        elif has(backward, key):
            continue
        out.add((qualname, key))
    return out


def _check_training(api: str) -> None:
    """After ``api`` changed what is installed: warn (:class:`~accel.errors.KernelRegistrationWarning`) once per
    forward op and key that has just become unable to train (:func:`_orphaned_forwards`); inference still works,
    and the warning says what to register or enable. Called with ``_LOCK`` held."""
    now = _orphaned_forwards()
    for qualname, key in sorted(now - _STATE.orphans):
        backward = _BACKWARD_OF[qualname]
        warnings.warn(KernelRegistrationWarning(
            f"accel.kernels.{api}: {qualname} now has an accel kernel at dispatch key {key!r}, where ATen has "
            f"only a composite of it, so autograd calls {backward}, which has no kernel at {key!r} (no ATen "
            f"kernel, no live accel override): every backward through {qualname} (nn.RMSNorm training) fails "
            f"while this lasts; inference works. Register {backward} at that backend first, with fallback= an "
            f"eager backward (accel.kernels.ops.rms_norm.reference.fused_rms_norm_backward), or register both "
            f"with accel.kernels.ops.rms_norm._pair.register_pair; or keep it enabled."), stacklevel=3)
    _STATE.orphans = now


def _choose_path(op: _Op, key: str, has_aten_kernel: bool) -> Any:
    from . import _native, _router

    mode = registry_path()
    if mode == "accel" or op.namespace != "aten" or not has_aten_kernel:
        # The native registry needs an ATen kernel at the key to fall back to
        # (e.g. aten::_fused_rms_norm_backward has none on CPU): accel's router serves those.
        return _router
    if _compat.native_dsl_registry() is None:
        return _router
    return _native


def _sync(op: _Op, key: str) -> None:
    """Reinstall the slot ``(op, key)`` with its currently live overrides (registration order)."""
    slot = _SLOTS.get((op.qualname, key))
    if slot is None:
        return
    live = tuple(sorted((o for o in _OVERRIDES.values()
                         if o.op.qualname == op.qualname and key in o.keys.values() and o.disabled_reason(key) is None),
                        key=lambda o: o.order))
    if live != slot.live or not slot.installed:
        # only when this slot's live overrides change: reinstalling swaps the dispatcher's kernel for
        # the op, which must not happen under other threads' calls of ops that did not change
        slot.live = live
        slot.path.install(slot, live)
        slot.installed = True
    registered_here = [o for o in _OVERRIDES.values() if o.op.qualname == op.qualname and key in o.keys.values()]
    if not registered_here:
        slot.path.release(slot)
        del _SLOTS[(op.qualname, key)]


def _sync_all() -> None:
    for (qualname, key), slot in list(_SLOTS.items()):
        _sync(slot.op, key)


# ------------------------------------------------------------------- public API
def register(
    op: object,
    *,
    impl: Callable,
    backends: Sequence[str],
    dsl: str,
    cond: Callable[..., bool] | None = None,
    name: str | None = None,
    fallback: Callable | None = None,
) -> str:
    """Install ``impl`` as the kernel of ATen op ``op`` at each backend's dispatch key.

    Calls of ``op`` on tensors of those backends reach ``impl`` when ``cond`` says
    so; otherwise the original ATen kernel runs. ATen's autograd and autocast
    kernels sit above the backend key and still apply. Overrides of one op at one
    key are tried in registration order; the first whose ``cond`` is true runs.

    Fail-safe: if ``impl`` raises, or returns something not structured like the
    op's result (``None`` or a non-tensor where the op returns a tensor, the wrong
    number of outputs; checked on every call, shapes and dtypes only under
    :func:`set_verify`), the ATen result is returned, one
    :class:`~accel.errors.KernelFallbackWarning` names op, shapes and problem, and
    calls with those input shapes skip this override from then on (ATen, or the next
    override whose cond takes them, answers). The same holds when ``impl.plan`` raises or
    returns something that is not a function (the call that found out gets ATen's result).

    .. note:: The fallback runs ATen on the same input tensors, so ``impl`` must not
       modify its inputs (unless the op itself is in-place): an impl that writes
       into an input and then raises leaves ATen a changed input, and the answer
       is silently wrong.

    Args:
        op: the ATen op: ``"aten::_fused_rms_norm"``, ``"_fused_rms_norm"``,
            ``"aten::add.Tensor"`` or ``torch.ops.aten._fused_rms_norm.default``.
            A name without an overload must be unambiguous: ``"aten::sin"`` means
            ``sin.default``, but ``"aten::add"`` (whose ``default`` is TorchScript's
            ``add(Scalar, Scalar)``) needs ``"aten::add.Tensor"``.
        impl: the kernel; same signature and return types as the ATen op.
        backends: accel backend names (``["cuda"]``, ``["cuda", "rocm"]``, ``["cpu"]``);
            CUDA and ROCm share the ``CUDA`` dispatch key.
        dsl: the DSL ``impl`` is written in (``"triton"``, ``"helion"``, ``"cutedsl"``, ...);
            used by :func:`disable` and, on the native registry, by
            ``torch.backends.python_native.<dsl>``.
        cond: ``cond(*args, **kwargs) -> bool`` with the op's signature; ``None``
            means always. Must be cheap (it runs on every call), must return a bool
            and must not raise (a raising cond, or a result with no truth value
            such as a 3-element tensor, counts as ``False`` and warns once). It may carry a
            ``why_not`` attribute (same signature, returns a reason string or
            ``None``) that :func:`explain` shows, and ``cacheable = True``: a promise that
            its answer depends only on the arguments' signature (per tensor dtype,
            device, shape, strides and ``data_ptr() % 16``; other arguments by value:
            :func:`accel.kernels._plans.signature`) and the tuning tables; it then runs
            once per signature, and an ``impl`` carrying ``plan`` (same signature,
            returns the function that answers every call of that signature) is
            planned once per signature too. The built-in kernels do both: a routed
            call then skips the cond, the table lookups and Triton's launch-key build
            (H200 host: routed RMSNorm 24.7 µs per call vs 39.4 before, session 5).
        name: unique registration name (a non-empty string); default ``"<dsl>:<op>"``.
        fallback: kernel to use instead of ATen where a dispatch key has no ATen
            kernel for ``op`` (``aten::_fused_rms_norm_backward`` on CPU, whose
            forward is a composite there). Required in that case.

    Returns:
        The registration name (for :func:`unregister`, :func:`disable`, :func:`overrides`).

    Raises:
        KernelRegistrationError: (a ``ValueError``) unknown or ambiguous op, unknown
            backend, ``backends`` not a list of names, ``name`` not a string or already
            taken, ``impl``/``cond`` not callable, or no ATen kernel at a key and no
            ``fallback``. Nothing is registered then.

    Warns:
        KernelRegistrationWarning: a forward whose backward would have no kernel at a key
            (``aten::_fused_rms_norm`` on CPU, where ATen's forward is a composite, before
            ``aten::_fused_rms_norm_backward`` is registered there): inference works, training
            through the op fails. Register the backward first, as the example does. :func:`unregister`,
            :func:`disable`, :func:`enable` and :func:`disabled` warn the same way when they leave
            such a forward live without its backward.

    Example:
        >>> import torch, accel.kernels as ak
        >>> def ref(x, shape, w=None, eps=None):
        ...     r = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + (eps or 1e-6))
        ...     return (x.float() * r * (1 if w is None else w)).to(x.dtype), r
        >>> from accel.kernels.ops.rms_norm import reference  # CPU: the backward first (ATen has none there)
        >>> bwd = ak.register("aten::_fused_rms_norm_backward", impl=reference.fused_rms_norm_backward,
        ...                   fallback=reference.fused_rms_norm_backward, backends=["cpu"], dsl="eager")
        >>> name = ak.register("aten::_fused_rms_norm", impl=ref, backends=["cpu"], dsl="eager", name="doc")
        >>> y, rstd = torch.ops.aten._fused_rms_norm(torch.ones(2, 4), [4], None, 1e-6)
        >>> [o.routed for o in ak.overrides() if o.name == "doc"]
        [1]
        >>> ak.unregister("doc"); ak.unregister(bwd)
    """
    opr = _resolve_op(op, error=KernelRegistrationError)
    _refuse_without_autograd(opr)
    if not callable(impl):
        raise KernelRegistrationError(f"accel.kernels.register({opr.qualname}): impl {impl!r} is not callable. "
                                      f"Pass the kernel function.")
    if cond is not None and not callable(cond):
        raise KernelRegistrationError(f"accel.kernels.register({opr.qualname}): cond {cond!r} is not callable. "
                                      f"Pass a function with the op's signature returning bool, or None.")
    if fallback is not None and not callable(fallback):
        raise KernelRegistrationError(f"accel.kernels.register({opr.qualname}): fallback {fallback!r} is not callable.")
    if not isinstance(dsl, str) or not dsl.strip():
        raise KernelRegistrationError(f"accel.kernels.register({opr.qualname}): dsl {dsl!r} must be a non-empty "
                                      f"string such as 'triton' or 'helion'.")
    if isinstance(backends, str) or not isinstance(backends, (list, tuple, set, frozenset)) or not backends:
        raise KernelRegistrationError(
            f"accel.kernels.register({opr.qualname}): backends={backends!r}: Pass a non-empty list of backend "
            f"names, e.g. backends=['cuda'].")
    for b in backends:
        if not isinstance(b, str):
            raise KernelRegistrationError(
                f"accel.kernels.register({opr.qualname}): backends={backends!r}: {b!r} is not a backend name. "
                f"Pass a flat list of names, e.g. backends=['cuda', 'rocm'].")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise KernelRegistrationError(
            f"accel.kernels.register({opr.qualname}): name={name!r} is not a string. Pass a non-empty string "
            f"such as name='triton:rms_norm', or leave it out for '<dsl>:<op>'.")
    backends = tuple(dict.fromkeys(backends))
    keys = {b: _dispatch_key_of(b) for b in backends}
    name = name or f"{dsl}:{opr.qualname}"
    with _LOCK:
        if name in _OVERRIDES:
            raise KernelRegistrationError(
                f"accel.kernels.register: name {name!r} is already registered (for {_OVERRIDES[name].op.qualname}). "
                f"Pass another name=, or unregister({name!r}) first.")
        if _compat.library_get_kernel() is None:
            raise KernelRegistrationError(
                f"accel.kernels.register({opr.qualname}): torch {torch.__version__} has no torch.library.get_kernel "
                f"(torch 2.9+), so the ATen kernel cannot be captured for fallback. Upgrade torch to 2.9 or later.")
        originals = {}
        for key in dict.fromkeys(keys.values()):
            slot = _SLOTS.get((opr.qualname, key))
            has_kernel = slot.original is not None if slot else _aten_kernel(opr, key) is not None
            if not has_kernel and fallback is None and (slot is None or slot.fallback is None):
                raise KernelRegistrationError(
                    f"accel.kernels.register({opr.qualname}): ATen has no kernel for it at dispatch key {key!r}, "
                    f"so there is nothing to fall back to when cond is false. Pass fallback= (an eager "
                    f"implementation), or register at another backend.")
            originals[key] = has_kernel
        _ORDER[0] += 1
        ov = _Override(name, opr, dsl.strip(), backends, keys, impl, cond, fallback, _ORDER[0])
        _OVERRIDES[name] = ov
        try:
            for key, has_kernel in originals.items():
                slot = _SLOTS.get((opr.qualname, key))
                if slot is None:
                    slot = _Slot(opr, key, _choose_path(opr, key, has_kernel))
                    # before accel's kernel is there: whether ATen's own is only a composite (alias keys)
                    slot.composite_only = not torch._C._dispatch_has_kernel_for_dispatch_key(
                        f"{opr.namespace}::{opr.symbol}", key)
                    _SLOTS[(opr.qualname, key)] = slot
                if slot.fallback is None:
                    slot.fallback = fallback
                slot.path.add(slot, ov)
                _sync(opr, key)
            _tuning._forget_floors()  # memoised answers may depend on which DSLs are registered (_tuning._named)
        except BaseException:
            _OVERRIDES.pop(name, None)
            for key in originals:
                slot = _SLOTS.get((opr.qualname, key))
                if slot is not None:
                    slot.path.remove(slot, ov)
                    _sync(opr, key)
            raise
        _check_training("register")
    return name


def unregister(name: str, /) -> None:
    """Remove a registration; ATen (or the next override) runs for its op again.

    A :func:`disable` filter on this name is dropped with it: a later registration
    under the same name starts enabled.

    Raises:
        UnknownKernelError: (a ``LookupError``) no registration called ``name``.
    """
    with _LOCK:
        ov = _OVERRIDES.get(name)
        if ov is None:
            raise UnknownKernelError(f"accel.kernels.unregister: no override named {name!r}. Registered: "
                                     f"{', '.join(_OVERRIDES) or 'none'}. See accel.kernels.overrides().")
        del _OVERRIDES[name]
        ov.plans.clear()  # torch's native registry may keep the node's closures (and so ov) alive
        _STATE.disabled["name"].discard(name)  # a later registration of this name starts enabled
        for key in dict.fromkeys(ov.keys.values()):
            slot = _SLOTS.get((ov.op.qualname, key))
            if slot is not None:
                slot.path.remove(slot, ov)
                _sync(ov.op, key)
        _tuning._forget_floors()  # as in register: the other overrides' memoised answers are re-asked
        _check_training("unregister")


def _filters(op: object, dsl: str | None, backend: str | None, name: str | None, fn: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if op is not None:
        out.append(("op", _resolve_op(op).qualname))
    if dsl is not None:
        used = sorted({ov.dsl for ov in _OVERRIDES.values()} | set(KNOWN_DSLS) | _STATE.disabled["dsl"])
        if dsl not in used:  # a typo or another case would filter nothing, silently
            raise UnknownKernelError(f"accel.kernels.{fn}: no DSL named {dsl!r} (DSL names are case-sensitive). "
                                     f"Known: {', '.join(used)}. Pass one of those.")
        out.append(("dsl", dsl))
    if backend is not None:
        _dispatch_key_of(backend, fn, f"{fn}(backend='cuda')")
        out.append(("backend", backend))
    if name is not None:
        if name not in _OVERRIDES:
            raise UnknownKernelError(f"accel.kernels.{fn}: no override named {name!r}. Registered: "
                                     f"{', '.join(_OVERRIDES) or 'none'}.")
        out.append(("name", name))
    return out


def disable(*, op: object = None, dsl: str | None = None, backend: str | None = None, name: str | None = None) -> None:
    """Switch accel's overrides off: by op, DSL, backend or name; with no argument, all of them.

    Disabled overrides are uninstalled from the dispatcher (no per-call cost).

    .. note:: Switching overrides on or off replaces the dispatcher's kernel of each op whose set of
       live overrides changes (only those). Do it while no other thread is running those ops:
       torch's dispatcher does not support swapping a Python kernel under a concurrent call
       (seen as an INTERNAL ASSERT in ``SafePyObject`` or a crash). The same holds for
       :func:`register`, :func:`unregister` and :func:`disabled`.
    Registrations stay; :func:`enable` switches them back on. Affects accel's
    registrations only (``torch.backends.python_native`` also reaches them on
    the native path).

    ``backend`` applies to the vendor that serves the dispatch key in this torch
    build: ``"cuda"`` and ``"rocm"`` share the ``CUDA`` key, so on an NVIDIA build
    ``disable(backend="cuda")`` switches off an override registered for
    ``["cuda", "rocm"]`` and ``disable(backend="rocm")`` leaves it on (and the
    reverse on a ROCm build). An override all of whose backends at a key are
    disabled is off there too. A ``name`` filter lasts until :func:`enable` or
    until that registration is unregistered.

    Raises:
        UnknownKernelError: unknown op or name, or a DSL that is not registered, not disabled and
            not in :data:`KNOWN_DSLS` (names are case-sensitive). KernelRegistrationError: unknown backend.

    Example:
        >>> import accel.kernels as ak
        >>> ak.disable(dsl="triton"); ak.enable(dsl="triton")
    """
    with _LOCK:
        items = _filters(op, dsl, backend, name, "disable")
        if not items:
            _STATE.disabled_all = True
        for kind, value in items:
            _STATE.disabled[kind].add(value)
        _sync_all()
        _check_training("disable")


def enable(*, op: object = None, dsl: str | None = None, backend: str | None = None, name: str | None = None) -> None:
    """Undo :func:`disable` for the same argument (no argument: undo ``disable()`` and every filter).

    Raises:
        UnknownKernelError: unknown op, name or DSL (as :func:`disable`). KernelRegistrationError: unknown backend.
    """
    with _LOCK:
        items = _filters(op, dsl, backend, name, "enable")
        if not items:
            _STATE.disabled_all = False
            for values in _STATE.disabled.values():
                values.clear()
        for kind, value in items:
            _STATE.disabled[kind].discard(value)
        _sync_all()
        _check_training("enable")


@contextlib.contextmanager
def disabled(*, op: object = None, dsl: str | None = None, backend: str | None = None,
             name: str | None = None) -> Iterator[None]:
    """Context manager: :func:`disable`'s filter while the block runs. Blocks hold their filters apart
    from :func:`disable`/:func:`enable` and count them: the filter lasts until the last block holding it
    exits (overlapping blocks in threads or generators), an :func:`enable` inside the block does not end
    it early, and a :func:`disable` made inside it stays after it.

    Example:
        >>> import accel.kernels as ak
        >>> with ak.disabled(op="aten::_fused_rms_norm"):
        ...     pass  # ATen's RMSNorm runs here
    """
    with _LOCK:
        items = _filters(op, dsl, backend, name, "disabled")
        keys = [(kind, value) for kind, value in items] or [("all", None)]
        held = _STATE.held
        for key in keys:  # counted: overlapping blocks (threads, generators) each hold their own
            held[key] = held.get(key, 0) + 1
        _sync_all()
        _check_training("disabled")
    try:
        yield
    finally:
        with _LOCK:
            for key in keys:
                held[key] -= 1
                if held[key] <= 0:
                    del held[key]
            _sync_all()
            _check_training("disabled")


def _info(ov: _Override) -> OverrideInfo:
    paths, reasons = {}, []
    active = False
    for key in dict.fromkeys(ov.keys.values()):
        slot = _SLOTS.get((ov.op.qualname, key))
        if slot is None:
            continue
        paths[key] = slot.path.NAME
        why = ov.disabled_reason(key) or slot.path.inactive_reason(slot, ov)
        if why is None:
            active = True
        else:
            reasons.append(f"{key}: {why}")
    return OverrideInfo(ov.name, ov.op.qualname, ov.dsl, ov.backends, dict(ov.keys), paths, active,
                        "" if active else "; ".join(reasons), ov.routed, ov.declined, ov.failed, ov.verified,
                        ov.max_error, len(ov.denied))


def overrides() -> list[OverrideInfo]:
    """Every registration, in registration order, with its state and counters.

    Example:
        >>> import accel.kernels as ak
        >>> isinstance(ak.overrides(), list)
        True
    """
    with _LOCK:
        return [_info(o) for o in sorted(_OVERRIDES.values(), key=lambda o: o.order)]


def reset_counters(name: str | None = None, /) -> None:
    """Zero the counters (and forget failed shapes) of one registration, or of all."""
    with _LOCK:
        targets = [_OVERRIDES[name]] if name is not None and name in _OVERRIDES else (
            list(_OVERRIDES.values()) if name is None else [])
        if name is not None and not targets:
            raise UnknownKernelError(f"accel.kernels.reset_counters: no override named {name!r}.")
        for o in targets:
            o.routed = o.declined = o.failed = o.verified = 0
            o.max_error = 0.0
            o.denied.clear()
            o.plans.clear()  # answers memoised while a shape was deny-listed


# ------------------------------------------------------------------------ explain
_DEVICE_KEYS = {"cuda": "CUDA", "cpu": "CPU", "xpu": "XPU", "mps": "MPS", "hip": "CUDA"}


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found.

    Attributes:
        op: the ATen op.
        dispatch_key: the backend dispatch key of the inputs (``"CUDA"``), or ``None``.
        kernel: the registration name that would run, or ``"aten"``.
        steps: ``(registration name, verdict)`` per registration of ``op``, in the order tried.
    """

    op: str
    dispatch_key: str | None
    kernel: str
    steps: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        lines = [f"{self.op} at {self.dispatch_key or 'no backend key'}: runs {self.kernel}"]
        lines += [f"  {n}: {v}" for n, v in self.steps]
        return "\n".join(lines)


def _first_device(args: Sequence[Any], kwargs: dict) -> torch.device | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    return b.device
    return None


def explain(op: object, /, *args: Any, **kwargs: Any) -> Explanation:
    """Say which kernel would run for ``op(*args, **kwargs)`` and why, without running it.

    Every registration of ``op`` is listed with its verdict: the disabled filter
    that keeps it off, the native registry's state, a failed shape, or its
    ``cond``'s answer (and ``cond.why_not`` where given). Counters are not touched.
    Meta tensors have no backend key: pass real (or fake-device) tensors.

    Returns:
        :class:`Explanation` (``str()`` gives a readable report).

    Raises:
        UnknownKernelError: unknown op.

    Example:
        >>> import torch, accel.kernels as ak
        >>> ak.explain("aten::_fused_rms_norm", torch.ones(2, 4), [4], None, 1e-6).kernel
        'aten'
    """
    opr = _resolve_op(op)
    dev = _first_device(args, kwargs)
    key = _DEVICE_KEYS.get(dev.type) if dev is not None else None
    steps: list[tuple[str, str]] = []
    chosen = "aten"
    with _LOCK:
        regs = sorted((o for o in _OVERRIDES.values() if o.op.qualname == opr.qualname), key=lambda o: o.order)
        slot = _SLOTS.get((opr.qualname, key)) if key else None
        for o in regs:
            if key is None or key not in o.keys.values():
                steps.append((o.name, f"not registered at {key or dev}: registered at "
                                      f"{', '.join(sorted(set(o.keys.values())))}"))
                continue
            why = o.disabled_reason(key) or (slot.path.inactive_reason(slot, o) if slot else "not installed")
            if why:
                steps.append((o.name, f"off: {why}"))
                continue
            if o.denied and _shape_key(args) in o.denied:
                steps.append((o.name, "off for these shapes: the impl failed on them before (ATen runs)"))
                continue
            if chosen != "aten":
                steps.append((o.name, f"not tried: {chosen} comes first"))
                continue
            if o.cond is None:
                ok, detail = True, "no cond (always)"
            else:
                try:
                    result = o.cond(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - explain reports, never raises for a cond bug
                    ok, detail = False, f"cond raised {type(exc).__name__}: {exc} (counts as False)"
                else:
                    ok, problem = _truth(result)  # the same verdict as _Override.accept
                    detail = f"cond -> {ok}" if problem is None else f"cond {problem} (counts as False)"
                why_not = getattr(o.cond, "why_not", None)
                if not ok and why_not is not None:
                    try:
                        detail += f" ({why_not(*args, **kwargs)})"
                    except Exception as exc:  # noqa: BLE001
                        detail += f" (why_not raised {type(exc).__name__}: {exc})"
            steps.append((o.name, ("runs: " if ok else "declines: ") + detail))
            if ok:
                chosen = o.name
    if not steps:
        steps.append(("aten", f"no accel override registered for {opr.qualname} (the built-in kernels are "
                               f"installed on a GPU by accel.kernels.install(); `accel kernels` says which can be "
                               f"used here and why not)"))
    return Explanation(opr.qualname, key, chosen, tuple(steps))
