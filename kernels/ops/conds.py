"""Pieces every op's ``cond`` shares: vendor of the device, arch name, dtypes, alignment, reasons.

A ``cond`` runs on every call of its ATen op, so the checks here are cheap and
ordered cheapest first; each returns a short reason key (formatted into a
sentence only by ``why_not``, for :func:`accel.kernels.explain`). Works on
meta and fake tensors.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.errors import KernelRegistrationError
from accel.kernels.dsl.launch import arch, kernel_limits
from accel.kernels.dsl.triton_configs import for_wave
from accel.kernels.tuning import table

__all__ = ["ALIGN", "DTYPES", "Limits", "arch", "conds_from_keys", "device_reason", "device_types_for",
           "entry_reason", "table_declines", "table_reason", "floors", "tuned_config"]

#: dtypes the kernels compute (fp32 accumulation for all).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Row and base-pointer alignment the kernels' vector loads need, bytes.
ALIGN = 16


class Limits:
    """Shape bounds of one DSL's kernels for one op (rows ``N`` held in registers, etc.).

    Args:
        max_n_fwd: longest row the forward takes (elements).
        max_n_bwd: longest row the backward takes (elements).
        needs_weight: the kernels need the affine weight (and bias, for LayerNorm).
        max_numel: most elements (Helion's generated code indexes with int32).
    """

    def __init__(self, max_n_fwd: int, max_n_bwd: int, needs_weight: bool = False, max_numel: int = 1 << 62) -> None:
        self.max_n_fwd, self.max_n_bwd, self.needs_weight = max_n_fwd, max_n_bwd, needs_weight
        self.max_numel = max_numel


def device_types_for(backends: Sequence[str]) -> dict[str, str | None]:
    """Device type -> vendor requirement for the given accel backends.

    ``cuda`` requires an NVIDIA build (``torch.version.hip is None``), ``rocm`` a
    ROCm build; both use device type ``cuda``.
    """
    out: dict[str, str | None] = {}
    for b in backends:
        if b == "cuda":
            out["cuda"] = "nvidia" if out.get("cuda", "nvidia") == "nvidia" else None
        elif b == "rocm":
            out["cuda"] = "amd" if out.get("cuda", "amd") == "amd" else None
        else:
            out[b] = None
    return out


#: Reason sentences for the keys :func:`device_reason` returns.
DEVICE_REASONS = {
    "device": "device type {device!r} not served (registered for {devices})",
    "rocm": "ROCm build: the {dsl} kernels are registered for NVIDIA only (accel.kernels.core.spec.DSL_BACKENDS)",
    "not_rocm": "not a ROCm build",
    "dtype": "dtype {dtype} not in fp32/bf16/fp16",
}


def device_reason(input: torch.Tensor, devices: dict[str, str | None]) -> str | None:
    """``None`` when ``input``'s device, vendor and dtype are served; else a key of :data:`DEVICE_REASONS`."""
    if input.is_cuda:
        vendor = devices.get("cuda", "")
        if vendor and (vendor == "nvidia") == bool(torch.version.hip):  # read per call: tests fake ROCm
            return "rocm" if vendor == "nvidia" else "not_rocm"
        if vendor == "":
            return "device"
    elif input.device.type not in devices:
        return "device"
    if input.dtype not in DTYPES:
        return "dtype"
    return None


#: Reason sentences for the keys :func:`rows_reason` returns.
ROW_REASONS = {
    "layout": "input not contiguous",
    "align": "input or its rows not {align}-byte aligned (N={n}, {esize}-byte elements)",
    "long_row": "N={n} > {max_n} (row bound of the {dsl} kernel)",
    "empty": "empty input or rows",
}


def rows_reason(input: torch.Tensor, n: int, max_n: int, *, align: bool = True) -> str | None:
    """``None`` when ``input`` (rows of ``n``) is contiguous, aligned and ``n <= max_n``; else a :data:`ROW_REASONS` key."""
    if n < 1 or input.numel() == 0:
        return "empty"
    if not input.is_contiguous():
        return "layout"
    if align and (input.data_ptr() % ALIGN or (n * input.element_size()) % ALIGN):
        return "align"
    if n > max_n:
        return "long_row"
    return None


def reason_text(key: str, *, input: torch.Tensor, devices: dict[str, str | None], dsl: str, n: int,
                max_n: int, extra: dict[str, str] | None = None) -> str:
    """The sentence for a reason key of :func:`device_reason`, :func:`rows_reason` or ``extra``."""
    template = {**DEVICE_REASONS, **ROW_REASONS, **(extra or {})}.get(key, key)
    return template.format(device=input.device.type, devices=", ".join(devices), dtype=input.dtype, align=ALIGN,
                           n=n, esize=input.element_size(), max_n=max_n, dsl=dsl)


def key_text(key: str | None, t: torch.Tensor, op: str, dsl: str, devices: dict[str, str | None],
             reasons: dict[str, str]) -> str | None:
    """The sentence for reason key ``key`` of a cond over ``t`` (``None`` for ``None``): the tuning table's
    words for ``"table"``, else ``reasons[key]`` formatted with the DSL, device, backends and dtype."""
    if key is None:
        return None
    if key == "table":
        return table_reason(op, dsl, t, t.shape[-1] if t.dim() else 0)
    return reasons[key].format(dsl=dsl, device=t.device.type, devices=", ".join(devices), dtype=t.dtype)


def table_declines(op: str, dsl: str, t: torch.Tensor, numel: int, n: int) -> bool:
    """Whether the tuning table sends ``t`` (``numel`` elements in rows of ``n``) away from ``dsl``'s kernel.

    Reason key ``"table"``; :func:`table_reason` gives its sentence.
    """
    return n <= 0 or not table.takes(op, dsl, arch(t.device), table.dtype_name(t.dtype), numel // n, n)


def table_reason(op: str, dsl: str, t: torch.Tensor, n: int) -> str:
    """The sentence for reason key ``"table"`` (what :func:`accel.kernels.table.route` says)."""
    if n <= 0:
        return "empty rows (N=0)"
    dtype = table.dtype_name(t.dtype)
    if dtype not in table.DTYPE_NAMES:  # no table can hold it: say the dtype, not "run accel bench --tune"
        return DEVICE_REASONS["dtype"].format(dtype=t.dtype)
    return table.route(op, dsl, arch(t.device), dtype, t.numel() // n, n) or "tuning table"


def entry_reason(input: torch.Tensor, numel: int, op: str, dsl: str, devices: dict[str, str | None],
                 max_numel: int) -> str | None:
    """The checks every cond starts with, cheapest first: the tuning floor (small inputs: one compare,
    key ``"table"``), the element bound (``"numel_big"``), then device, vendor and dtype
    (:func:`device_reason`). ``None`` when all pass."""
    if numel < table.floor(op, dsl):
        return "table"
    if numel > max_numel:
        return "numel_big"
    return device_reason(input, devices)


def floors(fwd, bwd, family: str, dsl: str):
    """Give the ``(fwd, bwd)`` conds of ``family`` their ``floor`` and ``cacheable`` attributes and return them.

    ``cacheable = True``: the built-in conds read only what :func:`accel.kernels.core.plans.signature`
    keys by (dtypes, devices, shapes, strides, 16-byte alignment, the other arguments' values) and
    the tuning tables, so the registry asks each once per signature (:mod:`accel.kernels.core.plans`).

    ``cond.floor()`` is :func:`accel.kernels.table.floor` for the op and DSL: the size below
    which the cond declines (:func:`entry_reason`'s first check, on the same element count as
    the op's first tensor argument). accel's router uses it to send small calls to ATen with one
    compare for all overrides of the op (:func:`accel.kernels.core.router._floor_gate`).
    """
    fwd.floor = functools.partial(table.floor, f"{family}_fwd", dsl)
    bwd.floor = functools.partial(table.floor, f"{family}_bwd", dsl)
    fwd.cacheable = bwd.cacheable = True
    return fwd, bwd


def _subjects(family: str, key: Callable[..., str | None], names: str | Sequence[str]
              ) -> Callable[[tuple, dict], tuple]:
    """``pick(args, kwargs)``: the values of ``key``'s parameters ``names`` in one call, read positionally or
    by keyword as the call passed them. Raises :class:`~accel.errors.KernelRegistrationError` where ``key``
    has no parameter of such a name."""
    names = (names,) if isinstance(names, str) else tuple(names)
    signature = inspect.signature(key)
    params = list(signature.parameters)
    unknown = [n for n in names if n not in params]
    if unknown:
        raise KernelRegistrationError(
            f"accel.kernels conds of {family}: subject {', '.join(map(repr, unknown))} is no parameter of "
            f"{getattr(key, '__qualname__', key)}{signature}. Name the parameters whose tensor the "
            f"reason sentence is about (subject_fwd / subject_bwd).")
    where = tuple((params.index(n), n, signature.parameters[n].default) for n in names)

    def pick(args: tuple, kwargs: dict) -> tuple:  # a subject the call leaves out has its default
        return tuple(args[i] if i < len(args) else kwargs.get(n, default) for i, n, default in where)

    return pick


def conds_from_keys(family: str, dsl: str, devices: dict[str, str | None],
                    reasons: Mapping[str, str] | Callable[..., str | None],
                    key_fwd: Callable[..., str | None], key_bwd: Callable[..., str | None], *,
                    subject_fwd: str | Sequence[str] = "input", subject_bwd: str | Sequence[str] = "input",
                    ) -> tuple[Callable[..., bool], Callable[..., bool]]:
    """The ``(forward cond, backward cond)`` of op family ``family`` for ``dsl`` from its two reason-key
    functions: each cond is ``key(...) is None``, with ``why_not`` (the sentence for the key, ``None`` where
    the kernel takes the call), ``floor`` and ``cacheable`` (:func:`floors`).

    Args:
        family: the family's name (``"swiglu"``); the tuning-table ops are ``<family>_fwd`` and ``<family>_bwd``.
        dsl: the DSL (``"triton"``), said in the sentences.
        devices: :func:`device_types_for` of the registration's backends.
        reasons: the sentences: reason key -> template (formatted by :func:`key_text` about the first subject:
            ``{dsl}``, ``{device}``, ``{devices}``, ``{dtype}``; ``"table"`` is the tuning table's own), or
            ``text(key, op, *subjects) -> str`` where an op's sentences need more (called for keys only,
            never ``None``; ``op`` is the tuning-table op of the direction).
        key_fwd, key_bwd: the ops' signatures (defaults included: ``eps=1e-5``, ``unit_offset=False``), each
            returning a reason key or ``None`` (the kernel takes the call). The conds pass every argument
            on as they get it, positional or keyword, and have these signatures (``inspect.signature``).
        subject_fwd, subject_bwd: the parameter (or a sequence of parameters) of ``key_fwd`` / ``key_bwd``
            whose values the sentence is about, first the tensor whose device, dtype and shape it names
            (``"input"``; ``"grad_q"`` for RoPE's backward, ``("output", "grad_output")`` for softmax's).

    Returns:
        ``(fwd, bwd)``: ``fwd(*args, **kwargs) -> bool`` with ``fwd.why_not(*args, **kwargs) -> str | None``,
        ``fwd.floor() -> int`` and ``fwd.cacheable = True``; ``bwd`` likewise.

    Raises:
        KernelRegistrationError: (a ``ValueError``) a subject names no parameter of its key function.

    Example:
        >>> import torch
        >>> from accel.kernels.ops.conds import DEVICE_REASONS, conds_from_keys, device_types_for
        >>> def key(input, eps=1e-5):
        ...     return None if input.dim() == 2 else "shape"
        >>> fwd, bwd = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]),
        ...                            {**DEVICE_REASONS, "shape": "input not 2-d"}, key, key)
        >>> fwd(torch.empty(2, 3)), fwd(torch.empty(3)), fwd.why_not(torch.empty(3), eps=1e-6)
        (True, False, 'input not 2-d')
    """
    if callable(reasons):
        text = reasons
    else:
        def text(key: str, op: str, t: torch.Tensor, *others: Any) -> str | None:
            return key_text(key, t, op, dsl, devices, reasons)

    def why(key: Callable[..., str | None], op: str, subject: str | Sequence[str]) -> Callable[..., str | None]:
        pick = _subjects(family, key, subject)

        def why_not(*args: Any, **kwargs: Any) -> str | None:
            found = key(*args, **kwargs)
            return None if found is None else text(found, op, *pick(args, kwargs))

        return why_not

    def fwd(*args: Any, **kwargs: Any) -> bool:
        return key_fwd(*args, **kwargs) is None

    def bwd(*args: Any, **kwargs: Any) -> bool:
        return key_bwd(*args, **kwargs) is None

    for cond, key, direction, subject in ((fwd, key_fwd, "fwd", subject_fwd), (bwd, key_bwd, "bwd", subject_bwd)):
        cond.why_not = why(key, f"{family}_{direction}", subject)  # type: ignore[attr-defined]
        cond.__signature__ = cond.why_not.__signature__ = inspect.signature(key)  # type: ignore[attr-defined]
    return floors(fwd, bwd, family, dsl)


def tuned_config(op: str, dsl: str, t: torch.Tensor, m: int, n: int, default: Any) -> Any:
    """The tuning table's kernel config of ``dsl`` for ``op`` on ``t``'s arch and dtype at ``[m, n]``
    (:func:`accel.kernels.table.config`), else ``default``: a config, or a callable of ``n``
    returning one (called only on a miss), adapted to the device's wave size
    (:func:`accel.kernels.dsl.triton_configs.for_wave`: half the warps on AMD CDNA's wave64, as is on
    wave32 devices). One O(1) lookup; the impls call it per launch."""
    cfg = table.config(op, dsl, arch(t.device), table.dtype_name(t.dtype), m, n)
    if cfg is not None:
        return cfg
    cfg = default(n) if callable(default) else default
    wave = kernel_limits(t.device).wave_size
    return for_wave(cfg, wave) if wave > 32 else cfg
