"""The ATen-signature wrappers every softmax DSL shares: flatten to ``[M, N]``, allocate, launch.

Each DSL module supplies ``launch_fwd``/``launch_bwd`` and a ``config(op, x, m, n)``
lookup; :func:`make_ops` turns them into ``aten::_softmax`` and
``aten::_softmax_backward_data`` implementations and their conds (the family registers them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from accel.kernels.dsl.launch import empty_like

from .conditions import make_conds

__all__ = ["make_ops"]

Config = Callable[[str, torch.Tensor, int, int], Mapping[str, Any]]
Launch = Callable[[Mapping[str, Any], int, int], Callable[..., None]]


def make_ops(dsl: str, limits: Any, launch_fwd: Callable[..., None], launch_bwd: Callable[..., None],
             config: Config, plans: tuple[Launch, Launch] | None = None,
             extra_reason: Callable[..., str | None] | None = None,
             ) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], Callable[..., tuple]]:
    """``(softmax, softmax_backward_data, conds)`` for one DSL (``conds(backends)``: the family's contract).

    Shapes: input/output/grad ``[..., N]`` contiguous, softmax over the last dim; fp32 math.
    ``plans``: ``(fwd_launch, bwd_launch)``, each ``(cfg, m, n) -> launch``, where the DSL can
    fix a launch once per argument signature: the ops then carry ``plan``
    (:mod:`accel.kernels.core.plans`), and a routed call is one allocation and that launch.
    ``extra_reason``: the DSL's own last check for the cond, ``(op, tensor, n, *others) -> reason or None``
    (:func:`.conditions.make_conds`).
    """

    def softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        """``aten::_softmax`` over the last dim (contiguous input; the cond checks it).

        The launchers get the tensors in their own shapes plus ``M, N`` (no views: this
        runs on every routed call, and each host call counts on small inputs).
        """
        n = input.shape[-1]
        m = input.numel() // n
        y = empty_like(input)
        launch_fwd(input, y, config("softmax_fwd", input, m, n), m, n)
        return y

    def softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                              input_dtype: torch.dtype) -> torch.Tensor:
        """``aten::_softmax_backward_data`` over the last dim."""
        n = output.shape[-1]
        m = output.numel() // n
        dx = empty_like(output)
        launch_bwd(grad_output, output, dx, config("softmax_bwd", output, m, n), m, n)
        return dx

    if plans is not None:
        fwd_launch, bwd_launch = plans

        def plan_fwd(input: torch.Tensor, dim: int, half_to_float: bool) -> Callable[..., torch.Tensor]:
            n = input.shape[-1]
            m = input.numel() // n
            launch = fwd_launch(config("softmax_fwd", input, m, n), m, n)

            def run(input, dim, half_to_float):
                y = empty_like(input)
                launch(input, y)
                return y
            run.launch = launch  # type: ignore[attr-defined]
            return run

        def plan_bwd(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                     input_dtype: torch.dtype) -> Callable[..., torch.Tensor]:
            n = output.shape[-1]
            m = output.numel() // n
            launch = bwd_launch(config("softmax_bwd", output, m, n), m, n)

            def run(grad_output, output, dim, input_dtype):
                dx = empty_like(output)
                launch(grad_output, output, dx)
                return dx
            run.launch = launch  # type: ignore[attr-defined]
            return run

        softmax.plan, softmax_backward_data.plan = plan_fwd, plan_bwd  # type: ignore[attr-defined]

    def conds(backends: Sequence[str]) -> tuple:
        return make_conds(dsl, backends, limits, extra_reason)

    return softmax, softmax_backward_data, conds
