"""Per-signature memo of an override's answer: a routed call with a known signature runs no cond.

A cond that carries ``cacheable = True`` promises that its answer depends only on
:func:`signature` of the call's arguments and on the tuning tables (a change of
those, :data:`accel.kernels.tuning.table.GENERATION`, empties the memo). For such an
override, the registry (:meth:`accel.kernels.core.override.Override.take`) runs the
cond once per signature and keeps its answer: ``DECLINE``, or the function that
answers the call. That function is ``impl.plan(*args)`` where the impl has a
``plan`` attribute (the built-in Triton impls: the launch config, output shapes
and compiled kernel fixed once, :class:`accel.kernels.dsl.triton_utils.LaunchPlan`), else
the impl itself.

Why: on the H200's host a routed RMSNorm call cost 39 µs where ATen's costs 17
(``benchmarks/launch_cost.py`` on the H200); the cond, two tuning
table lookups and Triton's per-call specialization key were about half of it.
"""

from __future__ import annotations

from typing import Any

import torch

from accel import _compat

__all__ = ["DECLINE", "FALLBACK", "MAX_ENTRIES", "signature"]

#: The memo's answer for a signature the cond declined.
DECLINE = object()
#: What ``take`` returns when planning failed for this call: the caller answers with ATen.
FALLBACK = object()
#: Signatures kept per override before the memo is emptied (a bound for callers that vary a float
#: argument or the alignment of their tensors call after call).
MAX_ENTRIES = 256

_Tensor = torch.Tensor
_address = _compat.address_reader()
_SCALARS = (int, float, bool, type(None))


def signature(args: tuple) -> tuple | None:
    """What a cacheable cond may depend on: per tensor argument its dtype, device, shape, strides
    and ``data_ptr() % 16`` (read with ``const_data_ptr`` where torch has it: a copy-on-write input
    stays shared, :func:`accel._compat.address_reader`); a list or tuple of numbers as a tuple; any
    other argument itself (ints, floats, bools, ``None``, dtypes, strings). ``None`` (not
    memoisable) when a sequence holds anything but numbers (a list of tensors would be keyed by
    identity) or when anything about the arguments cannot be read: never an exception, this runs
    inside the user's op call.

    Costs about 1.5 µs for two tensors on this project's CPU host; the whole routed path with the
    memo is 1.8-1.9x cheaper than without (``benchmarks/routed_host_cpu.py``,
    ``benchmarks/results/cpu/routed_host_cpu.md``).
    """
    try:
        parts = []
        for a in args:
            if isinstance(a, _Tensor):
                parts.append((a.dtype, a.device, a.shape, a.stride(), _address(a) & 15))
            elif type(a) is list or type(a) is tuple:
                for v in a:
                    if type(v) not in _SCALARS:
                        return None
                parts.append(tuple(a))
            else:
                parts.append(a)
        return tuple(parts)
    except Exception:  # noqa: BLE001 - an argument we cannot describe: no memo, the cond decides
        return None


def plan_of(impl: Any, args: tuple) -> Any:
    """``impl.plan(*args)`` where the impl offers one, else ``impl`` (may raise: the caller's fail-safe decides)."""
    make = getattr(impl, "plan", None)
    return impl if make is None else make(*args)
