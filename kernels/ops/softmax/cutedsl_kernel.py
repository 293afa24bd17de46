"""Softmax forward over the last dim in CuTeDSL: one row over a thread-block cluster (imported only
when a kernel is first built).

Shapes: ``x``, ``y`` are ``[M, N]`` row-major contiguous, 16-byte aligned; dtypes fp32/bf16/fp16,
fp32 math. ``y = exp(x - max) / sum(exp(x - max))``, one read and one write per element.

Why a cluster (SM 9.0+, Hopper's thread-block clusters and distributed shared memory): a long row
held by one CTA leaves that SM's memory pipe idle while the CTA reduces. Split over ``cluster`` CTAs
of one cluster, each part is small enough for several CTAs per SM, so one CTA's loads overlap
another's reductions. The parts exchange one ``(max, sum)`` pair per warp through the peers' shared
memory (``st.async.shared::cluster`` completing on an mbarrier's transaction count), which costs far
less than a round trip through L2. On the H200 the Triton kernels top out at 86-88 % of the copy
ceiling on 8192x32768 bf16 (``candidate_configs`` in :mod:`.triton_kernel` lists what was tried);
this kernel reaches 98.7 % forward (``{4, 128}``: 262.1 us vs quack 263.7, Triton 293.8) and moves
104 % of a copy's bytes per second backward (``{8, 256}``: 369.7 us vs Triton 384.4;
``ci/gpu/cutedsl_smoke.py`` on the H200).

Special values as ATen: a row of only -inf, or one holding a nan or +inf, gives nan throughout; a warp
of only -inf beside finite logits gives 0 (its scale is set to 0, as ``exp(0 - M)`` may overflow).

Per thread: ``K`` vectors of 16 bytes, ``x`` in fp32 registers. Per warp: its max ``m_w`` and
``s_w = sum exp(x - m_w)``; each thread keeps ``e = exp(x - m_w)`` (one exp per element). Every
warp of every CTA of the cluster reads all ``cluster * warps`` pairs, so the row's ``max M`` and
``S = sum s_w exp(m_w - M)`` need no second exchange; then ``y = e * exp(m_w - M) / S``.

Configs are dicts ``{"cluster": C, "threads": T}``; a config fits rows of ``N`` when
``N % (C * T * vec) == 0`` (``vec`` elements of 16 bytes) and each thread holds at most 64 values of all
inputs, see :func:`.cutedsl_configs.fits`. Rows are indexed with 32-bit offsets: the impl's limits keep
inputs below 2**31 elements.
"""

from __future__ import annotations

import math
import operator

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from accel._caches import kept_cache
from accel.kernels.dsl.cute_lang import DTYPES, SmemAllocator, compile_kernel, pointer, row_copy
from accel.kernels.dsl.cutedsl_utils import Kernel, ffi_reason

from .cutedsl_configs import MAX_ELEMENTS_PER_THREAD, fits, vector_elements

__all__ = ["SoftmaxFwd", "SoftmaxBwd", "build", "pointer"]

_LOG2E = math.log2(math.e)


