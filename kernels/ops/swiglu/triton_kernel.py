"""SwiGLU forward and backward in Triton (imported only when a kernel first runs).

Shapes: ``a``, ``b``, ``y``, ``dy``, ``da``, ``db`` are ``[M, N]`` rows of unit column stride, each with its own
row stride (Phi-3's gate and up halves are views into one ``[M, 2N]`` projection). dtypes fp32/bf16/fp16,
fp32 math, one rounding per output.

Forward: ``y = a * sigmoid(a) * b``. Backward: with ``s = sigmoid(a)``, ``db = dy * a * s`` and
``da = dy * b * s * (1 + a * (1 - s))``. ``ACT = 1`` swaps the activation for GELU's tanh approximation (GeGLU,
``accel::geglu``): ``g(a) = 0.5 * a * (1 + t)``, ``t = tanh(k * (a + 0.044715 * a**3))``, ``k = sqrt(2 / pi)``,
``g'(a) = 0.5 * (1 + t) + 0.5 * a * (1 - t**2) * k * (1 + 3 * 0.044715 * a**2)`` (``F.gelu(approximate="tanh")``'s
formula); :func:`swiglu_bwd_product` also writes ``y`` over ``dy`` (the MLP's
backward needs the product for the down projection's weight gradient: one pass instead of a second one).
A program covers ``ROWS x BLOCK_N`` elements (grid
``(cdiv(M, ROWS), cdiv(N, BLOCK_N))``): elementwise, so the only choice is the tile, which
:func:`default_config` picks to waste little of the last column block.
"""

from __future__ import annotations

import triton
import triton.language as tl
from accel.kernels.dsl.triton_configs import next_power_of_2
from accel.kernels.dsl.triton_lang import tanh_parts

__all__ = ["GELU_TANH", "SILU", "candidate_configs", "default_config", "swiglu_bwd", "swiglu_bwd_product",
           "swiglu_fwd"]

#: Elements per program of the default tile.
TILE = 4096


@triton.jit
def _tile(M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, WIDE: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    if WIDE:
        rows = rows.to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    return rows[:, None], cols[None, :], mask


from . import GELU_TANH, SILU  # noqa: E402,F401 - the ACT values, re-exported for the impls and the AOT cases



@triton.jit
def _gelu_t(a):
    """``(t, 1 - t**2)`` for ``t = tanh(k * (a + 0.044715 * a**3))``, ``k = sqrt(2 / pi)``
    (:func:`.triton_lang.tanh_parts`)."""
    x = 0.7978845608028654 * (a + 0.044715 * a * a * a)
    return tanh_parts(x)


@triton.jit
def _act(a, ACT: tl.constexpr):
    """The gate's activation of ``a`` (fp32): ``silu`` or GELU's tanh approximation."""
    if ACT == 1:
        t, _ = _gelu_t(a)
        return 0.5 * a * (1.0 + t)
    return a * tl.sigmoid(a)


@triton.jit
def swiglu_fwd(A, B, Y, M, N, sa, sb, sy, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, WIDE: tl.constexpr,
               ACT: tl.constexpr = 0):
    """``Y = act(A) * B`` on one ``ROWS x BLOCK_N`` tile; ``sa``, ``sb``, ``sy``: row strides (elements)."""
    r, c, mask = _tile(M, N, BLOCK_N, ROWS, WIDE)
    a = tl.load(A + r * sa + c, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + r * sb + c, mask=mask, other=0.0).to(tl.float32)
    y = _act(a, ACT) * b
    tl.store(Y + r * sy + c, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _backward(DY, A, B, DA, DB, M, N, sdy, sa, sb, sda, sdb, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
              WIDE: tl.constexpr, PRODUCT: tl.constexpr, ACT: tl.constexpr):
    r, c, mask = _tile(M, N, BLOCK_N, ROWS, WIDE)
    dy = tl.load(DY + r * sdy + c, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(A + r * sa + c, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + r * sb + c, mask=mask, other=0.0).to(tl.float32)
    if ACT == 1:
        t, d = _gelu_t(a)
        g = 0.5 * a * (1.0 + t)
        dg = 0.5 * (1.0 + t) + 0.5 * a * d * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a * a)
    else:
        s = tl.sigmoid(a)
        g = a * s
        dg = s * (1.0 + a * (1.0 - s))
    tl.store(DB + r * sdb + c, (dy * g).to(DB.dtype.element_ty), mask=mask)
    tl.store(DA + r * sda + c, (dy * b * dg).to(DA.dtype.element_ty), mask=mask)
    if PRODUCT:  # swiglu_fwd's arithmetic, act(a) * b: the same bits
        tl.store(DY + r * sdy + c, (g * b).to(DY.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_bwd(DY, A, B, DA, DB, M, N, sdy, sa, sb, sda, sdb, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
               WIDE: tl.constexpr, ACT: tl.constexpr = 0):
    """``DA``, ``DB`` of ``act(A) * B`` for ``DY`` on one tile (row strides as :func:`swiglu_fwd`)."""
    _backward(DY, A, B, DA, DB, M, N, sdy, sa, sb, sda, sdb, BLOCK_N, ROWS, WIDE, False, ACT)


@triton.jit
def swiglu_bwd_product(DY, A, B, DA, DB, M, N, sdy, sa, sb, sda, sdb, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                       WIDE: tl.constexpr, ACT: tl.constexpr = 0):
    """:func:`swiglu_bwd`, and ``Y = act(A) * B`` (:func:`swiglu_fwd`'s arithmetic, the same bits) stored over
    ``DY``: each element is read before the program that read it writes it."""
    _backward(DY, A, B, DA, DB, M, N, sdy, sa, sb, sda, sdb, BLOCK_N, ROWS, WIDE, True, ACT)


def default_config(n: int) -> dict:
    """``{"block_n", "rows", "num_warps"}`` for rows of ``n``: the widest column block of 256-2048 elements
    whose last block wastes least (``n = 5632``: 512, eleven full blocks), rows filling :data:`TILE`."""
    best = None
    for block_n in (2048, 1024, 512, 256):
        blocks = -(-n // block_n)
        waste = blocks * block_n - n
        if best is None or waste < best[0]:
            best = (waste, block_n)
    block_n = min(best[1], next_power_of_2(n))
    rows = max(1, TILE // block_n)
    return {"block_n": block_n, "rows": rows, "num_warps": 4 if block_n * rows <= 4096 else 8}


def candidate_configs(n: int) -> list[dict]:
    """Tiles ``accel bench --tune`` may time (default first): 256-2048 columns, 1-16 rows, 4 or 8 warps."""
    out = [default_config(n)]
    for block_n in (256, 512, 1024, 2048):
        if block_n > next_power_of_2(n):
            continue
        for rows in (1, 2, 4, 8, 16):
            for nw in (4, 8):
                if 1024 <= block_n * rows <= 16384 and (block_n * rows) // (32 * nw) in range(4, 65):
                    c = {"block_n": block_n, "rows": rows, "num_warps": nw}
                    if c not in out:
                        out.append(c)
    return out
