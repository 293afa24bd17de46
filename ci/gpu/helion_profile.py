"""Where a Helion impl call spends host time on this machine (diagnostic; prints, writes nothing).

cProfile of the RMSNorm and LayerNorm Helion impls on ``[4, 1024]`` bf16 (host-bound), and
whether :func:`accel.kernels._helion.call` took its direct path (``_HOST`` entries).
"""
import cProfile
import io
import pstats
import time

import torch

from accel.kernels import _helion
from accel.kernels.ops.layer_norm import helion_impl as lh
from accel.kernels.ops.rms_norm import helion_impl as rh

m, n = 4, 1024
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
cases = {"rms helion impl": lambda: rh.fused_rms_norm(x, [n], w, 1e-6),
         "ln helion impl": lambda: lh.native_layer_norm(x, [n], w, b, 1e-5)}
for name, fn in cases.items():
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    print(f"{name}: {(time.perf_counter() - t0) / 2000 * 1e6:.1f} us/call; direct ok {_helion._direct_ok()}; "
          f"host functions cached {len(_helion._HOST)}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    print(out.getvalue()[:5000])
