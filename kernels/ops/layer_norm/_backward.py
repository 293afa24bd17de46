"""``aten::native_layer_norm_backward`` for the DSLs whose launch takes ``[M, N]`` rows and returns fp32 dw/db sums.

Each such DSL supplies a ``config(x, m, n)`` and ``plan_bwd(x, w, output_mask, cfg, has_b, cast) -> launch``, the
launch fixed once per argument signature (``launch(dy, x, w, mean, rstd, dx) -> (dw, db)`` in dtype ``cast``, fp32
for ``None``); :func:`make_backward` turns them into the ATen-signature op (Triton, CuTeDSL) with its ``plan``
(:mod:`accel.kernels.core.plans`), and :func:`launcher` into the DSL's one-call ``launch_bwd``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from accel.kernels.dsl.launch import empty, empty_like, lazy_module, row_count, rows_view, shaped_like
from accel.kernels.dsl.triton_utils import LaunchPlan

__all__ = ["Partials", "launcher", "make_backward"]


_tk = lazy_module(__package__ + ".triton_kernel")


def _triton_finish(device: torch.device) -> bool:
    """Whether :func:`.triton_kernel.partials_finish` can sum the partials on ``device``: Triton is installed and
    the tensors are CUDA ones (or run in Triton's interpreter)."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET", "").strip() == "1"


class Partials:
    """The layout of the fp32 dw/db partial sums of ``groups`` programs over rows of ``n``, both in one buffer
    (one allocation), and their reduction: one launch of :func:`.triton_kernel.partials_finish` summing and
    casting both into two fresh tensors (where Triton runs on the device), else ``torch.sum`` and ``.to`` per
    output.

    ``buffer[k * stride : k * stride + groups * n]`` is the ``[groups, n]`` partials of the ``k``-th wanted
    output (dw first); ``stride`` keeps each part 16-byte aligned. One launch, because on the H200's host
    (``[4, 1024]``) ``torch.sum`` and ``.to`` took 20 of the CuTeDSL plan's 33.5 µs per call (the cProfile
    log is not kept; ``benchmarks/results/h200/README.md`` records the numbers).
    """

    __slots__ = ("want_dw", "want_db", "parts", "groups", "n", "stride", "cast", "finisher")

    def __init__(self, want_dw: bool, want_db: bool, groups: int, n: int, cast: torch.dtype | None,
                 device: torch.device | None = None) -> None:
        self.want_dw, self.want_db, self.groups, self.n = want_dw, want_db, groups, n
        self.parts = int(want_dw) + int(want_db)
        self.stride = -(-groups * n // 4) * 4
        self.cast = cast if cast is not None and cast != torch.float32 else None
        self.finisher: Any = None
        if self.parts and device is not None and _triton_finish(device):
            k = _tk()
            self.finisher = LaunchPlan(k.partials_finish, (-(-n // k.FINISH_BLOCK_N), self.parts),
                                       (groups, n, self.stride), num_warps=4, BLOCK_N=k.FINISH_BLOCK_N,
                                       BLOCK_G=k.FINISH_BLOCK_G)

    def alloc(self, device: torch.device) -> torch.Tensor | None:
        """The buffer (``None`` when neither dw nor db is wanted)."""
        return empty(self.parts * self.stride, torch.float32, device) if self.parts else None

    def views(self, buf: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(dw partials, db partials)``, ``[groups, n]`` views of ``buf`` (``None`` where not wanted)."""
        if buf is None:
            return None, None
        size, shape = self.groups * self.n, (self.groups, self.n)
        dw = buf[:size].view(shape) if self.want_dw else None
        db = buf[self.stride * (self.parts - 1):][:size].view(shape) if self.want_db else None
        return dw, db

    def addresses(self, buf: torch.Tensor | None, spare: int) -> tuple[int, int]:
        """``(dw partials address, db partials address)`` in ``buf``; ``spare`` (any valid address) where not
        wanted."""
        if buf is None:
            return spare, spare
        base = buf.data_ptr()
        return (base if self.want_dw else spare), (base + 4 * self.stride * (self.parts - 1) if self.want_db else spare)

    def finish(self, buf: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(dw, db)``: ``[n]`` sums over the groups in the cast dtype (fp32 without one), each its own tensor
        (the op's schema returns fresh outputs: ``weight.grad`` and ``bias.grad`` must not share storage)."""
        if buf is None:
            return None, None
        dtype = self.cast or torch.float32
        if self.finisher is not None:
            first = empty(self.n, dtype, buf.device)
            second = empty(self.n, dtype, buf.device) if self.parts == 2 else first
            self.finisher(buf, first, second)
        else:
            sums = [buf[k * self.stride:][:self.groups * self.n].view(self.groups, self.n).sum(0)
                    for k in range(self.parts)]  # one sum per wanted output (one part: not twice)
            if self.cast is not None:
                sums = [t.to(self.cast) for t in sums]
            first, second = sums[0], sums[-1]
        return (first if self.want_dw else None), ((second if self.want_dw else first) if self.want_db else None)

    def zeros(self, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(dw, db)`` of no rows: sums over nothing, each its own tensor."""
        dtype = self.cast or torch.float32
        return (torch.zeros(self.n, dtype=dtype, device=device) if self.want_dw else None,
                torch.zeros(self.n, dtype=dtype, device=device) if self.want_db else None)


def launcher(plan_bwd: Callable[..., Callable[..., tuple]]) -> Callable[..., tuple]:
    """``launch_bwd(dy, x, w, mean, rstd, dx, want, cfg, has_b) -> (dw fp32 [N] or None, db fp32 [N] or None)``:
    the backward on ``[M, N]`` rows through a plan of ``plan_bwd`` made for this one call (``w``: the weight or
    None; ``dx``: the output, or None when not wanted; ``cfg``: the DSL's launch config). The tuner's and the
    benchmarks' entry point."""

    def launch_bwd(dy, x, w, mean, rstd, dx, want, cfg, has_b):
        return plan_bwd(x, w, (bool(want[0]) and dx is not None, want[1], want[2]), cfg, has_b, None)(
            dy, x, w, mean, rstd, dx)

    return launch_bwd


def make_backward(dsl: str, config: Callable[[torch.Tensor, int, int], Mapping[str, Any]],
                  plan_bwd: Callable[..., Callable[..., tuple]]) -> Callable[..., tuple]:
    """The ``native_layer_norm_backward`` of ``dsl``: flatten to rows, allocate ``dx``, launch, cast dw/db; its
    ``plan`` fixes the config, the cast and the launch once per argument signature."""
    launch_bwd = launcher(plan_bwd)

    def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
        if not any(output_mask):
            return None, None, None
        n = row_count(normalized_shape)
        x = rows_view(input, n)
        dx = empty_like(x) if output_mask[0] else None
        dw, db = launch_bwd(rows_view(grad_out, n), x, weight, mean, rstd, dx, output_mask,
                            config(x, x.shape[0], n), bias is not None)
        return (shaped_like(dx, input) if dx is not None else None,
                dw.to(weight.dtype).view(weight.shape) if dw is not None else None,
                db.to(bias.dtype).view(bias.shape) if db is not None else None)

    def plan(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
        """The op for calls with this argument signature: config, outputs and kernel fixed once."""
        if not any(output_mask):
            return native_layer_norm_backward
        n = row_count(normalized_shape)
        x = rows_view(input, n)
        want_dx = bool(output_mask[0])
        cast = weight.dtype if weight is not None else (bias.dtype if bias is not None else None)
        if weight is not None and bias is not None and bias.dtype != weight.dtype and output_mask[2]:
            return native_layer_norm_backward  # dw and db in two dtypes: no shared cast
        launch = plan_bwd(x, weight, tuple(bool(v) for v in output_mask), config(x, x.shape[0], n),
                          bias is not None, cast)

        def run(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
            x = rows_view(input, n)
            dx = empty_like(x) if want_dx else None
            dw, db = launch(rows_view(grad_out, n), x, weight, mean, rstd, dx)
            return (shaped_like(dx, input) if dx is not None else None,
                    dw.view(weight.shape) if dw is not None else None,
                    db.view(bias.shape) if db is not None else None)
        run.launch = launch  # type: ignore[attr-defined]
        return run

    native_layer_norm_backward.plan = plan  # type: ignore[attr-defined]
    native_layer_norm_backward.__doc__ = (f"``aten::native_layer_norm_backward`` in {dsl}; same results as "
                                          ":func:`.reference.native_layer_norm_backward`.")
    return native_layer_norm_backward
