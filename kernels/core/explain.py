"""``explain``: which override would answer a call, and why, without running it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from accel.backends import dispatch_key_for_device_type
from accel.errors import UnknownBackendError

from accel import _compat

from . import native, router
from .op import resolve_op, shape_key
from .override import OVERRIDES, truth
from .slot import SLOTS
from .state import LOCK

__all__ = ["Explanation", "explain"]




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


def _upstream_steps(opr: Any, key: str, args: tuple, kwargs: dict, chosen: str, steps: list) -> str:
    """Append a step per upstream override of ``opr`` at ``key`` in torch's native registry (tried after
    accel's nodes, in the graph's order); returns the kernel that runs."""
    reg = _compat.native_dsl_registry()
    nodes = native.upstream_nodes(opr, key)
    installed = reg is not None and nodes and reg.installed(opr.namespace, opr.symbol, key)
    for node in nodes:
        name = f"torch._native {node.dsl_name}"
        if not reg.enabled(node):
            steps.append((name, "off: disabled through torch.backends.python_native"))
        elif not installed:
            steps.append((name, "off: the registry's router for this op is not installed at this key"))
        elif chosen != "aten":
            steps.append((name, f"not tried: {chosen} comes first"))
        else:
            try:
                ok, detail = bool(node.cond_fn(*args, **kwargs)), ""
            except Exception as exc:  # noqa: BLE001 - explain reports, never raises for a cond bug
                ok, detail = False, f" (cond raised {type(exc).__name__}: {exc})"
            steps.append((name, "runs: upstream override (cond -> True)" if ok
                          else f"declines: upstream override (cond -> False{detail})"))
            if ok:
                chosen = name
    return chosen


def explain(op: object, /, *args: Any, **kwargs: Any) -> Explanation:
    """Say which kernel would run for ``op(*args, **kwargs)`` and why, without running it.

    Every registration of ``op`` is listed with its verdict: the disabled filter
    that keeps it off, the native registry's state, a failed shape, or its
    ``cond``'s answer (and ``cond.why_not`` where given); then each upstream override of
    ``op`` at the key in torch's native registry (``"torch._native <dsl>"``), tried after
    accel's; or, where another kernel was registered above accel's router since, that it
    shadows them. Counters are not touched.
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
    opr = resolve_op(op)
    dev = _first_device(args, kwargs)
    try:
        key = dispatch_key_for_device_type(dev.type) if dev is not None else None
    except UnknownBackendError:  # a device type no backend runs (meta): no backend key
        key = None
    steps: list[tuple[str, str]] = []
    chosen = "aten"
    with LOCK:
        regs = sorted((o for o in OVERRIDES.values() if o.op.qualname == opr.qualname), key=lambda o: o.order)
        slot = SLOTS.get((opr.qualname, key)) if key else None
        for o in regs:
            if key is None or key not in o.keys.values():
                steps.append((o.name, f"not registered at {key or dev}: registered at "
                                      f"{', '.join(sorted(set(o.keys.values())))}"))
                continue
            why = o.disabled_reason(key) or (slot.path.inactive_reason(slot, o) if slot else "not installed")
            if why:
                steps.append((o.name, f"off: {why}"))
                continue
            if o.denied and shape_key(args) in o.denied:
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
                    ok, problem = truth(result)  # the same verdict as Override.accept
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
        shadow = router.shadowed_by(slot) if slot is not None and slot.path is router else None
        if shadow is not None:  # another kernel sits above accel's router: it answers first
            steps = [(n, f"shadowed: {shadow} was registered above accel's router at {key} since; it answers "
                         f"first and reaches accel's router only where it falls back (then: {v})")
                     for n, v in steps]
            chosen = f"{shadow} (above accel's router)"
        elif key is not None:
            chosen = _upstream_steps(opr, key, args, kwargs, chosen, steps)
            if slot is not None and slot.path is native and native.aot_covers(opr, key, args, kwargs):
                steps.insert(0, ("torch AOT kernel", "runs: an AOT kernel embedded in torch covers this call, so "
                                                     "torch's registry declines every override for it"))
                chosen = "aten (torch's AOT kernel)"
    if not regs:
        steps.insert(0, ("aten", f"no accel override registered for {opr.qualname} (the built-in kernels are "
                               f"installed on a GPU by accel.kernels.install(); `accel kernels` says which can be "
                               f"used here and why not)"))
    return Explanation(opr.qualname, key, chosen, tuple(steps))