"""``aten::native_layer_norm_backward`` for the DSLs whose launch takes ``[M, N]`` rows and returns fp32 dw/db sums.

Each such DSL supplies ``launch_bwd(dy, x, w, mean, rstd, dx, output_mask, cfg, has_b) -> (dw, db)`` and a
``config(x, m, n)``; :func:`make_backward` turns them into the ATen-signature op (Triton, CuTeDSL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from accel.kernels._launch import empty_like, row_count, rows_view, shaped_like

__all__ = ["make_backward"]


def make_backward(dsl: str, launch_bwd: Callable[..., tuple], config: Callable[[torch.Tensor, int, int], Mapping[str, Any]]
                  ) -> Callable[..., tuple]:
    """The ``native_layer_norm_backward`` of ``dsl``: flatten to rows, allocate ``dx``, launch, cast dw/db."""

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

    native_layer_norm_backward.__doc__ = (f"``aten::native_layer_norm_backward`` in {dsl}; same results as "
                                          ":func:`.reference.native_layer_norm_backward`.")
    return native_layer_norm_backward
