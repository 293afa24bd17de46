"""The peers :mod:`linear_cross_entropy` times accel's loss against, each a ``step(x, w, t) -> loss`` that runs one
forward and backward (gradients into ``x.grad`` and ``w.grad``), or the reason it cannot run here.

- ``liger``: Liger-Kernel's Triton ``LigerFusedLinearCrossEntropyLoss`` (softcap and z-loss as
  ``softcap`` / ``lse_square_scale``).
- ``liger sm90``: Liger-Kernel's Hopper CuTeDSL kernel (``liger_fused_linear_cross_entropy_sm90``): compute
  capability 9.0, bf16, tokens % 128 and vocabulary % 256, no softcap or z-loss (its own documented gate).
- ``quack``: QuACK's ``chunked_linear_cross_entropy`` (CuTeDSL GEMMs, the weight gradient accumulated in fp32
  in the GEMM): tokens, hidden size and vocabulary % 8, no softcap or z-loss.

Each import is tried only when asked for, so a missing package costs nothing but its line in the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

import torch

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

#: Where Liger-Kernel's Hopper kernel has lived (the first that imports is used).
_SM90_MODULES = ("liger_kernel.ops.cutedsl.fused_linear_cross_entropy_sm90",
                 "liger_kernel.ops.fused_linear_cross_entropy_sm90")


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def _backward(loss: torch.Tensor) -> torch.Tensor:
    loss.backward()
    return loss


def liger(device: torch.device, softcap: float | None, z_loss: float) -> tuple[Step | None, str]:
    """Liger's Triton fused linear cross-entropy, or ``(None, reason)``."""
    if device.type != "cuda":
        return None, "liger: needs a CUDA device"
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except Exception as exc:  # noqa: BLE001 - any failure to import is a reason to skip the peer
        return None, f"liger: liger_kernel not importable ({type(exc).__name__}: {exc})"
    extra = {}
    if softcap is not None:
        extra["softcap"] = softcap
    if z_loss:
        extra["lse_square_scale"] = z_loss
    try:
        loss_fn = LigerFusedLinearCrossEntropyLoss(**extra)
    except TypeError as exc:
        return None, f"liger: this liger-kernel takes no {sorted(extra)} ({exc})"
    note = f"LigerFusedLinearCrossEntropyLoss({', '.join(f'{k}={v}' for k, v in extra.items())}), " \
           f"liger-kernel {_version('liger-kernel')}"
    return (lambda x, w, t: _backward(loss_fn(w, x, t))), note  # Liger's order: (lin_weight, _input, target)


def liger_sm90(device: torch.device, dtype: torch.dtype, n: int, c: int, softcap: float | None,
               z_loss: float) -> tuple[Step | None, str]:
    """Liger's Hopper CuTeDSL kernel where its gate holds, or ``(None, reason)``."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) != (9, 0):
        return None, "liger sm90: needs a compute capability 9.0 GPU"
    if dtype != torch.bfloat16 or n % 128 or c % 256 or softcap is not None or z_loss:
        return None, (f"liger sm90: outside its gate (bf16, tokens % 128, vocab % 256, no softcap or z-loss): "
                      f"{str(dtype).removeprefix('torch.')}, {n} tokens, vocab {c}, softcap {softcap}, z-loss {z_loss}")
    reasons = []
    for name in _SM90_MODULES:
        try:
            fn = importlib.import_module(name).liger_fused_linear_cross_entropy_sm90
        except Exception as exc:  # noqa: BLE001 - CuTeDSL missing, or another layout of the package
            reasons.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        return (lambda x, w, t: _backward(fn(x, w, t))), \
            f"{name}.liger_fused_linear_cross_entropy_sm90, liger-kernel {_version('liger-kernel')}"
    return None, "liger sm90: not importable (" + "; ".join(reasons) + ")"


def quack(device: torch.device, n: int, d: int, c: int, softcap: float | None,
          z_loss: float) -> tuple[Step | None, str]:
    """QuACK's chunked linear cross-entropy where its gate holds, or ``(None, reason)``."""
    if device.type != "cuda":
        return None, "quack: needs a CUDA device"
    if n % 8 or d % 8 or c % 8 or softcap is not None or z_loss:
        return None, (f"quack: outside its gate (tokens, hidden and vocab % 8, no softcap or z-loss): {n} x {d} x "
                      f"{c}, softcap {softcap}, z-loss {z_loss}")
    try:
        from quack.linear_cross_entropy import chunked_linear_cross_entropy
    except Exception as exc:  # noqa: BLE001
        return None, f"quack: not importable ({type(exc).__name__}: {exc})"
    return (lambda x, w, t: _backward(chunked_linear_cross_entropy(x, w, t))), \
        f"quack.linear_cross_entropy.chunked_linear_cross_entropy (chunk 4096), quack-kernels {_version('quack-kernels')}"
