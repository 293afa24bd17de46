"""Host cost of an accel op's autograd on a CPU-only machine: the custom op's own autograd layer against
``eager_autograd``'s plain ``autograd.Function`` (µs per forward + backward, kernels left out).

``accel::rms_norm_hf``'s Triton impl is registered at the CPU key with its launches replaced by no-ops, so
what is timed is the Python a routed call runs around the kernel, on a ``[8, 64]`` fp32 input: ``custom op``
(``torch.ops.accel.rms_norm_hf``: the op's ``register_autograd`` layer, defaults filled, a redispatch),
``eager_autograd`` (``accel.kernels.ops.rms_norm_hf.op.rms_norm``, the call a model makes), and ``bare
Function`` (an ``autograd.Function`` that only allocates its outputs: the floor of any Python autograd).

Usage: ``python benchmarks/eager_autograd_host.py [--calls N] [--out DIR]`` (writes
``eager_autograd_host_cpu.md``). Needs ``triton`` installed (its kernel module is imported, never run).
"""

from __future__ import annotations

import argparse
import platform
import timeit
from pathlib import Path

import torch


def per_call(fn, number: int, repeat: int = 5) -> float:
    """Minimum over ``repeat`` runs of the mean µs per call of ``fn()``."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


class _Bare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="calls per timing (default 2000)")
    p.add_argument("--out", type=Path, help="directory for eager_autograd_host_cpu.md")
    args = p.parse_args(argv)
    if args.calls < 1:
        p.error(f"--calls {args.calls}: need at least 1")
    import accel.kernels as ak
    from accel.kernels.dsl import triton_utils
    from accel.kernels.ops.rms_norm_hf import op as rn_op, triton_impl
    from accel.kernels.tuning import table

    saved_call, saved_floor = triton_utils.LaunchPlan.__call__, dict(table.MIN_NUMEL)
    triton_utils.LaunchPlan.__call__ = lambda self, *tensors: None  # no kernel: the host path only
    table.MIN_NUMEL.update(triton=0, helion=0)
    ak.use_registry("accel")
    names = triton_impl.register(["cpu"])
    x, w = torch.randn(8, 64, requires_grad=True), torch.ones(64, requires_grad=True)
    g = torch.ones(8, 64)

    def custom_op():
        torch.ops.accel.rms_norm_hf(x, w, 1e-6, False)[0].backward(g)

    def eager():
        rn_op.rms_norm(x, w, 1e-6).backward(g)

    def bare():
        _Bare.apply(x, w).backward(g)

    try:
        rows = [(name, per_call(fn, args.calls)) for name, fn in
                (("custom op", custom_op), ("eager_autograd", eager), ("bare Function", bare))]
    finally:
        for n in names:
            ak.unregister(n)
        triton_utils.LaunchPlan.__call__ = saved_call
        table.MIN_NUMEL.clear()
        table.MIN_NUMEL.update(saved_floor)
    lines = [f"# accel::rms_norm_hf forward + backward, host only (µs per call): torch {torch.__version__}, "
             f"Python {platform.python_version()}, {platform.machine()}", "",
             "| path | µs |", "|---|---:|", *(f"| {name} | {us:.1f} |" for name, us in rows)]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "eager_autograd_host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
