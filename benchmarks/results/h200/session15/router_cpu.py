"""Router cost at the CPU key through accel's router path: two rms_norm overrides whose conds carry floors, 8 elements.

Usage: PYTHONPATH=<an installed accel tree> python router_cpu.py (output: router_cpu.txt beside it)."""
import torch
import accel.kernels as ak
from accel.kernels.bench import timing
from accel.kernels.ops.rms_norm import triton_impl as ti
ak.use_registry("accel")
fwd, _ = ti.conds(["cpu"])
print("cond has floor:", hasattr(fwd, "floor"), fwd.floor() if hasattr(fwd, "floor") else None)
def impl(*a, **k):
    raise AssertionError("never reached at 8 elements")
names = [ak.register("aten::_fused_rms_norm", impl=impl, cond=fwd, backends=["cpu"], dsl=d, name=f"probe_{d}.cpu")
         for d in ("triton", "helion")]
print("path", ak.registry_path() if hasattr(ak, "registry_path") else "?")
r = timing.router_overhead(torch.device("cpu"), calls=3000, rounds=7)
print({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
own = r["router_cost_us"] - (r["bare_router_cost_us"] or 0)
print("own part us", round(own, 3))
