"""Launch-config heuristics shared by the row-wise Triton kernels (RMSNorm, softmax, LayerNorm).

Pure Python (no Triton import), so the impl modules and the tuner can use it before
any kernel is compiled. The numbers are defaults for a tuning-table miss; measured
winners per arch live in the tuning table (:mod:`accel.kernels.tuning.table`).
"""

from __future__ import annotations

__all__ = ["next_power_of_2", "warps", "row_config", "row_candidates", "unique_configs", "wide", "split_part",
           "for_wave", "WAVE"]

#: Threads per warp the heuristics here are written for (NVIDIA; RDNA's wave32 and Intel Triton's default
#: ``threads_per_warp=32`` alike). A CDNA wavefront is 64 (:func:`for_wave`).
WAVE = 32

#: Elements per program above which 8, then 16 warps are used (enough loads in flight to
#: cover HBM latency without spilling registers; the usual Triton row-kernel choice).
NORM_WARP_STEPS = (2048, 8192)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= ``n`` (``n >= 1``); same as ``triton.next_power_of_2``."""
    return 1 << (max(1, int(n)) - 1).bit_length()


def wide(m: int, rows: int, block_n: int) -> bool:
    """Whether a rows kernel over ``m`` rows, ``rows`` per program, ``block_n`` columns needs int64 offsets
    (its ``WIDE`` constexpr): the last program's masked rows reach row ``m + rows - 1``, and its column
    offsets ``block_n - 1``, so int32 suffices while ``(m + rows) * block_n < 2**31``."""
    return (m + rows) * block_n >= 1 << 31


def warps(elements: int, steps: tuple[int, int] = NORM_WARP_STEPS) -> int:
    """``num_warps`` for a program touching ``elements`` elements: 4, 8 from ``steps[0]``, 16 from ``steps[1]``."""
    if elements >= steps[1]:
        return 16
    if elements >= steps[0]:
        return 8
    return 4


def row_config(n: int, max_block_n: int, steps: tuple[int, int] = NORM_WARP_STEPS) -> dict:
    """Default forward launch config ``{"looped", "block_n", "rows", "num_warps"}`` for rows of ``n`` elements.

    Rows up to ``max_block_n`` (rounded up to a power of two) live whole in registers, with
    several rows per program when rows are short (programs of about 4096 elements);
    longer rows loop over 4096-element chunks, one row per program, 8 warps.
    """
    block_n = next_power_of_2(n)
    if block_n > max_block_n:
        return {"looped": True, "block_n": 4096, "rows": 1, "num_warps": 8}
    rows = max(1, min(16, 4096 // block_n))
    return {"looped": False, "block_n": block_n, "rows": rows, "num_warps": warps(block_n * rows, steps)}


def row_candidates(block_n: int, *, max_elements: int, warp_choices: tuple[int, ...],
                   per_thread: tuple[int, int]) -> list[dict]:
    """Rows-in-registers configs for the tuner: 1-16 rows of ``block_n`` per program (at most
    ``max_elements`` per program, at least 1024 when several rows), each ``num_warps`` in
    ``warp_choices`` that gives ``per_thread[0]..per_thread[1]`` elements per thread."""
    out = []
    for rows in (1, 2, 4, 8, 16):
        elements = rows * block_n
        if elements > max_elements or (rows > 1 and elements < 1024):
            continue
        for nw in warp_choices:
            if per_thread[0] <= elements // (32 * nw) <= per_thread[1]:
                out.append({"looped": False, "block_n": block_n, "rows": rows, "num_warps": nw})
    return out


def for_wave(cfg: dict, wave: int) -> dict:
    """``cfg`` (a default launch config with ``num_warps``) for a device of ``wave`` threads per warp.

    The defaults here size a program by threads (``num_warps`` x :data:`WAVE`: elements per thread); on a
    wave64 device (AMD CDNA: gfx90a, gfx942, gfx950) Triton's ``num_warps`` counts 64-thread wavefronts, so
    the same program has half the warps (at least 1). Wave32 devices (NVIDIA, AMD RDNA, Intel) keep ``cfg``:
    a CDNA count is never assumed for RDNA. Only a tuning-table miss's default is adapted; a table's config
    was measured on its arch and is used as it is.

    Example:
        >>> for_wave({"block_n": 4096, "rows": 1, "num_warps": 8}, 64)
        {'block_n': 4096, 'rows': 1, 'num_warps': 4}
        >>> for_wave({"block_n": 4096, "rows": 1, "num_warps": 8}, 32)
        {'block_n': 4096, 'rows': 1, 'num_warps': 8}
    """
    if wave <= WAVE or not isinstance(cfg, dict) or "num_warps" not in cfg:
        return cfg
    return {**cfg, "num_warps": max(1, int(cfg["num_warps"]) * WAVE // wave)}


def unique_configs(configs: list[dict]) -> list[dict]:
    """``configs`` without repeats, first occurrence kept (the default config stays first)."""
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def split_part(n: int, split: int) -> int | None:
    """The part length (a power of two) of a row of ``n`` over ``split`` programs, or ``None`` where
    ``split`` parts of it would leave a part with no element of the row (``(split - 1) * part >= n``)."""
    part = next_power_of_2(-(-n // split))
    return part if (split - 1) * part < n else None
