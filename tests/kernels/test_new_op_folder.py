"""Adding an op is one folder: a toy ``aten::sin`` family of four files, dropped on the ops path, is found,
registered, routed, explained and removed again, with no edit anywhere else (issue 19's "Done means").

The folder is written to ``tmp_path`` and appended to ``accel.kernels.ops.__path__``, which is what
dropping it into the installed ``accel/kernels/ops/`` does. The Triton kernel runs in the interpreter on
CPU, in a subprocess (``TRITON_INTERPRET=1`` must be set before Triton is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from accel.testing.pytest_plugin import require_dsl

pytestmark = pytest.mark.cpu

FILES = {
    "__init__.py": '''
        """Toy family: ``aten::sin`` (no backward op: autograd differentiates sin with cos)."""
        from accel.kernels.core.spec import OpFamily

        from . import reference

        FAMILY = OpFamily("toy_sin", __name__, "aten::sin", None, (reference.sin, None), {"triton": "triton_impl"},
                          backends=("cpu",))
        ''',
    "reference.py": '''
        import torch


        def sin(x):
            return torch.sin(x.double()).to(x.dtype)
        ''',
    "triton_kernel.py": '''
        import triton
        import triton.language as tl


        @triton.jit
        def sin_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.sin(tl.load(x_ptr + offs, mask=mask)), mask=mask)
        ''',
    "triton_impl.py": '''
        import torch

        from accel.kernels.dsl.launch import lazy_module
        from accel.kernels.dsl.triton_utils import available  # noqa: F401 - the family contract

        from . import FAMILY

        DSL = "triton"
        _kernels = lazy_module(__package__ + ".triton_kernel")


        def sin(x):
            y = torch.empty_like(x)
            _kernels().sin_kernel[(-(-x.numel() // 256),)](x, y, x.numel(), BLOCK=256)
            return y


        def conds(backends):
            def cond(x):
                return x.dtype == torch.float32 and x.is_contiguous() and x.numel() >= 1

            cond.why_not = lambda x: None if cond(x) else "not a contiguous fp32 tensor"
            return cond, None


        forward, backward = sin, None
        register = FAMILY.registrar(DSL)
        ''',
}

SCRIPT = r"""
import json, sys, torch
import accel.kernels as ak
import accel.kernels.ops as ops

ops.__path__.append(sys.argv[1])
fam = ak.families()["toy_sin"]
from accel.kernels.tuning import table
out = {"dsls": list(fam.dsls), "table_ops": [o for o in table.OPS if o.startswith("toy_sin")],
       "available": [a.as_dict() for a in ak.availability() if a.kernel == "toy_sin"]}
names = fam.impl("triton").register(["cpu"])
x = torch.randn(1000)
out["explain"] = ak.explain(torch.ops.aten.sin.default, x).kernel
y = torch.sin(x)
out["max_err"] = (y - torch.sin(x.double()).float()).abs().max().item()
out["routed"] = {o.name: o.routed for o in ak.overrides()}
out["declined_int"] = ak.explain(torch.ops.aten.sin.default, torch.arange(4)).kernel
out["names"] = names
for n in names:
    ak.unregister(n)
torch.sin(x)
out["after"] = [o.name for o in ak.overrides()]
print(json.dumps(out))
"""


def test_a_toy_op_is_one_folder_of_four_files(tmp_path):
    require_dsl("triton")
    folder = tmp_path / "toy_sin"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    assert len(list(folder.iterdir())) <= 4
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env=env, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["dsls"] == ["triton"]
    assert out["table_ops"] == ["toy_sin_fwd", "toy_sin_bwd"]
    assert [a["dsl"] for a in out["available"]] == ["triton"] and out["available"][0]["available"]
    assert out["names"] == ["toy_sin_fwd.triton"]
    assert out["explain"] == "toy_sin_fwd.triton"
    assert out["routed"] == {"toy_sin_fwd.triton": 1}
    assert out["max_err"] < 1e-5
    assert out["declined_int"] == "aten"  # the cond declines int64: ATen answers
    assert out["after"] == []
