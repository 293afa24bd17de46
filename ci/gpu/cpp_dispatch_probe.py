"""What would a C++ kernel at the CUDA dispatch key cost on the host, next to accel's Python router?

GPU diagnostic (not a test): builds a tiny extension with ``torch.utils.cpp_extension.load_inline``
(g++ and nvcc on the machine) defining ``accel_probe::scale(Tensor x) -> Tensor``, ``y = 2 x``, three
ways, all at the CUDA key, and times each on a ``[4, 1024]`` bf16 tensor (host-bound: the kernel
is tiny) next to ATen's ``x * 2`` and ``aten::_fused_rms_norm``:

- ``cpp``: a C++ kernel function: ``at::empty_like`` plus a ``<<<>>>`` launch of a CUDA kernel on
  the current stream - the floor of a C++ router that checks its cond and launches a prebuilt kernel;
- ``py``: a Python function registered with ``torch.library`` at the CUDA key doing
  ``torch.empty_like`` plus the same launch through a pybind binding - accel's router path on torch
  without the native registry (the dispatcher boxes into Python);
- ``py_noop``: the same Python registration returning ``torch.empty_like(x)`` only.

Prints a table (µs per call, median of 5 runs of 3000 calls) and writes ``cpp_dispatch_probe.json``
into ``--out``. Usage: ``python ci/gpu/cpp_dispatch_probe.py --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

CPP = r"""
#include <torch/extension.h>
#include <torch/library.h>

void launch_scale(const at::Tensor& x, at::Tensor& y);  // in the CUDA source

at::Tensor scale_cuda(const at::Tensor& x) {
  auto y = at::empty_like(x);
  launch_scale(x, y);
  return y;
}

at::Tensor launch_only(const at::Tensor& x, at::Tensor y) {  // for the Python registration
  launch_scale(x, y);
  return y;
}

TORCH_LIBRARY(accel_probe, m) { m.def("scale(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(accel_probe, CUDA, m) { m.impl("scale", &scale_cuda); }
"""

CUDA = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

__global__ void scale_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(2.0f * __bfloat162float(x[i]));
}

void launch_scale(const at::Tensor& x, at::Tensor& y) {
  int64_t n = x.numel();
  int threads = 256;
  int blocks = (int)((n + threads - 1) / threads);
  scale_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), n);
}
"""


def per_call_us(fn, calls: int = 3000, runs: int = 5) -> float:
    """Median over ``runs`` of the mean host µs per call of ``fn`` (device synchronised around each run)."""
    out = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=".", help="directory for cpp_dispatch_probe.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cpp_dispatch_probe: no CUDA device; this diagnostic measures the CUDA dispatch key", file=sys.stderr)
        return 2
    from torch.utils.cpp_extension import load_inline

    t0 = time.perf_counter()
    ext = load_inline(name="accel_cpp_probe", cpp_sources=[CPP], cuda_sources=[CUDA], functions=["launch_only"],
                      extra_cflags=["-O2"], extra_cuda_cflags=["-O2"], verbose=False)
    build_s = time.perf_counter() - t0

    lib = torch.library.Library("accel_probe_py", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.define("noop(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: ext.launch_only(x, torch.empty_like(x)), "CUDA")
    lib.impl("noop", lambda x: torch.empty_like(x), "CUDA")

    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    ref = x * 2
    checks = {"cpp": torch.equal(torch.ops.accel_probe.scale(x), ref),
              "py": torch.equal(torch.ops.accel_probe_py.scale(x), ref)}
    rows = {
        "aten x * 2": per_call_us(lambda: torch.ops.aten.mul.Tensor(x, 2)),
        "aten _fused_rms_norm": per_call_us(lambda: torch.ops.aten._fused_rms_norm.default(x, [1024], w, 1e-6)),
        "cpp: C++ kernel at the CUDA key (empty_like + launch)": per_call_us(lambda: torch.ops.accel_probe.scale(x)),
        "py: Python kernel at the CUDA key (empty_like + pybind launch)":
            per_call_us(lambda: torch.ops.accel_probe_py.scale(x)),
        "py_noop: Python kernel at the CUDA key (empty_like only)": per_call_us(lambda: torch.ops.accel_probe_py.noop(x)),
        "torch.empty_like(x) from Python": per_call_us(lambda: torch.empty_like(x)),
    }
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "build_s": round(build_s, 1),
              "correct": checks, "us_per_call": {k: round(v, 2) for k, v in rows.items()}}
    print(f"# Host µs per call, [4, 1024] bf16, {report['device']}, torch {report['torch']} "
          f"(extension built in {build_s:.0f} s; results equal to x * 2: {checks})")
    for k, v in rows.items():
        print(f"{v:8.2f}  {k}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cpp_dispatch_probe.json").write_text(json.dumps(report, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
