"""Launch configs of the CuTeDSL LayerNorm backward (:mod:`.cutedsl_kernel`), without importing CuTeDSL.

A config is ``{"threads": T, "ctas_per_sm": P}``: ``min(M, P * SMs)`` persistent CTAs of ``T`` threads,
each thread holding ``N / T`` values of each row in ``vec``-element vectors of 16 bytes.
"""

from __future__ import annotations

from accel.kernels.dsl.cutedsl_utils import vector_elements

__all__ = ["THREADS", "CTAS_PER_SM", "MAX_VALUES_PER_THREAD", "vector_elements", "fits", "default_config",
           "candidate_configs"]

#: CTA sizes tried.
THREADS = (128, 256, 512)
#: Persistent CTAs per SM tried.
CTAS_PER_SM = (1, 2, 3, 4)
#: Values of one row per thread: the weight, the dw and db partial sums, x and dy are each that many
#: fp32 registers, 5 x 32 = 160 of a thread's 255. CTAs of 512 threads get at most 128 registers per
#: thread (65536 per SM, H100/H200 datasheet), so there at most 16 (32 spilled 348 bytes, ptxas -v).
MAX_VALUES_PER_THREAD = 32
#: Shared memory one CTA may use on sm_90 (227 KiB, CUDA C++ Programming Guide, "Compute Capability 9.0");
#: the kernel stages x and dy of two rows.
MAX_SHARED_BYTES = 227 * 1024



def fits(n: int, itemsize: int, threads: int) -> bool:
    """Whether CTAs of ``threads`` cover rows of ``n`` elements exactly in 16-byte vectors, at most
    :data:`MAX_VALUES_PER_THREAD` per thread (16 for 512 threads), with the two staged rows of x and dy
    (``4 * n * itemsize`` bytes) in :data:`MAX_SHARED_BYTES`."""
    per_thread = MAX_VALUES_PER_THREAD if threads <= 256 else MAX_VALUES_PER_THREAD // 2
    return (threads in THREADS and n > 0 and n % (threads * vector_elements(itemsize)) == 0
            and n // threads <= per_thread and 4 * n * itemsize + 1024 <= MAX_SHARED_BYTES)


def candidate_configs(n: int, itemsize: int) -> list[dict]:
    """Every config for rows of ``n`` (the ``accel bench --tune`` candidates), default first."""
    found = [{"threads": t, "ctas_per_sm": p} for t in THREADS if fits(n, itemsize, t) for p in CTAS_PER_SM]
    first = default_config(n, itemsize)
    return ([first] if first is not None else []) + [c for c in found if c != first]


def default_config(n: int, itemsize: int) -> dict | None:
    """The smallest CTA that fits rows of ``n`` with two CTAs per SM, or None when none fits."""
    for threads in THREADS:
        if fits(n, itemsize, threads):
            return {"threads": threads, "ctas_per_sm": 2}
    return None
