"""Where accel's RMSNorm kernels lose to ATen: shapes the ``cond`` sends to ATen.

Filled from ``benchmarks/kernels.py`` runs (``accel bench`` prints ready-to-paste
entries for every shape where the routed call was slower than ATen eager). Only
measured archs have entries; an arch without entries routes every shape the
kernel supports.
"""

from __future__ import annotations

__all__ = ["ATEN_FASTER", "MIN_NUMEL", "aten_faster"]

#: Inputs with fewer elements than this run ATen, per DSL: launch overhead
#: (Python launch of a Triton/Helion kernel, several µs) dominates there.
#: Placeholder until measured: 2**20 elements (2 MiB in bf16).
MIN_NUMEL: dict[str, int] = {"triton": 1 << 20, "helion": 1 << 20}

#: ``(arch, dsl, "fwd" | "bwd", dtype name) -> ((N, M_min, M_max), ...)``: shapes
#: ``[M, N]`` (``M_min <= M <= M_max``) where ATen eager beat the routed call on
#: that arch. ``arch`` is ``sm_XY`` on NVIDIA. LEAD: fill from the H200 run
#: (``accel bench --json`` -> ``aten_faster`` entries). Empty means: route every
#: supported shape.
ATEN_FASTER: dict[tuple[str, str, str, str], tuple[tuple[int, int, int], ...]] = {
    # ("sm_90", "triton", "fwd", "bfloat16"): ((1024, 0, 4096),),  # format example: N=1024, M <= 4096
}


def aten_faster(arch: str, dsl: str, direction: str, dtype: str, m: int, n: int) -> bool:
    """Whether :data:`ATEN_FASTER` says ATen wins ``[m, n]`` for this arch, DSL, direction and dtype."""
    for n_, lo, hi in ATEN_FASTER.get((arch, dsl, direction, dtype), ()):
        if n == n_ and lo <= m <= hi:
            return True
    return False
