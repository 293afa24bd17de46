"""The public registry: register and unregister overrides, switch them off and on, list them.

One :class:`~.override.Override` per :func:`register` call; the overrides of one op at one
dispatch key share a :class:`~.slot.Slot`, installed by the path :func:`choose_path` picks:

- ``"native"``: torch's own native DSL registry (``torch._native``, torch 2.13+), so
  ``torch.backends.python_native`` switches accel's kernels like upstream ones (:mod:`.native`);
- ``"accel"``: accel's router, a ``torch.library`` kernel at the backend key that redispatches
  to the captured ATen kernel (:mod:`.router`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

import torch

from accel import _compat
from accel._once import warn_once
from accel._options import did_you_mean
from accel.errors import KernelRegistrationError, KernelRegistrationWarning, UnknownKernelError
from accel.kernels.tuning import table

from . import native, router
from .autograd import check_training, refuse_without_autograd
from .op import KNOWN_DSLS, Op, aten_kernel, dispatch_key_of, resolve_op
from .override import ORDER, OVERRIDES, Override, OverrideInfo
from .slot import SLOTS, InstallPath, Slot
from .state import LOCK, PATHS, REGISTRY_ENV, STATE

__all__ = ["choose_path", "disable", "disabled", "enable", "overrides", "register", "registry_mode", "registry_path",
           "reset_counters", "unregister", "use_registry"]


def registry_mode() -> str:
    """The configured registration mode: ``"auto"``, ``"native"`` or ``"accel"``.

    Set by :func:`use_registry` or, before the first registration, by the
    ``ACCEL_KERNELS_REGISTRY`` environment variable (default ``"auto"``: the
    native registry where usable, accel's router elsewhere).

    Raises:
        KernelRegistrationError: ``ACCEL_KERNELS_REGISTRY`` holds another value.
    """
    if STATE.path_mode is None:
        mode = os.environ.get(REGISTRY_ENV, "auto").strip().lower() or "auto"
        if mode not in PATHS:
            raise KernelRegistrationError(
                f"{REGISTRY_ENV}={mode!r}: not a registration path.{did_you_mean(mode, PATHS)} Valid: {', '.join(PATHS)}. "
                f"Unset it for 'auto'.")
        STATE.path_mode = mode
    return STATE.path_mode


def registry_path() -> str:
    """The path new registrations take here: ``"native"`` (torch's native DSL registry) or ``"accel"``
    (accel's router), from :func:`registry_mode` and what this torch has.

    Per op the native path also needs an op of a namespace the registry serves (``aten``; on torch
    2.15 also ``torch_nn``) with a kernel at the key; :attr:`OverrideInfo.paths` gives each
    registration's actual path.

    Raises:
        KernelRegistrationError: the mode is ``"native"`` but this torch has no native registry accel
            recognises (the message says why and what to do).
    """
    mode = registry_mode()
    if mode == "accel":
        return "accel"
    if _compat.native_dsl_registry() is not None:
        return "native"
    if mode == "native":
        raise _native_refused(f"{REGISTRY_ENV}=native" if os.environ.get(REGISTRY_ENV) else "use_registry('native')")
    return "accel"


def _native_refused(who: str) -> KernelRegistrationError:
    return KernelRegistrationError(
        f"accel.kernels: {who}: {_compat.native_dsl_registry_reason()}, so accel's kernels cannot join torch's "
        f"native DSL registry (torch.backends.python_native would not control them). Use mode 'auto' "
        f"(accel's router here, said once) or 'accel', or a torch whose registry accel recognises (2.13 to 2.15).")


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
    if mode not in PATHS:
        raise KernelRegistrationError(f"accel.kernels.use_registry: unknown mode {mode!r}.{did_you_mean(mode, PATHS)} "
                                      f"Valid: {', '.join(PATHS)}.")
    if mode == "native" and _compat.native_dsl_registry() is None:
        raise _native_refused("use_registry('native')")
    with LOCK:
        if OVERRIDES:
            raise KernelRegistrationError(
                f"accel.kernels.use_registry({mode!r}): {len(OVERRIDES)} override(s) still registered "
                f"({', '.join(OVERRIDES)}). The path is chosen per op and key at registration: unregister them first.")
        previous = registry_path()
        STATE.path_mode = mode
        return previous



def choose_path(op: Op, key: str, has_aten_kernel: bool) -> InstallPath:
    """The install path for a new slot of ``op`` at ``key``.

    The native registry where the mode allows it and it serves the op
    (:func:`accel.kernels.core.native.serves`); also in mode ``"accel"`` where torch's registry
    already holds upstream overrides of the op at the key (a second router would hide them, or be
    hidden when a ``python_native`` block rebuilds theirs: accel joins their graph, said once);
    else accel's router. A torch with a native registry accel does not recognise gets the router
    and one :class:`~accel.errors.KernelRegistrationWarning` (mode ``"auto"``) or an error (``"native"``).

    Raises:
        KernelRegistrationError: mode ``"native"`` without a recognised native registry.
    """
    mode = registry_mode()
    path = registry_path()  # raises for "native" without a recognised registry
    if path == "accel" and mode == "auto" and _compat.has_native_dsl_registry():
        warn_once(STATE.said, "unrecognised registry", KernelRegistrationWarning(
            f"accel.kernels: {_compat.native_dsl_registry_reason()}; accel's kernels use accel's own router, "
            f"so torch.backends.python_native does not switch them and upstream overrides of the same ops may "
            f"shadow them. `accel doctor` reports this; ACCEL_KERNELS_REGISTRY=accel chooses the router knowingly."),
            stacklevel=3)
    if not native.serves(op, key, has_aten_kernel):
        return router
    if path == "native":
        return native
    upstream = native.upstream_nodes(op, key)
    if upstream:
        warn_once(STATE.said, ("joins upstream", op.qualname, key), KernelRegistrationWarning(
            f"accel.kernels: {op.qualname} at {key}: torch's native registry holds upstream overrides "
            f"({', '.join(n.dsl_name for n in upstream)}); accel's overrides join that graph (before them) "
            f"instead of stacking accel's router on theirs, although the mode is 'accel'."), stacklevel=3)
        return native
    return router


def _sync(op: Op, key: str) -> None:
    """Reinstall the slot ``(op, key)`` with its currently live overrides (registration order)."""
    slot = SLOTS.get((op.qualname, key))
    if slot is None:
        return
    live = tuple(sorted((o for o in OVERRIDES.values()
                         if o.op.qualname == op.qualname and key in o.keys.values() and o.disabled_reason(key) is None),
                        key=lambda o: o.order))
    if live != slot.live or not slot.installed:
        # only when this slot's live overrides change: reinstalling swaps the dispatcher's kernel for
        # the op, which must not happen under other threads' calls of ops that did not change
        slot.live = live
        slot.path.install(slot, live)
        slot.installed = True
    registered_here = [o for o in OVERRIDES.values() if o.op.qualname == op.qualname and key in o.keys.values()]
    if not registered_here:
        slot.path.release(slot)
        del SLOTS[(op.qualname, key)]


def _sync_all() -> None:
    for (qualname, key), slot in list(SLOTS.items()):
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
        cond: ``cond(*args, **kwargs) -> bool`` with the op's signature; ``None`` means always. It runs
            on every call, so it must be cheap, return a bool and not raise (a raising cond, or a result
            with no truth value, counts as ``False`` and warns once). Optional attributes: ``why_not``
            (same signature, a reason string or ``None``, shown by :func:`explain`); ``cacheable = True``
            (its answer depends only on the arguments' signature and the tuning tables: it then runs once
            per signature, and an ``impl`` carrying ``plan`` is planned once per signature,
            :mod:`accel.kernels.core.plans`); ``floor`` (the fewest elements it ever takes:
            :mod:`accel.kernels.core.router` sends smaller calls to ATen with one compare).
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
    opr = resolve_op(op, error=KernelRegistrationError)
    refuse_without_autograd(opr)
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
    keys = {b: dispatch_key_of(b) for b in backends}
    name = name or f"{dsl}:{opr.qualname}"
    with LOCK:
        if name in OVERRIDES:
            raise KernelRegistrationError(
                f"accel.kernels.register: name {name!r} is already registered (for {OVERRIDES[name].op.qualname}). "
                f"Pass another name=, or unregister({name!r}) first.")
        if _compat.library_get_kernel() is None:
            raise KernelRegistrationError(
                f"accel.kernels.register({opr.qualname}): torch {torch.__version__} has no torch.library.get_kernel "
                f"(torch 2.9+), so the ATen kernel cannot be captured for fallback. Upgrade torch to 2.9 or later.")
        originals, paths = {}, {}
        for key in dict.fromkeys(keys.values()):
            slot = SLOTS.get((opr.qualname, key))
            has_kernel = slot.original is not None if slot else aten_kernel(opr, key) is not None
            if not has_kernel and fallback is None and (slot is None or slot.fallback is None):
                raise KernelRegistrationError(
                    f"accel.kernels.register({opr.qualname}): ATen has no kernel for it at dispatch key {key!r}, "
                    f"so there is nothing to fall back to when cond is false. Pass fallback= (an eager "
                    f"implementation), or register at another backend.")
            originals[key] = has_kernel
            if slot is None:
                paths[key] = choose_path(opr, key, has_kernel)  # may refuse: before any state changes
        ORDER[0] += 1
        ov = Override(name, opr, dsl.strip(), backends, keys, impl, cond, fallback, ORDER[0])
        OVERRIDES[name] = ov
        if ov.coverage is not None:
            table.add_coverage(ov.coverage[0], ov.dsl, ov.coverage[1])
        try:
            for key, has_kernel in originals.items():
                slot = SLOTS.get((opr.qualname, key))
                if slot is None:
                    slot = Slot(opr, key, paths[key])
                    # before accel's kernel is there: whether ATen's own is only a composite (alias keys)
                    slot.composite_only = not torch._C._dispatch_has_kernel_for_dispatch_key(
                        f"{opr.namespace}::{opr.symbol}", key)
                    SLOTS[(opr.qualname, key)] = slot
                if slot.fallback is None:
                    slot.fallback = fallback
                slot.path.add(slot, ov)
                _sync(opr, key)
            table.forget_floors()  # memoised answers may depend on which DSLs are registered (table.partial coverage)
        except BaseException:
            OVERRIDES.pop(name, None)
            if ov.coverage is not None:
                table.remove_coverage(ov.coverage[0], ov.dsl, ov.coverage[1])
            for key in originals:
                slot = SLOTS.get((opr.qualname, key))
                if slot is not None:
                    slot.path.remove(slot, ov)
                    _sync(opr, key)
            raise
        check_training("register")
    return name


def unregister(name: str, /) -> None:
    """Remove a registration; ATen (or the next override) runs for its op again.

    A :func:`disable` filter on this name is dropped with it: a later registration
    under the same name starts enabled.

    Raises:
        UnknownKernelError: (a ``LookupError``) no registration called ``name``.
    """
    with LOCK:
        ov = OVERRIDES.get(name)
        if ov is None:
            raise UnknownKernelError(f"accel.kernels.unregister: no override named {name!r}. Registered: "
                                     f"{', '.join(OVERRIDES) or 'none'}. See accel.kernels.overrides().")
        del OVERRIDES[name]
        if ov.coverage is not None:
            table.remove_coverage(ov.coverage[0], ov.dsl, ov.coverage[1])
        ov.plans.clear()  # torch's native registry may keep the node's closures (and so ov) alive
        STATE.disabled["name"].discard(name)  # a later registration of this name starts enabled
        for key in dict.fromkeys(ov.keys.values()):
            slot = SLOTS.get((ov.op.qualname, key))
            if slot is not None:
                slot.path.remove(slot, ov)
                _sync(ov.op, key)
        table.forget_floors()  # as in register: the other overrides' memoised answers are re-asked
        check_training("unregister")


def _filters(op: object, dsl: str | None, backend: str | None, name: str | None, fn: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if op is not None:
        out.append(("op", resolve_op(op).qualname))
    if dsl is not None:
        used = sorted({ov.dsl for ov in OVERRIDES.values()} | set(KNOWN_DSLS) | STATE.disabled["dsl"])
        if dsl not in used:  # a typo or another case would filter nothing, silently
            raise UnknownKernelError(f"accel.kernels.{fn}: no DSL named {dsl!r} (DSL names are case-sensitive). "
                                     f"Known: {', '.join(used)}. Pass one of those.")
        out.append(("dsl", dsl))
    if backend is not None:
        dispatch_key_of(backend, fn, f"{fn}(backend='cuda')")
        out.append(("backend", backend))
    if name is not None:
        if name not in OVERRIDES:
            raise UnknownKernelError(f"accel.kernels.{fn}: no override named {name!r}. Registered: "
                                     f"{', '.join(OVERRIDES) or 'none'}.")
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
    with LOCK:
        items = _filters(op, dsl, backend, name, "disable")
        if not items:
            STATE.disabled_all = True
        for kind, value in items:
            STATE.disabled[kind].add(value)
        _sync_all()
        check_training("disable")


def enable(*, op: object = None, dsl: str | None = None, backend: str | None = None, name: str | None = None) -> None:
    """Undo :func:`disable` for the same argument (no argument: undo ``disable()`` and every filter).

    Raises:
        UnknownKernelError: unknown op, name or DSL (as :func:`disable`). KernelRegistrationError: unknown backend.
    """
    with LOCK:
        items = _filters(op, dsl, backend, name, "enable")
        if not items:
            STATE.disabled_all = False
            for values in STATE.disabled.values():
                values.clear()
        for kind, value in items:
            STATE.disabled[kind].discard(value)
        _sync_all()
        check_training("enable")


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
    with LOCK:
        items = _filters(op, dsl, backend, name, "disabled")
        keys = [(kind, value) for kind, value in items] or [("all", None)]
        held = STATE.held
        for key in keys:  # counted: overlapping blocks (threads, generators) each hold their own
            held[key] = held.get(key, 0) + 1
        _sync_all()
        check_training("disabled")
    try:
        yield
    finally:
        with LOCK:
            for key in keys:
                held[key] -= 1
                if held[key] <= 0:
                    del held[key]
            _sync_all()
            check_training("disabled")


def _info(ov: Override) -> OverrideInfo:
    paths, reasons = {}, []
    active = False
    for key in dict.fromkeys(ov.keys.values()):
        slot = SLOTS.get((ov.op.qualname, key))
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
    with LOCK:
        return [_info(o) for o in sorted(OVERRIDES.values(), key=lambda o: o.order)]


def reset_counters(name: str | None = None, /) -> None:
    """Zero the counters (and forget failed shapes) of one registration, or of all."""
    with LOCK:
        targets = [OVERRIDES[name]] if name is not None and name in OVERRIDES else (
            list(OVERRIDES.values()) if name is None else [])
        if name is not None and not targets:
            raise UnknownKernelError(f"accel.kernels.reset_counters: no override named {name!r}.")
        for o in targets:
            o.routed = o.declined = o.failed = o.verified = 0
            o.max_error = 0.0
            o.denied.clear()
            o.plans.clear()  # answers memoised while a shape was deny-listed