class _ClusterRows:
    """One row of ``n`` elements over a cluster of ``cluster`` CTAs of ``threads`` threads (grid
    ``[m, cluster]``, cluster ``[1, cluster]``): the launch, the per-thread tiles and the exchange of
    one pair of fp32 values per warp among the cluster's CTAs. Subclasses write ``kernel``."""

    TENSORS = 2  # pointers the compiled function takes, before ``m`` and the stream

    def __init__(self, dtype: type[cutlass.Numeric], n: int, cluster: int, threads: int):
        self.dtype = dtype
        self.n = n
        self.cluster = cluster
        self.threads = threads
        self.vec = vector_elements(dtype.width // 8)
        self.part = n // cluster
        self.warps = threads // 32
        self.slots = cluster * self.warps  # one pair per warp of the cluster

    @cute.jit
    def _launch(self, ptrs: tuple, m: Int32, stream):
        layout = cute.make_layout((m, self.n), stride=(self.n, 1))
        tiled = row_copy(cute.nvgpu.CopyUniversalOp(), self.dtype, self.threads)
        tensors = [cute.make_tensor(p, layout) for p in ptrs]
        self.kernel(*tensors, tiled).launch(
            grid=[m, self.cluster, 1],
            block=[self.threads, 1, 1],
            cluster=[1, self.cluster, 1] if const_expr(self.cluster > 1) else None,
            stream=stream,
        )

    @cute.jit
    def _tile(self, tiled: cute.TiledCopy, t: cute.Tensor, tidx: Int32, row: Int32, rank: Int32) -> cute.Tensor:
        """This thread's vectors of this CTA's part of ``row`` of ``t``: ``((vec, 1), 1, K)``."""
        return tiled.get_slice(tidx).partition_S(cute.local_tile(t, (1, self.part), (row, rank)))

    @cute.jit
    def _load(self, tiled: cute.TiledCopy, tile: cute.Tensor):
        regs = cute.make_rmem_tensor_like(tile)
        cute.copy(tiled, tile, regs)
        return regs.load().to(Float32)

    @cute.jit
    def _store(self, tiled: cute.TiledCopy, values, tile: cute.Tensor):
        regs = cute.make_rmem_tensor_like(tile)
        regs.store(values.to(self.dtype))
        cute.copy(tiled, regs, tile)

    @cute.jit
    def _setup(self, tidx: Int32):
        """Shared memory for the pairs and the mbarrier; in a cluster, initialise the barrier and announce it
        (``barrier.cluster.arrive.relaxed``; :meth:`_exchange` waits for the peers' before storing to them)."""
        smem = SmemAllocator()
        words = smem.allocate_tensor(Int64, cute.make_layout(self.slots), byte_alignment=16)  # one pair per slot
        mbar = smem.allocate_array(Int64, num_elems=1)
        if const_expr(self.cluster > 1):
            if tidx == 0:
                cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init_fence()
            cute.arch.cluster_arrive_relaxed()
        return words, mbar

    @cute.jit
    def _exchange(self, words: cute.Tensor, mbar, rank: Int32, a: Float32, b: Float32) -> cute.Tensor:
        """Give every CTA of the cluster this warp's ``(a, b)`` (all lanes hold the same pair); return the
        ``[2, slots]`` fp32 view of the pairs of every warp of the cluster, slot ``rank * warps + warp``.

        In a cluster, lane ``j < cluster`` stores the pair into CTA ``j``'s slot with one
        ``st.async.shared::cluster`` that completes on that CTA's mbarrier; each CTA's barrier expects
        ``slots * 8`` bytes (PTX ISA, "Asynchronous data movement: st.async"). One launch, one phase.
        """
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        slot = rank * self.warps + warp
        pairs = cute.make_tensor(cute.recast_ptr(words.iterator, dtype=Float32), cute.make_layout((2, self.slots)))
        if const_expr(self.cluster > 1):
            cute.arch.cluster_wait()
            if warp == 0:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar, self.slots * 8)
            if lane < self.cluster:
                cute.arch.store_async_dsmem(cute.recast_ptr(words.iterator + slot, dtype=Int32),
                                            (a.bitcast(Int32), b.bitcast(Int32)), mbar, lane)
            cute.arch.mbarrier_wait(mbar, 0)
        else:
            if lane == 0:
                pairs[0, slot] = a
                pairs[1, slot] = b
            cute.arch.barrier()
        return pairs


