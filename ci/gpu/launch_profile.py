"""Where a Triton / Helion launch spends host time on this machine (diagnostic; prints, writes nothing).

cProfile of ``kernel[grid](...)`` and of the Helion impl, and the cost of calling the
compiled kernel's launcher directly (what Inductor's generated launchers do).
"""
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from launch_cost import per_call, profile  # noqa: E402 - the timing and cProfile helpers of benchmarks/

from accel.kernels.ops.rms_norm import helion_impl, triton_kernel as k  # noqa: E402


def prof(fn, top=22):
    print(profile(fn, "ci/gpu/launch_profile.py", calls=2000, top=top))


m, n = 4, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
rstd = torch.empty(m, device="cuda", dtype=torch.float32)
bn, rows, warps, _ = k.fwd_config(n)
grid = (-(-m // rows),)


def launch():
    return k.rms_norm_fwd_rows[grid](x, w, y, rstd, m, n, 1e-6, BLOCK_N=bn, ROWS=rows, HAS_W=True, HINTS=True,
                                   WIDE=False, num_warps=warps)


print("triton", triton.__version__, "kernel[grid] us/call", round(per_call(launch), 2))
ck = launch()
print("compiled kernel type", type(ck), "run", type(ck.run))
prof(launch)
stream = torch.cuda.current_stream().cuda_stream
args = (x, w, y, rstd, m, n, 1e-6, bn, rows, True)


def direct():
    ck.run(grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *args)


try:
    y.zero_()
    direct()
    torch.cuda.synchronize()
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
    print("direct run matches:", torch.allclose(y.float(), ref.float(), atol=2e-2, rtol=2e-2))
    print("direct ck.run us/call", round(per_call(direct), 2))
except Exception as exc:  # noqa: BLE001
    print("direct run failed:", type(exc).__name__, exc)
print("torch.cuda.current_stream().cuda_stream us", round(per_call(lambda: torch.cuda.current_stream().cuda_stream), 2))
print("torch._C._cuda_getCurrentRawStream(0) us", round(per_call(lambda: torch._C._cuda_getCurrentRawStream(0)), 2))
print("helion impl us/call", round(per_call(lambda: helion_impl.fused_rms_norm(x, [n], w, 1e-6)), 2))
prof(lambda: helion_impl.fused_rms_norm(x, [n], w, 1e-6), top=25)

# -- the routed call, layer by layer (accel's own router; Triton only, tiny input so it routes) --
from accel.kernels.tuning import table as _tuning  # noqa: E402
from accel.kernels.ops.rms_norm import triton_impl  # noqa: E402

triton_impl.register()
_tuning.MIN_NUMEL["triton"] = 0
_tuning.reload()
op = torch.ops.aten._fused_rms_norm.default
print("routed op -> triton us/call", round(per_call(lambda: op(x, [n], w, 1e-6)), 2))
print("triton impl us/call", round(per_call(lambda: triton_impl.fused_rms_norm(x, [n], w, 1e-6)), 2))
prof(lambda: op(x, [n], w, 1e-6), top=30)
