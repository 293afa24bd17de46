"""Launch configs of the CuTeDSL softmax (:mod:`.cutedsl_kernel`), without importing CuTeDSL.

A config is ``{"cluster": C, "threads": T}``: one row over a cluster of ``C`` CTAs of ``T`` threads,
each thread holding ``N / (C * T)`` elements in ``vec``-element vectors of 16 bytes.
"""

from __future__ import annotations

from accel.kernels.dsl.cutedsl_utils import vector_elements

__all__ = ["CLUSTERS", "THREADS", "MAX_ELEMENTS_PER_THREAD", "vector_elements", "fits", "default_config",
           "candidate_configs"]

#: Cluster sizes tried: 8 is the portable maximum of an SM 9.0 cluster (CUDA C++ Programming Guide,
#: "Thread Block Clusters").
CLUSTERS = (1, 2, 4, 8)
#: CTA sizes tried.
THREADS = (128, 256, 512)
#: Elements per thread held in fp32 registers (plus the exps): 64 leaves room for two CTAs of 256
#: threads per SM (65536 registers per SM, H100/H200 datasheet).
MAX_ELEMENTS_PER_THREAD = 64



def fits(n: int, itemsize: int, cluster: int, threads: int, inputs: int = 1) -> bool:
    """Whether config ``(cluster, threads)`` covers rows of ``n`` elements of ``itemsize`` bytes exactly,
    with at most :data:`MAX_ELEMENTS_PER_THREAD` elements per thread of all ``inputs`` tensors held
    (1 forward, 2 backward)."""
    if cluster not in CLUSTERS or threads not in THREADS or n <= 0:
        return False
    step = cluster * threads * vector_elements(itemsize)
    return n % step == 0 and inputs * (n // (cluster * threads)) <= MAX_ELEMENTS_PER_THREAD


def candidate_configs(n: int, itemsize: int, inputs: int = 1) -> list[dict]:
    """Every config that fits rows of ``n`` (the ``accel bench --tune`` candidates), default first."""
    found = [{"cluster": c, "threads": t} for c in CLUSTERS for t in THREADS if fits(n, itemsize, c, t, inputs)]
    first = default_config(n, itemsize, inputs)
    return ([first] if first is not None else []) + [c for c in found if c != first]


def default_config(n: int, itemsize: int, inputs: int = 1) -> dict | None:
    """The config used without a tuned one: CTAs of 256 threads (else 128, else 512) in the smallest
    cluster holding at most 32 values per thread (all ``inputs`` together), else the first config that
    fits at all; None when no config fits rows of ``n``.

    (H200, 8192x32768 bf16: that gives ``{4, 256}`` forward, 264.6 µs against the best config's
    262.1, and ``{8, 256}`` backward, the fastest at 369.7; 512-thread CTAs were the slowest backward
    configs, 404-409 µs: ``ci/gpu/cutedsl_smoke.py`` on the H200.)
    """
    for threads in (256, 128, 512):
        for cluster in CLUSTERS:
            if fits(n, itemsize, cluster, threads, inputs) and inputs * (n // (cluster * threads)) <= 32:
                return {"cluster": cluster, "threads": threads}
    for threads in (256, 128, 512):
        for cluster in CLUSTERS:
            if fits(n, itemsize, cluster, threads, inputs):
                return {"cluster": cluster, "threads": threads}
    return None