class SoftmaxFwd(_ClusterRows):
    """The forward; the compiled function takes ``(x_ptr, y_ptr, m, stream)``."""

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, y_ptr: cute.Pointer, m: Int32, stream):
        self._launch((x_ptr, y_ptr), m, stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, tiled: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        row, rank, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        words, mbar = self._setup(tidx)
        tX = self._tile(tiled, mX, tidx, row, rank)
        tY = self._tile(tiled, mY, tidx, row, rank)
        x = self._load(tiled, tX)

        m_w = cute.arch.warp_reduction(x.reduce(cute.ReductionOp.MAX, init_val=-Float32.inf, reduction_profile=0),
                                       cute.arch.fmax)
        shift = m_w
        if m_w == -Float32.inf:  # a warp of -inf only: exp(x - 0) = 0, not exp(-inf + inf) = nan
            shift = Float32(0.0)
        e = cute.math.exp2((x - shift) * _LOG2E, fastmath=True)  # x - shift first: exact for large logits
        s_w = cute.arch.warp_reduction(e.reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0),
                                       operator.add)
        pairs = self._exchange(words, mbar, rank, m_w, s_w)

        big_m = -Float32.inf
        for j in cutlass.range_constexpr((self.slots + 31) // 32):
            if lane + 32 * j < self.slots:
                big_m = cute.arch.fmax(big_m, pairs[0, lane + 32 * j])
        big_m = cute.arch.warp_reduction(big_m, cute.arch.fmax)
        total = Float32(0.0)
        for j in cutlass.range_constexpr((self.slots + 31) // 32):
            if lane + 32 * j < self.slots:
                total += pairs[1, lane + 32 * j] * cute.math.exp2((pairs[0, lane + 32 * j] - big_m) * _LOG2E,
                                                                  fastmath=True)
        total = cute.arch.warp_reduction(total, operator.add)
        scale = cute.math.exp2((shift - big_m) * _LOG2E, fastmath=True) / total
        if m_w == -Float32.inf and big_m != -Float32.inf and total == total:
            scale = Float32(0.0)  # e is 0 here, and exp(0 - big_m) may overflow: 0 * inf would be nan
        # (a row of -inf only, or one holding a nan or +inf, has total nan: nan everywhere, as ATen)
        self._store(tiled, e * scale, tY)


class SoftmaxBwd(_ClusterRows):
    """The backward ``dx = y * (dy - sum(dy * y))``; the compiled function takes
    ``(dy_ptr, y_ptr, dx_ptr, m, stream)``."""

    TENSORS = 3

    @cute.jit
    def __call__(self, dy_ptr: cute.Pointer, y_ptr: cute.Pointer, dx_ptr: cute.Pointer, m: Int32, stream):
        self._launch((dy_ptr, y_ptr, dx_ptr), m, stream)

    @cute.kernel
    def kernel(self, mDY: cute.Tensor, mY: cute.Tensor, mDX: cute.Tensor, tiled: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        row, rank, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        words, mbar = self._setup(tidx)
        y = self._load(tiled, self._tile(tiled, mY, tidx, row, rank))
        dy = self._load(tiled, self._tile(tiled, mDY, tidx, row, rank))
        tDX = self._tile(tiled, mDX, tidx, row, rank)
        d_w = cute.arch.warp_reduction((y * dy).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0),
                                                       reduction_profile=0), operator.add)
        pairs = self._exchange(words, mbar, rank, d_w, Float32(0.0))
        dot = Float32(0.0)
        for j in cutlass.range_constexpr((self.slots + 31) // 32):
            if lane + 32 * j < self.slots:
                dot += pairs[0, lane + 32 * j]
        dot = cute.arch.warp_reduction(dot, operator.add)
        self._store(tiled, y * (dy - dot), tDX)



_KINDS = {"fwd": SoftmaxFwd, "bwd": SoftmaxBwd}


def build(kind: str, dtype_name: str, n: int, cluster: int, threads: int, arch: str = "") -> Kernel:
    """Compile the ``kind`` (``"fwd"``, ``"bwd"``) kernel for ``dtype_name`` (``"bfloat16"``, ``"float16"``, ``"float32"``) rows of
    ``n`` with config ``(cluster, threads)``; cached per process (and per calling convention,
    :func:`accel.kernels.dsl.cutedsl_utils.ffi_reason`).

    ``arch``: only a cache key (the compiler targets the current device, or ``CUTE_DSL_ARCH``).

    Returns:
        The kernel (:class:`accel.kernels.dsl.cutedsl_utils.Kernel`); call it with the device index, the addresses
        (``(x, y)`` forward, ``(dy, y, dx)`` backward) and ``m``.

    Raises:
        ValueError: the config does not fit rows of ``n`` (:func:`fits`).
    """
    return _build(kind, dtype_name, n, cluster, threads, arch, ffi_reason() is None)


@kept_cache("compiled CuTeDSL kernels keyed by dtype, shape, config, arch and calling convention: "
            "a device of another arch compiles its own")
def _build(kind: str, dtype_name: str, n: int, cluster: int, threads: int, arch: str, ffi: bool) -> Kernel:
    if dtype_name not in DTYPES or kind not in _KINDS:
        raise ValueError(f"softmax CuTeDSL kernel: kind {kind!r} not in {sorted(_KINDS)} or dtype {dtype_name!r} "
                         f"not in {sorted(DTYPES)}")
    dtype = DTYPES[dtype_name]
    cls = _KINDS[kind]
    if not fits(n, dtype.width // 8, cluster, threads, cls.TENSORS - 1):
        raise ValueError(f"softmax CuTeDSL config cluster={cluster}, threads={threads} does not fit rows of {n} "
                         f"{dtype_name} elements (need N % (cluster * threads * {vector_elements(dtype.width // 8)})"
                         f" == 0 and at most {MAX_ELEMENTS_PER_THREAD} values per thread over the "
                         f"{cls.TENSORS - 1} input(s))")
    return compile_kernel(cls(dtype, n, cluster, threads), (dtype_name,) * cls.TENSORS, 1, ffi)
