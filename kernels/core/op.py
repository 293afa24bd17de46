"""An operator overload as accel resolves it, the ATen kernel under it, and the backends' dispatch keys.

The bottom of the kernel core: imports nothing else of :mod:`accel.kernels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from accel import _compat
from accel._options import did_you_mean
from accel.backends import backend_for_device, registered
from accel.errors import KernelRegistrationError, UnknownKernelError

__all__ = ["KNOWN_DSLS", "OVERRIDE_WARNING", "Op", "aten_kernel", "bare_overload", "describe_shapes",
           "dispatch_key_of", "resolve_op", "shape_key", "tensor_overloads", "vendor_at"]

#: The warning torch emits once when a Python kernel replaces a registered one (both install paths hide it).
OVERRIDE_WARNING = r".*(Overriding a previously registered kernel|Warning only once for all operators).*"

@dataclass(frozen=True)
class Op:
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


def tensor_overloads(packet: Any) -> list[str]:
    """Overloads of ``packet`` that take a tensor and are not ``out=`` variants (TorchScript scalar ones excluded)."""
    found = []
    for overload in packet.overloads():
        args = getattr(packet, overload)._schema.arguments
        if any("Tensor" in str(a.type) for a in args) and not any(a.is_out for a in args):
            found.append(overload)
    return found


def bare_overload(ns: str, name: str, packet: Any, error: type[Exception]) -> str:
    """The overload an op name without one means: ``default`` when it is the only tensor overload, else an error.

    ``aten::sin`` means ``sin.default`` (``sin.out`` and the TorchScript ``sin.int``
    do not count); ``aten::add`` is ambiguous: ``add.default`` is TorchScript's
    ``add(Scalar, Scalar)``, which tensor calls never reach.
    """
    overloads = packet.overloads()
    tensor = tensor_overloads(packet)
    if tensor == ["default"] or (len(overloads) == 1 and overloads[0] == "default"):
        return "default"
    example = f"'{ns}::{name}.{tensor[0] if tensor else overloads[0]}'"
    raise error(f"accel.kernels: op '{ns}::{name}' names no single overload: it has {', '.join(overloads)} "
                f"(taking tensors, not out=: {', '.join(tensor) or 'none'}) and none is 'default'. Name one, e.g. "
                f"{example} or torch.ops.{ns}.{name}.{tensor[0] if tensor else overloads[0]}.")


def resolve_op(op: object, *, error: type[Exception] = UnknownKernelError) -> Op:
    """``"aten::_fused_rms_norm"``, ``"_fused_rms_norm"``, ``"aten::add.Tensor"`` or an OpOverload -> :class:`Op`.

    A name (or OpOverloadPacket) without an overload must be unambiguous; see :func:`bare_overload`.
    """
    if isinstance(op, torch._ops.OpOverload):
        ns, _, name = op._schema.name.partition("::")
        return Op(ns, name, op._overloadname, getattr(getattr(torch.ops, ns), name))
    if isinstance(op, torch._ops.OpOverloadPacket):
        ns, _, name = op._qualified_op_name.partition("::")
        return Op(ns, name, bare_overload(ns, name, op, error), op)
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
        names = {n.partition("::")[2].partition(".")[0] for n in torch._C._dispatch_get_all_op_names()
                 if n.startswith(f"{ns}::")}
        hint = did_you_mean(name, names) if name not in names else ""
        raise error(f"accel.kernels: unknown op {op!r} ({type(exc).__name__}: {exc}).{hint} The op must exist in "
                    f"torch.ops (e.g. 'aten::_fused_rms_norm'). Check the spelling and the overload name.") from None
    return Op(ns, name, overload or bare_overload(ns, name, packet, error), packet)


def shape_key(args: Sequence[Any]) -> tuple:
    """Shapes and dtypes of the tensor arguments: what the fail-safe deny list is keyed by."""
    return tuple((tuple(a.shape), a.dtype) for a in args if isinstance(a, torch.Tensor))


def describe_shapes(args: Sequence[Any]) -> str:
    parts = [f"{list(a.shape)} {str(a.dtype).removeprefix('torch.')}" for a in args if isinstance(a, torch.Tensor)]
    return ", ".join(parts) or "no tensor arguments"



def dispatch_key_of(backend: str, fn: str = "register", arg: str = "backends=['cuda']") -> str:
    found = registered()
    if backend not in found:
        raise KernelRegistrationError(
            f"accel.kernels.{fn}: unknown backend {backend!r}.{did_you_mean(backend, found)} Valid: "
            f"{', '.join(found)}. Pass backend names (e.g. {arg}), not device strings.")
    return found[backend].dispatch_key


#: DSL names a filter may name before any registration uses them (those of accel's built-in
#: kernels and of torch's native DSL registry).
KNOWN_DSLS = ("triton", "helion", "cutedsl")


def vendor_at(key: str) -> str | None:
    """The backend that serves dispatch key ``key`` in this torch build, or ``None`` when that is not one name.

    ``"CUDA"`` is served by ``"rocm"`` on a ROCm build of torch and by ``"cuda"``
    otherwise (the rule of :func:`accel.backend`); a key with one backend is that
    backend's. Reads build facts only: initialises no device.
    """
    found = registered()
    names = [n for n, cls in found.items() if cls.dispatch_key == key]
    if len(names) == 1:
        return names[0]
    device_types = {found[n].torch_device_type for n in names}
    if len(device_types) != 1 or next(iter(device_types)) not in found:
        return None
    name = backend_for_device(torch.device(device_types.pop())).name
    return name if name in names else None


def aten_kernel(op: Op, key: str) -> Any:
    """The kernel ATen runs for ``op`` at ``key`` now (SafeKernelFunction), or ``None`` when there is none."""
    get_kernel = _compat.library_get_kernel()
    if get_kernel is None:
        return None
    try:
        return get_kernel(op.qualname, key)
    except RuntimeError:
        return None
