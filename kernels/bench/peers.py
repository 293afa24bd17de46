"""Helpers the op folders' ``bench.py`` modules share to import and call benchmark-only peers.

The peers (Liger-Kernel, quack) are never dependencies of accel: each is imported when the benchmark
runs, and one that does not import is reported with its exception instead of timed. This module
imports nothing of accel.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["autograd_bwd", "peer_status", "try_import"]


def try_import(module: str, attr: str | None = None) -> Any:
    """``module`` imported (or its attribute ``attr``), or the exception that import raised.

    :func:`importlib.import_module`, not an ``import`` statement: ``import quack.rmsnorm as m`` binds the
    *function* ``rmsnorm`` that ``quack/__init__`` re-exports, not the module.

    Args:
        module: dotted module name (``"liger_kernel.ops.softmax"``).
        attr: a name inside it, or ``None`` for the module itself.

    Returns:
        The module or attribute; on any failure (not installed, a broken install, a missing name) the
        exception, returned rather than raised.
    """
    try:
        found = importlib.import_module(module)
        return found if attr is None else getattr(found, attr)
    except Exception as exc:  # noqa: BLE001 - optional peer: any failure drops it, reported
        return exc


def peer_status(found: Mapping[str, Any]) -> dict[str, str | None]:
    """``{name: None}`` for each peer that imported, ``{name: "ImportError: ..."}`` for each that did not."""
    return {k: (None if not isinstance(v, Exception) else f"{type(v).__name__}: {v}") for k, v in found.items()}


def autograd_bwd(fwd: Callable[..., torch.Tensor], inputs: tuple, dy: torch.Tensor) -> Callable[[], Any]:
    """The backward of a peer's autograd function alone, as a zero-argument callable.

    The first call runs ``fwd(*inputs)`` once on detached copies (floating-point tensors made leaves that
    require grad); every call returns ``torch.autograd.grad`` of that output with ``dy`` with respect to the
    first tensor input, keeping the graph, so only the backward is timed.

    Args:
        fwd: the peer's forward, taking ``inputs``.
        inputs: its arguments; non-tensors pass through.
        dy: the output gradient, the output's shape and dtype.

    Returns:
        A callable returning a one-tuple ``(dx,)``.
    """
    leaves = tuple(t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                   for t in inputs)
    graph: list = []

    def call():
        if not graph:
            graph.append(fwd(*leaves))
        return torch.autograd.grad(graph[0], [t for t in leaves if isinstance(t, torch.Tensor)][:1], dy,
                                   retain_graph=True)

    return call
