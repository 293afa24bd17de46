"""A plain model with nn.RMSNorm layers, unchanged, routed through accel's kernels where they apply.

Run on any machine: on an NVIDIA GPU with Triton (or Helion) installed the
RMSNorm forward and backward run accel's kernels (see the "routed" column);
elsewhere ATen runs and ``accel kernels`` says why::

    python examples/kernels_rmsnorm.py
"""

import torch

import accel
import accel.kernels as ak
from accel.cli import main as accel_cli

device = accel.device()
gpu = device.type != "cpu"  # any accelerator accel selected (CUDA, ROCm, XPU, MPS)
dtype = torch.bfloat16 if gpu else torch.float32
hidden, tokens = (4096, 32768) if gpu else (256, 64)  # 8 sequences of 4096 tokens; small on CPU
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.RMSNorm(hidden))
                              for _ in range(4)]).to(device, dtype)
names = ak.install()
print(f"device {device}; installed: {names or 'nothing (see the built-in kernels table)'}")
x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
for _ in range(3):
    y = model(x)
    y.backward(torch.randn_like(y))
print(ak.explain("aten::_fused_rms_norm", y.detach(), [hidden], model[0][1].weight.detach(), None))
accel_cli(["kernels"])
