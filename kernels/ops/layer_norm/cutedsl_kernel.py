"""LayerNorm backward in CuTeDSL: persistent CTAs, the next row staged into shared memory while this one
is computed (imported only when a kernel is first built).

Shapes: ``dy``, ``x``, ``dx`` ``[M, N]`` row-major contiguous, 16-byte aligned, fp32/bf16/fp16; ``mean``,
``rstd`` ``[M]`` fp32; ``w`` ``[N]`` (input dtype or fp32) or absent; fp32 math. Per row, with
``xhat = (x - mean) * rstd`` and ``g = w * dy``::

    dx = (g - (xhat * mean(xhat * g) + mean(g))) * rstd

and over rows ``dw = sum(dy * xhat)``, ``db = sum(dy)``: each CTA keeps its columns' partial sums in
fp32 registers over its rows and writes them to ``[G, N]`` partials, which the caller sums.

Why: the Triton rows kernel walks each program's rows one after another, so every row's two block
reductions stall the SM's memory pipe (1.02x ATen on 4096x4096 bf16, H200,
``accel bench`` on the H200). Here
each thread issues the next row's ``cp.async`` copies (global to shared, 16 bytes each, of the
vectors it will read itself: no barrier for the staging) before this row's reductions, so the
loads of row ``i + 1`` overlap the math of row ``i``; one CTA barrier per row, for the warp sums.

Configs are ``{"threads": T, "ctas_per_sm": P}``: ``G = min(M, P * SMs)`` CTAs of ``T`` threads; a
config fits rows of ``N`` when ``N % (T * vec) == 0``, each thread holds at most 32 values per row (16
with 512 threads) and the two staged rows fit in shared memory (:func:`.cutedsl_configs.fits`).

Measured (H200, bf16, ``ci/gpu/cutedsl_smoke.py``): 4096x4096 56.2 us
(quack 59.1, ATen 73.7), 16384x8192 256.1 us (quack 259.7), 32768x4096 246.4 us (quack 319.2).
"""

from __future__ import annotations

import operator

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import cpasync

from accel._caches import kept_cache
from accel.kernels.dsl.cute_lang import DTYPES, SmemAllocator, compile_kernel, pointer, row_copy
from accel.kernels.dsl.cutedsl_utils import Kernel, ffi_reason

from .cutedsl_configs import fits, vector_elements

__all__ = ["LayerNormBwd", "build", "pointer"]


