"""CuTeDSL pieces accel's kernels share (imports ``cutlass``: only the kernel modules import this).

- :data:`DTYPES`: torch dtype names to CuTeDSL types; :func:`pointer`: a 16-byte aligned global pointer;
- :data:`SmemAllocator`: ``cutlass.memory``'s where it exists (``cutlass.utils``' is deprecated from 4.8);
- :func:`row_copy`: the tiled copy that gives each of ``threads`` threads 16-byte vectors of a row,
  thread ``t`` holding vectors ``t, t + threads, ...`` (coalesced).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

__all__ = ["DTYPES", "SmemAllocator", "pointer", "row_copy", "vector_elements"]

DTYPES = {"float32": Float32, "bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
SmemAllocator = getattr(getattr(cutlass, "memory", None), "SmemAllocator", None) or cutlass.utils.SmemAllocator


def vector_elements(dtype) -> int:
    """Elements of ``dtype`` in one 16-byte vector."""
    return 128 // dtype.width


def pointer(dtype_name: str, address: int):
    """A 16-byte aligned global-memory pointer to ``dtype_name`` elements at ``address``."""
    return cute.runtime.make_ptr(DTYPES[dtype_name], address, cute.AddressSpace.gmem, assumed_align=16)


def row_copy(op, dtype, threads: int):
    """The tiled copy of a ``(1, threads * vec)`` tile with copy ``op`` (``CopyUniversalOp()``, ``CopyG2SOp()``)."""
    atom = cute.make_copy_atom(op, dtype, num_bits_per_copy=128)
    return cute.make_tiled_copy_tv(atom, cute.make_layout((1, threads)), cute.make_layout((1, vector_elements(dtype))))
