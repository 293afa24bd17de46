"""accel's built-in kernels: the op families found under :mod:`accel.kernels.ops`, which are usable here,
and installing them.

An op family is a folder ``ops/<name>/`` whose ``__init__.py`` declares ``FAMILY``
(:class:`~accel.kernels.core.spec.OpFamily`); :func:`families` finds them, so a new op needs no edit
here. Availability is decided without importing any DSL runtime or initialising a device: package
metadata for the DSL, accel's probe for the hardware.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from accel._probe import probes
from accel.errors import UnknownKernelError
from accel.kernels import ops
from accel.kernels.core.override import OVERRIDES
from accel.kernels.core.registry import unregister
from accel.kernels.core.spec import DSL_BACKEND_NOTES, OpFamily
from accel.kernels.tuning import table

__all__ = ["Availability", "availability", "builtin", "families", "install", "tuning_state", "tuning_states"]


def families() -> dict[str, OpFamily]:
    """Every op family under :mod:`accel.kernels.ops` (``{"layer_norm": ..., "rms_norm": ..., ...}``), by name.

    A subpackage of ``accel.kernels.ops`` (any folder on its ``__path__``) that declares ``FAMILY``
    is one; the rest are not. Importing a family imports no DSL runtime.
    """
    found: dict[str, OpFamily] = {}
    for info in sorted(pkgutil.iter_modules(ops.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        family = getattr(importlib.import_module(f"{ops.__name__}.{info.name}"), "FAMILY", None)
        if isinstance(family, OpFamily):
            found[family.name] = family
    return found


def builtin() -> tuple[tuple[str, str, str, tuple[str, ...]], ...]:
    """``(family, DSL, impl module, backends)`` per built-in kernel, families by name, DSLs in preference order;
    ``backends`` are where that DSL's kernels are registered (Triton: ``cuda``, ``rocm``, ``xpu``; Helion and
    CuTeDSL: ``cuda``, :data:`accel.kernels.core.spec.DSL_BACKENDS`)."""
    return tuple((f.name, dsl, f"{f.package}.{f.impls[dsl]}", f.backends_for(dsl))
                 for f in families().values() for dsl in f.dsls)


@dataclass(frozen=True)
class Availability:
    """Whether one built-in kernel can be installed in this process.

    Attributes:
        kernel: kernel family (``"rms_norm"``, ``"softmax"``, ``"layer_norm"``: forward and backward each).
        dsl: ``"triton"``, ``"helion"``, ``"cutedsl"``.
        backends: backends it is registered for (``("cuda", "rocm", "xpu")`` for Triton, ``("cuda",)`` for
            Helion and CuTeDSL). On an arch without a tuning table it is installed and declines.
        available: the DSL is installed and one of ``backends`` is usable here.
        reason: one line: the DSL version found, or what is missing.
        installed: registered in this process (by :func:`install` or the impl's ``register``).
    """

    kernel: str
    dsl: str
    backends: tuple[str, ...]
    available: bool
    reason: str
    installed: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["backends"] = list(self.backends)
        return d


def _installed_names() -> set[str]:
    return set(OVERRIDES)


def availability() -> list[Availability]:
    """Every built-in kernel with whether it can be installed here and why.

    Never imports a DSL runtime and never initialises a device (``accel info``
    and ``accel kernels`` show this list).

    Example:
        >>> import accel.kernels as ak
        >>> sorted({a.dsl for a in ak.availability()})
        ['cutedsl', 'helion', 'triton']
    """
    found = probes()
    names = _installed_names()
    out = []
    for kernel, dsl, module_name, backends in builtin():
        module = importlib.import_module(module_name)
        ok, why = module.available()
        usable = [b for b in backends if b in found and found[b].available]
        if not usable:  # the hardware first: installing a DSL would not help here
            no_hw = "no usable backend among " + ", ".join(
                f"{b} ({found[b].reason if b in found else 'not registered'})" for b in backends)
            why = no_hw + ("" if ok else f"; also {why}")
            if dsl in DSL_BACKEND_NOTES:
                why += f" ({DSL_BACKEND_NOTES[dsl]})"
            ok = False
        installed = f"{kernel}_fwd.{dsl}" in names or f"{kernel}_bwd.{dsl}" in names
        note = getattr(module, "availability_note", None)
        if note is not None:  # where the kernels run and how they are called: the package metadata says neither
            why += f" ({note()})"
        out.append(Availability(kernel, dsl, backends, ok, why, installed))
    return out


def tuning_state(kernel: str, dsl: str, arch: str) -> str:
    """How ``arch``'s tuning tables route ``dsl``'s kernels of family ``kernel``, in one line: the forward's
    and backward's :func:`accel.kernels.tuning.table.arch_state`, once where they agree
    (``"not tuned for gfx942: run `accel bench --tune`"``).

    Raises:
        UnknownKernelError: ``kernel`` is no built-in family.
    """
    known = families()
    if kernel not in known:
        raise UnknownKernelError(f"accel.kernels.tuning_state: unknown kernel family {kernel!r}; the built-in "
                                 f"kernels have {', '.join(sorted(known))}.")
    states = {op: table.arch_state(op, dsl, arch) for op in known[kernel].table_ops}
    if len(set(states.values())) == 1:
        return next(iter(states.values()))
    return "; ".join(f"{op.rpartition('_')[2]}: {state}" for op, state in states.items())


def tuning_states(arch: str, backend: str) -> dict[tuple[str, str], str | None]:
    """``(kernel, dsl) -> state`` for every built-in kernel on ``arch`` of backend ``backend`` (``"rocm"``):
    :func:`tuning_state` prefixed ``"installed, "`` where the kernel is registered in this process; ``None``
    where the kernel is not registered for ``backend`` at all (its DSL does not run there)."""
    names = _installed_names()
    out: dict[tuple[str, str], str | None] = {}
    for kernel, dsl, _module, backends in builtin():
        if backend not in backends:
            out[(kernel, dsl)] = None
            continue
        state = tuning_state(kernel, dsl, arch)
        installed = f"{kernel}_fwd.{dsl}" in names or f"{kernel}_bwd.{dsl}" in names
        out[(kernel, dsl)] = f"installed, {state}" if installed else state
    return out


def install(*, dsl: str | Sequence[str] | None = None, kernels: str | Sequence[str] | None = None) -> list[str]:
    """Register every available built-in kernel (or those of ``dsl`` / ``kernels``) that is not yet registered.

    Where a DSL or the hardware is missing the kernel is skipped; :func:`availability`
    says why. Triton comes before Helion, and Helion before CuTeDSL, for the same op (first matching cond wins).
    The CuTeDSL LayerNorm kernel is a backward only (``layer_norm_bwd.cutedsl``).

    Args:
        dsl: only these DSLs (``"triton"``, ``"helion"``, ``"cutedsl"``), a name or a sequence of names.
        kernels: only these kernel families (``"rms_norm"``, ``"softmax"``, ``"layer_norm"``).

    Returns:
        Registration names added (empty on a machine without a served GPU).

    Raises:
        UnknownKernelError: ``dsl`` or ``kernels`` names one no built-in kernel has (nothing is installed).
        TypeError: ``dsl`` or ``kernels`` is neither a name nor a sequence of names.
        KernelRegistrationError: a registration failed; the ones this call had made are removed again.

    Example:
        >>> import accel.kernels as ak
        >>> names = ak.install()   # [] on a CPU-only machine
        >>> all(n in {o.name for o in ak.overrides()} for n in names)
        True
    """
    want_dsl, want_kernel = _names(dsl, "dsl"), _names(kernels, "kernels")
    known_families = families()
    for asked, known, what in ((want_dsl, {d for f in known_families.values() for d in f.dsls}, "DSL"),
                               (want_kernel, set(known_families), "kernel family")):
        unknown = sorted(map(repr, asked - known)) if asked is not None else []
        if unknown:
            raise UnknownKernelError(f"accel.kernels.install: unknown {what} {', '.join(unknown)}; the built-in "
                                     f"kernels have {', '.join(sorted(known))} (names are lower case).")
    added: list[str] = []
    found = probes()
    try:
        for a in availability():
            if not a.available or a.installed:
                continue
            if want_dsl is not None and a.dsl not in want_dsl:
                continue
            if want_kernel is not None and a.kernel not in want_kernel:
                continue
            backends = [b for b in a.backends if b in found and found[b].available]
            added += known_families[a.kernel].impl(a.dsl).register(backends)
    except BaseException:  # all or nothing: what this call registered goes again
        for name in added:
            unregister(name)
        raise
    return added


def _names(value: str | Sequence[str] | None, what: str) -> set[str] | None:
    """``install``'s ``dsl``/``kernels`` argument as a set of names (None: all)."""
    if value is None:
        return None
    if isinstance(value, str):
        return {value}
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return set(value)
    raise TypeError(f"accel.kernels.install: {what} must be a name or a sequence of names (str), not "
                    f"{type(value).__name__} {value!r}; see accel.kernels.availability() for the names.")