class LayerNormBwd:
    """The backward for rows of ``n`` of ``dtype`` (weight ``w_dtype`` or None), CTAs of ``threads``.

    The compiled function takes ``(dy, x, w, mean, rstd, dx, dw_part, db_part, m, groups, stream)``:
    pointers (``w`` any pointer when there is no weight), ``m`` rows and ``groups`` CTAs (Int32).
    """

    def __init__(self, dtype, w_dtype, n: int, threads: int, want_dx: bool, want_dw: bool, want_db: bool):
        self.dtype, self.w_dtype, self.n, self.threads = dtype, w_dtype, n, threads
        self.want_dx, self.want_dw, self.want_db = want_dx, want_dw, want_db
        self.vec = vector_elements(dtype.width // 8)
        self.warps = threads // 32

    @cute.jit
    def __call__(self, dy_p: cute.Pointer, x_p: cute.Pointer, w_p: cute.Pointer, mean_p: cute.Pointer,
                 rstd_p: cute.Pointer, dx_p: cute.Pointer, dw_p: cute.Pointer, db_p: cute.Pointer, m: Int32,
                 groups: Int32, stream):
        rows = cute.make_layout((m, self.n), stride=(self.n, 1))
        parts = cute.make_layout((groups, self.n), stride=(self.n, 1))
        mDY, mX, mDX = cute.make_tensor(dy_p, rows), cute.make_tensor(x_p, rows), cute.make_tensor(dx_p, rows)
        mW = cute.make_tensor(w_p, cute.make_layout((1, self.n), stride=(self.n, 1)))
        mMean, mRstd = cute.make_tensor(mean_p, cute.make_layout(m)), cute.make_tensor(rstd_p, cute.make_layout(m))
        mDW, mDB = cute.make_tensor(dw_p, parts), cute.make_tensor(db_p, parts)
        g2r = row_copy(cute.nvgpu.CopyUniversalOp(), self.dtype, self.threads)
        g2s = row_copy(cpasync.CopyG2SOp(), self.dtype, self.threads)
        self.kernel(mDY, mX, mW, mMean, mRstd, mDX, mDW, mDB, g2r, g2s).launch(
            grid=[groups, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.jit
    def _row(self, t: cute.Tensor, row: Int32) -> cute.Tensor:
        return cute.local_tile(t, (1, self.n), (row, 0))

    @cute.jit
    def _stage(self, g2s: cute.TiledCopy, s2, mX: cute.Tensor, mDY: cute.Tensor, sX: cute.Tensor, sDY: cute.Tensor,
               row: Int32, stage: Int32):
        """Issue this thread's ``cp.async`` copies of ``row`` of ``x`` and ``dy`` into shared-memory ``stage``."""
        cute.copy(g2s, s2.partition_S(self._row(mX, row)), s2.partition_D(sX[None, None, stage]))
        cute.copy(g2s, s2.partition_S(self._row(mDY, row)), s2.partition_D(sDY[None, None, stage]))

    @cute.kernel
    def kernel(self, mDY, mX, mW, mMean, mRstd, mDX, mDW, mDB, g2r: cute.TiledCopy, g2s: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        groups, _, _ = cute.arch.grid_dim()
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        m = cute.size(mX, mode=[0])
        n_inv = Float32(1.0 / self.n)

        smem = SmemAllocator()
        staged = cute.make_ordered_layout((1, self.n, 2), order=(1, 0, 2))
        sX = smem.allocate_tensor(self.dtype, staged, byte_alignment=16)
        sDY = smem.allocate_tensor(self.dtype, staged, byte_alignment=16)
        sums = smem.allocate_tensor(Float32, cute.make_layout((2, 2, self.warps)), byte_alignment=16)

        r2 = g2r.get_slice(tidx)
        s2 = g2s.get_slice(tidx)

        # this thread's weight values, fp32 (the partitions are by coordinate: any element type)
        w = cute.make_rmem_tensor_like(r2.partition_S(self._row(mX, 0)), Float32)
        if const_expr(self.w_dtype is None):
            w.fill(1.0)
        else:
            rW = cute.make_rmem_tensor_like(r2.partition_S(self._row(mW, 0)))
            cute.autovec_copy(r2.partition_S(self._row(mW, 0)), rW)
            w.store(rW.load().to(Float32))
        dw_acc = cute.make_rmem_tensor_like(w, Float32)
        db_acc = cute.make_rmem_tensor_like(w, Float32)
        dw_acc.fill(0.0)
        db_acc.fill(0.0)

        if bid < m:
            self._stage(g2s, s2, mX, mDY, sX, sDY, bid, 0)
        cute.arch.cp_async_commit_group()
        k = Int32(0)
        for row in cutlass.range(bid, m, groups, unroll=1):
            stage = k % 2
            if row + groups < m:
                self._stage(g2s, s2, mX, mDY, sX, sDY, row + groups, 1 - stage)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)  # this row's copies (all but the newest group) have landed
            rX = cute.make_rmem_tensor_like(r2.partition_S(self._row(mX, 0)))
            rDY = cute.make_rmem_tensor_like(rX)
            cute.autovec_copy(s2.partition_D(sX[None, None, stage]), rX)
            cute.autovec_copy(s2.partition_D(sDY[None, None, stage]), rDY)
            mean = mMean[row]
            rstd = mRstd[row]
            x = rX.load().to(Float32)
            dy = rDY.load().to(Float32)
            xhat = (x - mean) * rstd
            g = dy * w.load()
            if const_expr(self.want_dw):
                dw_acc.store(dw_acc.load() + dy * xhat)
            if const_expr(self.want_db):
                db_acc.store(db_acc.load() + dy)
            if const_expr(self.want_dx):
                a_w = cute.arch.warp_reduction((xhat * g).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0),
                                                                 reduction_profile=0), operator.add)
                b_w = cute.arch.warp_reduction(g.reduce(cute.ReductionOp.ADD, init_val=Float32(0.0),
                                                        reduction_profile=0), operator.add)
                parity = k % 2  # two sets of slots: a row's reads never race the next row's writes
                if lane == 0:
                    sums[parity, 0, warp] = a_w
                    sums[parity, 1, warp] = b_w
                cute.arch.barrier()
                a = Float32(0.0)
                b = Float32(0.0)
                if lane < self.warps:
                    a = sums[parity, 0, lane]
                    b = sums[parity, 1, lane]
                a = cute.arch.warp_reduction(a, operator.add) * n_inv
                b = cute.arch.warp_reduction(b, operator.add) * n_inv
                rDX = cute.make_rmem_tensor_like(rX)
                rDX.store(((g - (xhat * a + b)) * rstd).to(self.dtype))
                cute.copy(g2r, rDX, r2.partition_D(self._row(mDX, row)))
            k += 1
        cute.arch.cp_async_wait_group(0)
        if const_expr(self.want_dw):
            cute.autovec_copy(dw_acc, r2.partition_D(self._row(mDW, bid)))
        if const_expr(self.want_db):
            cute.autovec_copy(db_acc, r2.partition_D(self._row(mDB, bid)))


def build(dtype_name: str, w_dtype_name: str | None, n: int, threads: int, want: tuple[bool, bool, bool],
          arch: str = "") -> Kernel:
    """Compile the backward for ``dtype_name`` rows of ``n`` (weight ``w_dtype_name`` or None), CTAs of
    ``threads``, outputs ``want = (dx, dw, db)``; cached per process (and per calling convention,
    :func:`accel.kernels.dsl.cutedsl_utils.ffi_reason`; ``arch``: a cache key only).

    Returns:
        The kernel (:class:`accel.kernels.dsl.cutedsl_utils.Kernel`); call it with the device index, the addresses of
        ``(dy, x, w, mean, rstd, dx, dw_part, db_part)`` and ``(m, groups)``.

    Raises:
        ValueError: the config does not fit rows of ``n`` (:func:`.cutedsl_configs.fits`).
    """
    return _build(dtype_name, w_dtype_name, n, threads, tuple(bool(w) for w in want), arch, ffi_reason() is None)


@kept_cache("compiled CuTeDSL kernels keyed by dtype, shape, config, arch and calling convention: "
            "a device of another arch compiles its own")
def _build(dtype_name: str, w_dtype_name: str | None, n: int, threads: int, want: tuple[bool, bool, bool],
           arch: str, ffi: bool) -> Kernel:
    if dtype_name not in DTYPES or (w_dtype_name is not None and w_dtype_name not in DTYPES):
        raise ValueError(f"LayerNorm backward CuTeDSL kernel: dtypes {dtype_name!r}/{w_dtype_name!r} not in "
                         f"{sorted(DTYPES)}")
    dtype = DTYPES[dtype_name]
    if not fits(n, dtype.width // 8, threads):
        raise ValueError(f"LayerNorm backward CuTeDSL config threads={threads} does not fit rows of {n} {dtype_name} "
                         f"elements (need N % (threads * {vector_elements(dtype.width // 8)}) == 0, at most 32 "
                         "values per thread, 16 with 512 threads, and both staged rows in shared memory)")
    w_dtype = DTYPES[w_dtype_name] if w_dtype_name else None
    return compile_kernel(LayerNormBwd(dtype, w_dtype, n, threads, *want),
                          (dtype_name, dtype_name, w_dtype_name or dtype_name, "float32", "float32", dtype_name,
                           "float32", "float32"), 2, ffi)
