"""An op family declared once: its forward and backward ops, reference, impls per DSL, tuning-table names.

Each op folder ``accel/kernels/ops/<name>/`` declares ``FAMILY = OpFamily(...)`` in its ``__init__.py``
(importing no DSL), and each of its impl modules (``<dsl>_impl.py``, imported only when registered or
asked for availability) provides:

- ``DSL``: the DSL name (``"triton"``);
- ``available() -> (bool, reason)``: whether the DSL is usable here (package metadata, no import);
- ``forward`` and ``backward``: functions with the ATen ops' signatures, either may be ``None``
  (a DSL that has only a backward kernel);
- ``conds(backends) -> (forward cond, backward cond)``: :func:`accel.kernels.register` conds;
- optionally ``covers(table_op, n, dtype_name) -> bool``, for a DSL whose kernels take only some row
  lengths (the tuning table's partial DSLs), and ``availability_note() -> str``, said beside its
  availability.

:meth:`OpFamily.register` is the one registration of every family: the backward before the forward
(a forward override where ATen's forward is only a composite needs its backward in place), both or
neither.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from accel.kernels.tuning import table

from .autograd import declare_backward
from .registry import register, unregister

__all__ = ["DSL_BACKENDS", "DSL_BACKEND_NOTES", "GPU_BACKENDS", "OpFamily"]

#: The GPU backends an op family's kernels are registered for by default (every vendor Triton runs on).
GPU_BACKENDS = ("cuda", "rocm", "xpu")
#: Where each DSL's kernels run at all: a family's kernels of a DSL are registered for the family's
#: backends that are also listed here.
DSL_BACKENDS: dict[str, tuple[str, ...]] = {
    # ROCm builds of torch bring their Triton (pytorch-triton-rocm), Intel's XPU builds Intel's
    # (pytorch-triton-xpu; torch/_native/triton_utils.py names the triton-xpu distribution too).
    "triton": ("cuda", "rocm", "xpu"),
    "helion": ("cuda",),
    "cutedsl": ("cuda",),
}
#: Why a DSL is left off a vendor (``accel kernels`` and the conds' reasons say it).
DSL_BACKEND_NOTES: dict[str, str] = {
    "helion": ("Helion kernels are registered for NVIDIA only: torch's native DSL registry says Helion is not "
               "available on ROCm builds nor on builds without CUDA (torch/_native/helion_utils.py, "
               "_check_runtime_available, torch 2.15)"),
    "cutedsl": "CuTeDSL (nvidia-cutlass-dsl) compiles for NVIDIA GPUs only",
}


@dataclass(frozen=True)
class OpFamily:
    """One op family: forward and backward ATen ops, their eager reference, the impls per DSL.

    Args:
        name: family name (``"rms_norm"``): registrations are ``<name>_fwd.<dsl>`` and ``<name>_bwd.<dsl>``,
            tuning-table ops ``<name>_fwd`` and ``<name>_bwd``.
        package: the op folder's package (``__name__`` in its ``__init__.py``).
        forward: the forward op (``"aten::_fused_rms_norm"``; any namespace).
        backward: the op the forward's autograd formula calls, or ``None``.
        reference: ``(forward, backward)`` eager implementations with the ops' signatures (the oracle of
            the tests; the fallback where ``fallback_to_reference``).
        impls: DSL -> impl module name inside ``package``, in preference order (``{"triton": "triton_impl"}``).
        backends: the backends the built-in kernels are registered for by :func:`accel.kernels.install`
            (default :data:`GPU_BACKENDS`), each DSL's only where it runs (:data:`DSL_BACKENDS`,
            :meth:`backends_for`). Without a tuning table for the device's arch they are installed and
            decline (:mod:`accel.kernels.tuning.table`).
        fallback_to_reference: pass the reference as ``fallback=`` (where ATen has no kernel at a key:
            ``aten::_fused_rms_norm_backward`` on CPU).
        bench: module name inside ``package`` with the benchmark's ``cases`` and ``peers``, or ``None``.
    """

    name: str
    package: str
    forward: str
    backward: str | None
    reference: tuple[Callable | None, Callable | None]
    impls: Mapping[str, str]
    backends: tuple[str, ...] = GPU_BACKENDS
    fallback_to_reference: bool = False
    bench: str | None = None

    def __post_init__(self) -> None:
        table.declare_ops(*self.table_ops, dsls=self.dsls)
        if self.backward is not None:
            declare_backward(self.forward, self.backward)

    @property
    def table_ops(self) -> tuple[str, str]:
        """The tuning-table op names: ``(<name>_fwd, <name>_bwd)``."""
        return f"{self.name}_fwd", f"{self.name}_bwd"

    @property
    def dsls(self) -> tuple[str, ...]:
        """The DSLs with an impl, in preference order."""
        return tuple(self.impls)

    def backends_for(self, dsl: str) -> tuple[str, ...]:
        """The backends ``dsl``'s kernels of this family are registered for: :attr:`backends` less the GPU
        vendors (:data:`GPU_BACKENDS`) that :data:`DSL_BACKENDS` does not list for the DSL (``("cuda",)``
        for Helion and CuTeDSL); other backends a family names (``"cpu"``, for interpreter runs) stay."""
        runs = DSL_BACKENDS.get(dsl, GPU_BACKENDS)
        return tuple(b for b in self.backends if b not in GPU_BACKENDS or b in runs)

    def impl(self, dsl: str) -> ModuleType:
        """The impl module of ``dsl`` (imports no DSL runtime: kernels load at their first call).

        Raises:
            KeyError: no impl of ``dsl`` in this family.
        """
        return importlib.import_module(f"{self.package}.{self.impls[dsl]}")

    def bench_module(self) -> ModuleType | None:
        """The module with this family's benchmark cases and peers, or ``None``."""
        return None if self.bench is None else importlib.import_module(f"{self.package}.{self.bench}")

    def register(self, dsl: str, backends: Sequence[str] | None = None, *, suffix: str = "") -> list[str]:
        """Register ``dsl``'s kernels of this family for ``backends`` (default :meth:`backends_for`): the
        backward first, then the forward; both or neither.

        Returns:
            The registration names, forward first (``rms_norm_fwd.triton<suffix>``, ``rms_norm_bwd.triton<suffix>``).

        Raises:
            KeyError: no impl of ``dsl``.
            KernelRegistrationError: as :func:`accel.kernels.register` (nothing stays registered).
        """
        module = self.impl(dsl)
        backends = tuple(self.backends_for(dsl) if backends is None else backends)
        fwd_cond, bwd_cond = module.conds(backends)
        covers = getattr(module, "covers", None)
        steps = ((self.backward, module.backward, bwd_cond, self.reference[1], self.table_ops[1]),
                 (self.forward, module.forward, fwd_cond, self.reference[0], self.table_ops[0]))
        names: list[str] = []
        try:
            for op, impl, cond, ref, table_op in steps:
                if op is None or impl is None:
                    continue
                if covers is not None and cond is not None:
                    cond.coverage = (table_op, functools.partial(covers, table_op))
                names.append(register(op, impl=impl, cond=cond, backends=backends, dsl=module.DSL,
                                      name=f"{table_op}.{dsl}{suffix}",
                                      fallback=ref if self.fallback_to_reference else None))
        except BaseException:
            for name in names:
                unregister(name)
            raise
        return names[::-1]

    def registrar(self, dsl: str) -> Callable[..., list[str]]:
        """``register(backends=the DSL's family backends, *, suffix="")`` for one DSL: what each impl module
        exports."""

        def register_dsl(backends: Sequence[str] | None = None, *, suffix: str = "") -> list[str]:
            return self.register(dsl, backends, suffix=suffix)

        register_dsl.__doc__ = (f"Register the {dsl} kernels of {self.name} (:meth:`accel.kernels.core.spec."
                                f"OpFamily.register`); returns the registration names, forward first.")
        register_dsl.__qualname__ = register_dsl.__name__ = "register"
        return register_dsl

