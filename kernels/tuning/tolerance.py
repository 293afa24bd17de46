"""Per-dtype tolerances for comparing a kernel's output with ATen's (verification and tests).

One table, used by ``ACCEL_KERNELS_VERIFY=1`` and by the numerics tests, so the
two never disagree. Values are ``(rtol, atol)`` as in :func:`torch.allclose`:
a few units in the last place of each dtype (fp32 2^-23, fp16 2^-10,
bf16 2^-7) scaled for a reduction over up to ~16K elements accumulated in fp32.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TOLERANCES", "tolerance", "compare"]

#: dtype -> (rtol, atol).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype`` (fp32's for dtypes not in the table)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _flatten(item)]
    return [x]


def compare(out: Any, ref: Any) -> tuple[float, str | None]:
    """Compare a kernel's result with ATen's.

    Args:
        out: the kernel's result (tensor, ``None``, or a tuple/list of them).
        ref: ATen's result, same structure.

    Returns:
        ``(max_abs_error, problem)``: the largest absolute difference over all
        tensors (computed in fp32), and ``None`` when every tensor matches in
        structure, shape and dtype and is within :func:`tolerance` of ATen's, else
        a one-line description of the first problem.
    """
    outs, refs = _flatten(out), _flatten(ref)
    if len(outs) != len(refs):
        return float("inf"), f"{len(outs)} outputs, ATen gives {len(refs)}"
    worst, problem = 0.0, None
    for i, (a, b) in enumerate(zip(outs, refs)):
        if a is None or b is None:
            if (a is None) != (b is None):
                problem = problem or f"output {i}: {'None' if a is None else 'a tensor'} where ATen gives " \
                                     f"{'None' if b is None else 'a tensor'}"
            continue
        is_tensor = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
        if is_tensor[0] != is_tensor[1]:
            problem = problem or f"output {i}: {_what(a)} where ATen gives {_what(b)}"
            worst = float("inf")
            continue
        if not is_tensor[0]:
            try:
                same = bool(a == b)
            except Exception as exc:  # noqa: BLE001 - arrays and user objects may have no truth value
                problem = problem or (f"output {i}: cannot compare {type(a).__name__} with ATen's "
                                      f"{type(b).__name__} ({type(exc).__name__}: {exc})")
                continue
            if not same:
                problem = problem or f"output {i}: {a!r} != ATen's {b!r}"
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            problem = problem or (f"output {i}: shape {list(a.shape)} {a.dtype} where ATen gives "
                                  f"{list(b.shape)} {b.dtype}")
            worst = float("inf")
            continue
        if a.device != b.device:
            problem = problem or f"output {i}: on {a.device} where ATen gives {b.device}"
            worst = float("inf")
            continue
        if a.numel() == 0:
            continue
        af, bf = a.detach().float(), b.detach().float()
        diff = (af - bf).abs()
        err = float(diff.max())
        if err != err:  # NaN somewhere
            err = float("inf") if not torch.equal(af.isnan(), bf.isnan()) else float(diff.nan_to_num(0).max())
        worst = max(worst, err)
        rtol, atol = tolerance(b.dtype)
        if not torch.allclose(af, bf, rtol=rtol, atol=atol, equal_nan=True):
            problem = problem or f"output {i}: max abs error {err:.3g} > tolerance (rtol={rtol}, atol={atol})"
    return worst, problem


def _what(x: Any) -> str:
    return "a Tensor" if isinstance(x, torch.Tensor) else type(x).__name__
