"""The chunk buffers and matmuls of the chunked linear cross-entropy: logits buffers whose rows are padded for
cuBLAS's aligned kernels, the split of the classes at a 16-byte boundary, and matmuls that write or accumulate
into an output, in a wider dtype where the device's BLAS has such matmuls.
"""

from __future__ import annotations

import torch

from accel._caches import detection_cache
from accel.kernels.dsl.launch import empty

__all__ = ["ROW_ALIGN_BYTES", "aligned_classes", "aligned_rows", "fp32_result_mm", "mm_into"]


#: Row stride, in bytes, that a logits buffer's rows are padded to. cuBLAS picks its fast (TMA, vectorised)
#: kernels only for leading dimensions of a multiple of 16 bytes: at GPT-2's odd vocabulary (50257) unpadded
#: bf16 rows made it take sm_75 ``align1`` kernels, 32 of a 87 ms training step on the H200
#: (a profile of ``benchmarks/real_models.py --models gpt2 --modes accel --profile``).
ROW_ALIGN_BYTES = 16


def _per_aligned(dtype: torch.dtype) -> int:
    """Elements of ``dtype`` in :data:`ROW_ALIGN_BYTES`."""
    return max(1, ROW_ALIGN_BYTES // dtype.itemsize)


def aligned_rows(rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised ``[rows, cols]`` buffer whose row stride is ``cols`` rounded up to
    :data:`ROW_ALIGN_BYTES` (a view of ``[rows, padded]``; the padding is never read)."""
    per = _per_aligned(dtype)
    padded = -(-cols // per) * per
    buf = empty((rows, padded), dtype, device)
    return buf if padded == cols else buf.narrow(1, 0, cols)


def aligned_classes(c: int, dtype: torch.dtype, device: torch.device) -> int:
    """How many leading classes the chunk's three matmuls take in one piece (the rest, fewer than 16 bytes'
    worth, in a second thin one); ``c`` where no split is wanted.

    Padding the rows (:func:`aligned_rows`) aligns the leading dimension only: ``x @ W.T`` writes, and
    ``g @ W`` and ``g.T @ x`` read, the class dimension as their contiguous extent, and an extent that is
    not a multiple of 16 bytes keeps cuBLAS on its ``align1`` kernels (GPT-2, vocabulary 50257, H200: the
    gradient matmuls took 23 of 81 ms per step in a profile of ``benchmarks/real_models.py --models gpt2``;
    split, the logits matmul alone still took 8.2 ms). A GPU device splits there; on CPU the
    split buys nothing and is not made (one rounding of ``grad_input`` fewer)."""
    main = c // _per_aligned(dtype) * _per_aligned(dtype)
    return c if device.type == "cpu" or main in (0, c) else main


@detection_cache
def fp32_result_mm(device_type: str) -> bool:
    """Whether ``torch.mm(a, b, out_dtype=torch.float32)`` takes bf16 operands on this device type (CUDA/ROCm:
    cuBLAS/hipBLASLt accumulate and write fp32); elsewhere accurate mode computes from fp32 copies."""
    if device_type != "cuda":
        return False
    try:
        a = torch.ones(1, 1, dtype=torch.bfloat16, device=device_type)
        return torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except (TypeError, RuntimeError, NotImplementedError):
        return False


def mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, first: bool,
            out_dtype: torch.dtype | None = None) -> None:
    """``out = a @ b`` where ``first``, else ``out += a @ b``; ``out_dtype``: results in that dtype from
    low-precision operands (where :func:`fp32_result_mm` says the device has such matmuls)."""
    if out_dtype is None:
        if first:
            torch.mm(a, b, out=out)
        else:
            out.addmm_(a, b)
    elif first:
        torch.mm(a, b, out_dtype=out_dtype, out=out)
    else:
        torch.addmm(out, a, b, out_dtype=out_dtype, out=out)
