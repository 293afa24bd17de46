"""One registration: its cond, its impl, the fail-safe around them, verification, and its counters.

Both install paths (:mod:`.router`, :mod:`.native`) call the same :meth:`Override.take` (cond,
fail-safe deny list, per-signature memo) and :meth:`Override.run` (impl, output check, fail-safe,
``ACCEL_KERNELS_VERIFY``), so the two behave alike; only who owns the dispatcher registration differs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from accel.errors import KernelFallbackWarning
from accel.kernels.tuning import table, tolerance

from . import plans as memo
from .op import Op, describe_shapes, shape_key, vendor_at
from .state import MEMO_LOCK, STATE, UNSET, VERIFY_ENV, filters_in_force

__all__ = ["ORDER", "OVERRIDES", "Override", "OverrideInfo", "output_check", "set_verify", "truth"]


def truth(result: Any) -> tuple[bool, str | None]:
    """``bool(result)``, or ``(False, problem)`` when ``result`` has no truth value (a 3-element tensor, an array)."""
    try:
        return bool(result), None
    except Exception as exc:  # noqa: BLE001 - __bool__ of a user's object may raise anything
        return False, f"returned {type(result).__name__}, which is not a bool ({type(exc).__name__}: {exc})"


#: Schema return types the cheap output check knows, and how messages name them.
_RETURN_KINDS = {"Tensor": "a Tensor", "List[Tensor]": "a list of Tensors"}


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def output_check(op: Op) -> Callable[[Any], str | None] | None:
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


def set_verify(enabled: bool | None = None, /) -> bool:
    """Turn verification of routed calls on or off; returns the previous setting.

    With verification on, every routed call also runs the ATen kernel, records the
    max absolute error in :func:`overrides` (``verified``, ``max_error``) and, when
    the results disagree beyond the per-dtype tolerance of
    :mod:`accel.kernels.tuning.tolerance` (or differ in structure, shape, dtype or device,
    or cannot be compared), warns (:class:`~accel.errors.KernelFallbackWarning`),
    returns ATen's result and routes that shape to ATen from then on.

    Args:
        enabled: ``True``/``False``; ``None`` re-reads ``ACCEL_KERNELS_VERIFY`` (``"1"`` means on).

    Returns:
        The previous setting.
    """
    previous = STATE.verify
    STATE.verify = os.environ.get(VERIFY_ENV, "").strip() == "1" if enabled is None else bool(enabled)
    return previous


# ------------------------------------------------------------------ overrides
class Override:
    """One registration. Counters are plain ints (updated without a lock: cheap, approximate under threads)."""

    __slots__ = ("name", "op", "dsl", "backends", "keys", "impl", "cond", "fallback", "routed", "declined",
                 "failed", "verified", "max_error", "denied", "cond_warned", "native_nodes", "order", "check",
                 "cacheable", "plans", "plans_gen", "coverage")

    def __init__(self, name: str, op: Op, dsl: str, backends: tuple[str, ...], keys: dict[str, str],
                 impl: Callable, cond: Callable | None, fallback: Callable | None, order: int) -> None:
        self.name, self.op, self.dsl, self.backends, self.keys = name, op, dsl, backends, keys
        self.impl, self.cond, self.fallback, self.order = impl, cond, fallback, order
        self.routed = self.declined = self.failed = self.verified = 0
        self.max_error = 0.0
        self.denied: set[tuple] = set()
        self.cond_warned = False
        self.native_nodes: dict[str, Any] = {}
        self.check = output_check(op)
        #: the cond's answers by argument signature (:mod:`accel.kernels.core.plans`), where it promises
        #: they depend on nothing else; emptied on a deny and when the tuning tables change
        self.cacheable = cond is not None and getattr(cond, "cacheable", False) is True
        self.plans: dict[tuple, Any] = {}
        self.plans_gen = -1
        #: ``(table op, covers)`` where the cond says which rows a partial DSL's kernel takes
        #: (:data:`accel.kernels.tuning.table.COVERAGE`), else ``None``
        coverage = getattr(cond, "coverage", None)
        self.coverage = coverage if isinstance(coverage, tuple) and len(coverage) == 2 else None

    # -- the per-call path (keep lean: no dict building, no inspect) ------------
    def take(self, args: tuple, kwargs: dict, sig: Any = UNSET) -> Callable | None:
        """The function that answers this call (the impl, or its plan for this signature), or ``None``
        where the override declines it, or :data:`accel.kernels.core.memo.FALLBACK` where planning failed
        (the fail-safe has warned and denied the shape: the caller returns ATen's result, as for an
        impl that raises). ``sig``: :func:`accel.kernels.core.memo.signature` of ``args`` when the caller
        has it (accel's router computes it once for all overrides of a call)."""
        if not self.cacheable or kwargs:
            return self.impl if self.accept(args, kwargs) else None
        if sig is UNSET:
            sig = memo.signature(args)
        if sig is None:
            return self.impl if self.accept(args, kwargs) else None
        plans = self.plans
        gen = table.GENERATION
        if self.plans_gen != gen:
            with MEMO_LOCK:  # ordered with _remember's check-and-store
                plans.clear()
                self.plans_gen = gen
        try:
            hit = plans.get(sig)
        except TypeError:  # an unhashable argument: no memo for this call
            return self.impl if self.accept(args, kwargs) else None
        if hit is not None:
            if hit is memo.DECLINE:
                self.declined += 1
                return None
            return hit
        if not self.accept(args, kwargs):
            self._remember(sig, memo.DECLINE, gen)
            return None
        try:
            fn = memo.plan_of(self.impl, args)
        except Exception as exc:  # noqa: BLE001 - as an impl raising: fall back, never crash
            self._deny(args, f"raised {type(exc).__name__} while planning: {exc}")
            return memo.FALLBACK
        if not callable(fn):
            self._deny(args, f"planned {_type_name(fn)}, not a function answering the call")
            return memo.FALLBACK
        self._remember(sig, fn, gen)
        return fn

    def planned(self, args: tuple, kwargs: dict) -> Callable | None:
        """What :meth:`take` memoised for this call's signature (a plan or the impl), else ``None``.
        No cond runs and nothing is counted (torch's native registry asks the cond, then calls the impl)."""
        if not self.cacheable or kwargs:
            return None
        sig = memo.signature(args)
        try:
            hit = None if sig is None else self.plans.get(sig)
        except TypeError:
            return None
        return None if hit is memo.DECLINE else hit

    def _remember(self, sig: tuple, answer: Any, gen: int) -> None:
        """Keep ``answer`` for ``sig`` unless the tuning tables changed since the cond read them (generation
        ``gen``): an answer computed against an older table must not outlive the change."""
        with MEMO_LOCK:  # a table change between the check and the store would keep a stale answer
            if gen != table.GENERATION or self.plans_gen != gen:
                return
            if len(self.plans) >= memo.MAX_ENTRIES:
                self.plans.clear()
            self.plans[sig] = answer

    def accept(self, args: tuple, kwargs: dict) -> bool:
        """Whether this override takes the call: not a failed shape, and ``cond`` says yes."""
        if self.denied and shape_key(args) in self.denied:
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
            ok, problem = truth(ok)
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
                          f"{describe_shapes(args)}). Treated as False: ATen runs. Fix the cond: it must return "
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
        if STATE.verify:
            return self._verify(out, args, kwargs, call_aten)
        return out

    def run_in_place(self, args: tuple, fn: Callable) -> Any:
        """``fn(*args)`` for a variant of this override's impl that writes into one of ``args`` (the op's own
        code calls it, not the router): booked as a routed call; where ``fn`` raises or its result fails the
        output check, the override is denied these shapes (one warning, as :meth:`run`) and ``None`` is
        returned, ATen is not called, and the caller, whose argument ``fn`` may have written, computes the
        result again from its own inputs."""
        try:
            out = fn(*args)
        except Exception as exc:  # noqa: BLE001 - as in run: fall back, never crash
            self._deny(args, f"raised {type(exc).__name__}: {exc}")
            return None
        problem = self.check(out) if self.check is not None else None
        if problem is not None:
            self._deny(args, problem)
            return None
        self.routed += 1
        return out

    def _verify(self, out: Any, args: tuple, kwargs: dict, call_aten: Callable) -> Any:
        ref = call_aten(*args, **kwargs)
        try:
            err, problem = tolerance.compare(out, ref)
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
        self.denied.add(shape_key(args))
        self.plans.clear()
        warnings.warn(f"accel.kernels: {self.name!r} ({self.dsl}) for {self.op.qualname} with inputs "
                      f"[{describe_shapes(args)}] {what}. ATen's result was used, and these shapes skip this "
                      f"override from now on (ATen, or the next override, answers them). Report it, or "
                      f"accel.kernels.unregister({self.name!r}).",
                      KernelFallbackWarning, stacklevel=3)

    # -- state --------------------------------------------------------------
    def disabled_reason(self, key: str) -> str | None:
        """Why accel's own filters keep this override off at ``key``, or ``None``."""
        off_all, d = filters_in_force()
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
            vendor = vendor_at(key)
            mine = [b for b in self.backends if self.keys[b] == key]
            if vendor in d["backend"]:
                return f"backend disabled (accel.kernels.disable(backend={vendor!r}))"
            if all(b in d["backend"] for b in mine):
                return f"backend disabled (accel.kernels.disable(backend={mine[0]!r}))"
        # "cuda" and "rocm" share the CUDA key: a registration for the vendor this torch build does
        # not serve (backends=["rocm"] on an NVIDIA build) must not run there.
        vendor = vendor_at(key)
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

    The property ``fallbacks`` counts the calls that reached the override but ran ATen (``declined + failed``).
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
        d = asdict(self)
        d["backends"] = list(self.backends)
        d["fallbacks"] = self.fallbacks
        return d


OVERRIDES: dict[str, Override] = {}
ORDER = [0]
