"""torch's own ``linear_cross_entropy`` (torch 2.13+ builds): the function, its module and options class, the
chunked ops behind them, and which of those ops torch's native DSL registry overrides itself."""

from __future__ import annotations

import functools
import importlib
import importlib.util

import torch

__all__ = ["TORCH_NN_CHUNKED", "torch_grouped_mm", "torch_linear_cross_entropy", "torch_nn_chunked_ops", "upstream_overrides"]

#: torch's chunked ops (namespace ``torch_nn``): the scalar reductions, ``reduction="none"``.
TORCH_NN_CHUNKED = ("_linear_cross_entropy_batch_chunked", "_linear_cross_entropy_batch_chunked_no_reduction")
_DEFINING_MODULE = "torch.nn.modules.linear_cross_entropy"


def torch_linear_cross_entropy() -> tuple | None:
    """``(torch.nn.functional.linear_cross_entropy, torch.nn.LinearCrossEntropyLoss,
    torch.nn.LinearCrossEntropyOptions)`` where the running torch has all three, else ``None``.

    :mod:`accel.nn` hands out these very objects where they exist and its own implementation elsewhere.
    """
    import torch.nn.functional as F

    names = (getattr(F, "linear_cross_entropy", None), getattr(torch.nn, "LinearCrossEntropyLoss", None),
             getattr(torch.nn, "LinearCrossEntropyOptions", None))
    return names if all(n is not None for n in names) else None


def torch_grouped_mm():
    """torch's grouped GEMM, ``(mat_a, mat_b, *, offs) -> out`` with autograd: ``torch.nn.functional.grouped_mm``
    (public since torch 2.10), else the private ``torch._grouped_mm`` (torch 2.8-2.9), else ``None``. Which
    devices and dtypes it takes is the caller's question (CUDA sm90+ and bf16 on torch 2.11's build)."""
    import torch.nn.functional as F

    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


@functools.cache
def torch_nn_chunked_ops() -> tuple[str, ...]:
    """The qualnames of :data:`TORCH_NN_CHUNKED` in the running torch (``"torch_nn::..."``), imported so that
    they exist (torch defines them lazily, when ``torch.nn.modules.linear_cross_entropy`` is first imported),
    or ``()`` where torch has no such module or ops."""
    if importlib.util.find_spec(_DEFINING_MODULE) is None:
        return ()
    try:
        importlib.import_module(_DEFINING_MODULE)
    except ImportError:
        return ()
    namespace = torch.ops.torch_nn
    found = []
    for name in TORCH_NN_CHUNKED:
        try:
            getattr(namespace, name)
        except (AttributeError, RuntimeError):
            continue
        found.append(f"torch_nn::{name}")
    return tuple(found)


def upstream_overrides(dsl: str = "cutedsl") -> frozenset[str]:
    """The ``torch_nn`` op symbols torch's own native DSL registry holds a ``dsl`` override of (torch 2.15's
    CuTeDSL kernel of ``_linear_cross_entropy_batch_chunked``, where CuTeDSL is installed), else empty.

    Read per call (cheap: a dict walk) so an override torch registers later is seen; any change in torch's
    private registry that this does not expect reads as "none".
    """
    if importlib.util.find_spec("torch._native") is None:
        return frozenset()
    try:
        from torch._native import registry

        return frozenset(registry.get_dsl_operations(dsl, "torch_nn"))
    except (ImportError, AttributeError, TypeError, KeyError, RuntimeError):
        return frozenset()
