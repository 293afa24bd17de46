"""CuTeDSL pieces accel's kernels share (imports ``cutlass``: only the kernel modules import this).

- :data:`DTYPES`: torch dtype names to CuTeDSL types; :func:`pointer`: a 16-byte aligned global pointer;
- :data:`SmemAllocator`: ``cutlass.memory``'s where it exists (``cutlass.utils``' is deprecated from 4.8);
- :func:`compile_kernel`: ``cute.compile`` into accel's calling convention (:class:`accel.kernels.dsl.cutedsl_utils.Kernel`);
- :func:`row_copy`: the tiled copy that gives each of ``threads`` threads 16-byte vectors of a row,
  thread ``t`` holding vectors ``t, t + threads, ...`` (coalesced).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from accel.kernels.dsl import cutedsl_utils
from accel.kernels.dsl.cutedsl_utils import COMPILE_LOCK, Kernel

__all__ = ["DTYPES", "SmemAllocator", "compile_kernel", "pointer", "row_copy", "vector_elements"]

DTYPES = {"float32": Float32, "bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
SmemAllocator = getattr(getattr(cutlass, "memory", None), "SmemAllocator", None) or cutlass.utils.SmemAllocator


def vector_elements(dtype) -> int:
    """Elements of ``dtype`` (a CuTeDSL type) in one 16-byte vector (:func:`accel.kernels.dsl.cutedsl_utils.vector_elements`)."""
    return cutedsl_utils.vector_elements(dtype.width // 8)


def pointer(dtype_name: str, address: int):
    """A 16-byte aligned global-memory pointer to ``dtype_name`` elements at ``address``."""
    return cute.runtime.make_ptr(DTYPES[dtype_name], address, cute.AddressSpace.gmem, assumed_align=16)


def compile_kernel(op, pointers: tuple[str, ...], scalars: int, ffi: bool) -> Kernel:
    """Compile ``op`` (a kernel object whose ``@cute.jit __call__`` takes ``len(pointers)`` global pointers of
    the named dtypes, 16-byte aligned, then ``scalars`` ``Int32`` values, then the stream) for the current
    device, for TVM-FFI calls with ``ffi`` (the caller's reading of :func:`accel.kernels.dsl.cutedsl_utils.ffi_reason`,
    also its cache key), else CuTeDSL's executor. One compile at a time per process (``COMPILE_LOCK``).

    Raises what ``cute.compile`` raises (a DSL or MLIR error for a kernel that does not compile)."""
    import cuda.bindings.driver as cuda

    fakes = [pointer(d, 0) for d in pointers]
    ints = [Int32(1)] * scalars
    with COMPILE_LOCK:
        compiled = cute.compile(op, *fakes, *ints, cuda.CUstream(0), **({"options": "--enable-tvm-ffi"} if ffi else {}))
    if ffi:
        raw = getattr(compiled, "__tvm_ffi_object__", None)  # the tvm_ffi.Function, past CuTeDSL's kwargs wrapper
        fn = raw() if raw is not None else compiled
        return Kernel(compiled, fn if fn is not None else compiled, True)
    count = len(pointers)

    def wrap(args: tuple) -> tuple:
        return (*(pointer(d, a) for d, a in zip(pointers, args[:count])), *args[count:])

    return Kernel(compiled, compiled, False, wrap)


def row_copy(op, dtype, threads: int):
    """The tiled copy of a ``(1, threads * vec)`` tile with copy ``op`` (``CopyUniversalOp()``, ``CopyG2SOp()``)."""
    atom = cute.make_copy_atom(op, dtype, num_bits_per_copy=128)
    return cute.make_tiled_copy_tv(atom, cute.make_layout((1, threads)), cute.make_layout((1, vector_elements(dtype))))
