"""TunableOp (``torch.cuda.tunable``) in the running torch."""

from __future__ import annotations

import torch

__all__ = ["has_cuda_tunable", "tunable_writer"]


def has_cuda_tunable() -> bool:
    """``torch.cuda.tunable`` (TunableOp for GEMMs on CUDA and ROCm)."""
    return hasattr(getattr(torch, "cuda", None), "tunable")


def tunable_writer() -> object:
    """The running torch's "write TunableOp results now" function, or ``None``.

    ``torch.cuda.tunable.write_file`` where public, else the binding
    ``torch._C._cuda_tunableop_write_file``; without either, torch writes at exit.
    """
    return getattr(torch.cuda.tunable, "write_file", None) or getattr(torch._C, "_cuda_tunableop_write_file", None)
