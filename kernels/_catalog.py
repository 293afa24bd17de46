"""accel's built-in kernels: which are usable here, and installing them.

Availability is decided without importing any DSL runtime or initialising a
device: package metadata for the DSL, accel's probe for the hardware. The
built-in kernels are measured on NVIDIA GPUs only, so they serve the ``cuda``
backend; elsewhere they are listed as unavailable with the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from accel.errors import UnknownKernelError

__all__ = ["Availability", "BUILTIN", "availability", "install"]

#: (kernel family, DSL, impl module, backends it is measured on), in preference order.
BUILTIN: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("rms_norm", "triton", "accel.kernels.ops.rms_norm.triton_impl", ("cuda",)),
    ("rms_norm", "helion", "accel.kernels.ops.rms_norm.helion_impl", ("cuda",)),
    ("softmax", "triton", "accel.kernels.ops.softmax.triton_impl", ("cuda",)),
    ("softmax", "helion", "accel.kernels.ops.softmax.helion_impl", ("cuda",)),
    ("softmax", "cutedsl", "accel.kernels.ops.softmax.cutedsl_impl", ("cuda",)),
    ("layer_norm", "triton", "accel.kernels.ops.layer_norm.triton_impl", ("cuda",)),
    ("layer_norm", "helion", "accel.kernels.ops.layer_norm.helion_impl", ("cuda",)),
    ("layer_norm", "cutedsl", "accel.kernels.ops.layer_norm.cutedsl_impl", ("cuda",)),
)


#: Where accel's CuTeDSL kernels run, said beside their availability (the arch is checked per call:
#: knowing it here would initialise the device).
_CUTEDSL_SCOPE = "CuTeDSL kernels run on sm_90+ GPUs, only for the shapes a tuning table routes to them"


@dataclass(frozen=True)
class Availability:
    """Whether one built-in kernel can be installed in this process.

    Attributes:
        kernel: kernel family (``"rms_norm"``, ``"softmax"``, ``"layer_norm"``: forward and backward each).
        dsl: ``"triton"``, ``"helion"``, ``"cutedsl"``.
        backends: backends it is measured on (``("cuda",)``).
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
    from ._registry import _OVERRIDES

    return set(_OVERRIDES)


def availability() -> list[Availability]:
    """Every built-in kernel with whether it can be installed here and why.

    Never imports a DSL runtime and never initialises a device (``accel info``
    and ``accel kernels`` show this list).

    Example:
        >>> import accel.kernels as ak
        >>> sorted({a.dsl for a in ak.availability()})
        ['cutedsl', 'helion', 'triton']
    """
    from accel import probes

    found = probes()
    names = _installed_names()
    out = []
    for kernel, dsl, module, backends in BUILTIN:
        ok, why = importlib.import_module(module).available()
        usable = [b for b in backends if b in found and found[b].available]
        if not usable:  # the hardware first: installing a DSL would not help here
            no_hw = "no usable backend among " + ", ".join(
                f"{b} ({found[b].reason if b in found else 'not registered'})" for b in backends)
            why = no_hw + ("" if ok else f"; also {why}")
            ok = False
        installed = f"{kernel}_fwd.{dsl}" in names or f"{kernel}_bwd.{dsl}" in names
        if dsl == "cutedsl":  # the package says nothing of where its kernels run, nor how they are called
            from accel.kernels._cutedsl import ffi_reason

            ffi = ffi_reason()
            call = "launched through TVM-FFI" if ffi is None else \
                f"launched through CuTeDSL's executor, ~15 µs more host time per call: {ffi}"
            why += f" ({_CUTEDSL_SCOPE}{'; the backward only' if kernel == 'layer_norm' else ''}; {call})"
        out.append(Availability(kernel, dsl, backends, ok, why, installed))
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
    for asked, known, what in ((want_dsl, {d for _, d, _, _ in BUILTIN}, "DSL"),
                               (want_kernel, {k for k, _, _, _ in BUILTIN}, "kernel family")):
        unknown = sorted(map(repr, asked - known)) if asked is not None else []
        if unknown:
            raise UnknownKernelError(f"accel.kernels.install: unknown {what} {', '.join(unknown)}; the built-in "
                                     f"kernels have {', '.join(sorted(known))} (names are lower case).")
    added: list[str] = []
    try:
        for a in availability():
            if not a.available or a.installed:
                continue
            if want_dsl is not None and a.dsl not in want_dsl:
                continue
            if want_kernel is not None and a.kernel not in want_kernel:
                continue
            from accel import probes

            found = probes()
            backends = [b for b in a.backends if found[b].available]
            module = next(m for k, d, m, _ in BUILTIN if k == a.kernel and d == a.dsl)
            added += importlib.import_module(module).register(backends)
    except BaseException:  # all or nothing: what this call registered goes again
        from accel.kernels import unregister

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
