"""The calling convention of accel's CuTeDSL kernels (kernels/_cutedsl.py ``Kernel``, ``launch``, ``ffi_reason``;
kernels/_cute_lib.py ``compile_kernel``) and the LayerNorm backward's planned launch.

On the CPU: what a call hands the compiled function (addresses, scalars, the current raw stream; pointer
objects and a ``CUstream`` on the executor path), the device guard, the choice of TVM-FFI, both calling
conventions compiled for ``sm_90a``, and the plan's partial buffers and sums with a stand-in kernel that
writes known partials. The ``cuda`` tests run the kernels through both conventions against ATen.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from accel.kernels.dsl import cutedsl_utils as _cutedsl
from accel.kernels.ops.layer_norm import _backward, cutedsl_impl as lc

HAS_CUTLASS = importlib.util.find_spec("cutlass") is not None
HAS_FFI = importlib.util.find_spec("tvm_ffi") is not None


@pytest.fixture
def raw_stream(monkeypatch):
    """Device 0 current with raw stream 0xabc0 + device index (no CUDA needed)."""
    calls = []
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: calls.append(index) or 0xABC0 + index,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    return calls


def test_an_ffi_kernel_gets_addresses_scalars_and_the_raw_stream_as_ints(raw_stream):
    seen = []
    k = _cutedsl.Kernel(None, lambda *a: seen.append(a), True)
    _cutedsl.launch(k, 0, 0x1000, 0x2000, 7)
    assert seen == [(0x1000, 0x2000, 7, 0xABC0)] and raw_stream == [0]


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda-python (CuTeDSL's bindings) not installed")
def test_an_executor_kernel_gets_pointer_objects_and_a_custream(raw_stream):
    import cuda.bindings.driver as cuda

    seen = []
    k = _cutedsl.Kernel(None, lambda *a: seen.append(a), False, lambda args: (("ptr", args[0]), *args[1:]))
    _cutedsl.launch(k, 0, 0x1000, 3)
    (args,) = seen
    assert args[:2] == (("ptr", 0x1000), 3)
    assert isinstance(args[2], cuda.CUstream) and int(args[2]) == 0xABC0


def test_launch_on_another_device_makes_it_current_first(raw_stream, monkeypatch):
    entered = []

    class Guard:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            entered.append(self.index)

        def __exit__(self, *exc):
            entered.append("exit")

    monkeypatch.setattr(torch.cuda, "device", Guard)
    seen = []
    _cutedsl.launch(_cutedsl.Kernel(None, lambda *a: seen.append((entered[:], a)), True), 1, 0x10)
    assert seen == [([1], (0x10, 0xABC1))] and entered == [1, "exit"] and raw_stream == [1]


def test_ffi_reason_follows_the_package_and_the_switch(monkeypatch):
    monkeypatch.setattr(_cutedsl, "_ffi_installed", lambda: True)
    monkeypatch.delenv("ACCEL_CUTEDSL_TVM_FFI", raising=False)
    assert _cutedsl.ffi_reason() is None
    monkeypatch.setenv("ACCEL_CUTEDSL_TVM_FFI", "0")
    assert _cutedsl.ffi_reason() == "ACCEL_CUTEDSL_TVM_FFI=0"
    monkeypatch.delenv("ACCEL_CUTEDSL_TVM_FFI")
    monkeypatch.setattr(_cutedsl, "_ffi_installed", lambda: False)
    assert "apache-tvm-ffi is not installed" in _cutedsl.ffi_reason()


_BUILD = """
import sys
from accel.kernels.ops.layer_norm import cutedsl_kernel as lk
from accel.kernels.ops.softmax import cutedsl_kernel as sk
a = lk.build("bfloat16", "bfloat16", 1024, 128, (True, True, True))
b = sk.build("fwd", "bfloat16", 1024, 1, 128)
print(type(a).__name__, a.ffi, type(a.fn).__name__, b.ffi, a is lk.build("bfloat16", "bfloat16", 1024, 128, (1, 1, 1)))
"""


@pytest.mark.skipif(not HAS_CUTLASS, reason="nvidia-cutlass-dsl not installed here (tox env torch214 installs it)")
@pytest.mark.parametrize("switch", ["1", "0"])
def test_kernels_compile_for_sm_90a_in_either_convention(switch):
    if switch == "1" and not HAS_FFI:
        pytest.skip("apache-tvm-ffi not installed here (tox env torch214 installs it)")
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "ACCEL_CUTEDSL_TVM_FFI": switch}
    r = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    kind, ffi, fn, ffi_b, cached = r.stdout.split()[-5:]
    assert (kind, ffi, ffi_b, cached) == ("Kernel", str(switch == "1"), str(switch == "1"), "True")
    if switch == "1":
        assert fn == "Function"  # the tvm_ffi.Function itself: no CuTeDSL Python between accel and the C call


class _WritingKernel:
    """Stands in for the compiled backward: records its arguments and writes known ``[groups, n]`` partials
    through the dw/db addresses it was given (``dw`` row ``g`` = ``g + 1``, ``db`` row ``g`` = ``-(g + 1)``),
    into the buffer the plan allocated (``captured[-1]``)."""

    def __init__(self, captured, groups, n):
        self.captured, self.groups, self.n, self.calls = captured, groups, n, []

    def __call__(self, index, *args):
        self.calls.append(args)
        if not self.captured:
            return  # neither dw nor db wanted: no partials
        buf = self.captured[-1]
        base, size = buf.data_ptr(), self.groups * self.n
        rows = torch.arange(1, self.groups + 1, dtype=torch.float32)[:, None].expand(self.groups, self.n)
        for sign, addr in ((1, args[6]), (-1, args[7])):
            start = (addr - base) // 4
            if 0 <= start and start + size <= buf.numel():
                buf[start:start + size].view(self.groups, self.n).copy_(sign * rows)


@pytest.mark.parametrize("mask,has_b,cast", [((True, True, True), True, torch.bfloat16),
                                             ((False, True, True), True, None),
                                             ((True, False, True), True, torch.float16),
                                             ((True, True, False), False, torch.float32),
                                             ((True, False, False), True, torch.bfloat16)])
def test_the_plan_sums_one_partials_buffer_for_dw_and_db(monkeypatch, mask, has_b, cast):
    m, n, groups = 300, 66, 5  # 5 * 66 fp32 partials: the db part starts past a 16-byte padding
    captured = []
    real_empty = _backward.empty
    monkeypatch.setattr(_backward, "empty", lambda shape, dtype, device: captured.append(
        real_empty(shape, dtype, device).fill_(float("nan"))) or captured[-1])
    monkeypatch.setattr(lc, "sm_count", lambda device: groups)
    monkeypatch.setattr(lc, "arch", lambda device: "sm_90")
    kernel = _WritingKernel(captured, groups, n)
    built = []

    class K:
        @staticmethod
        def build(*args):
            built.append(args)
            return kernel

    monkeypatch.setattr(lc, "_k", lambda: K)
    indices = []
    monkeypatch.setattr(lc.cutedsl_utils, "launch", lambda k, index, *args: indices.append(index) or k(index, *args))
    x, dy, w = torch.randn(m, n), torch.randn(m, n), torch.randn(n)
    mean, rstd = torch.randn(m), torch.rand(m)
    dx = torch.empty_like(x) if mask[0] else None
    plan = lc.plan_bwd(x, w, mask, {"threads": 128, "ctas_per_sm": 1}, has_b, cast)
    for _ in range(2):
        dw, db = plan(dy, x, w, mean, rstd, dx)
    assert len(built) == 1 and built[0][:5] == ("float32", "float32", n, 128, (mask[0], mask[1], mask[2] and has_b))
    want_dw, want_db = mask[1], mask[2] and has_b
    expect = float(groups * (groups + 1) // 2)
    dtype = cast or torch.float32
    if want_dw:
        assert dw.dtype == dtype and dw.shape == (n,) and torch.equal(dw, torch.full((n,), expect, dtype=dtype))
    else:
        assert dw is None
    if want_db:
        assert db.dtype == dtype and torch.equal(db, torch.full((n,), -expect, dtype=dtype))
    else:
        assert db is None
    args = kernel.calls[-1]
    assert args[:6] == (dy.data_ptr(), x.data_ptr(), w.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                        (dx if dx is not None else x).data_ptr())
    assert args[8:] == (m, groups) and indices == [x.get_device()] * 2  # the plan's device, every call
    if want_dw and want_db:
        assert dw.untyped_storage().data_ptr() != db.untyped_storage().data_ptr()  # fresh outputs, as ATen's
    if want_dw and want_db:
        assert args[7] - args[6] >= groups * n * 4 and (args[7] - args[6]) % 16 == 0  # apart, both 16-byte aligned
    if not (want_dw or want_db):
        assert not captured and args[6] == args[7] == mean.data_ptr()  # no partials, no sum


def test_the_planned_op_matches_the_per_call_op(monkeypatch):
    """``native_layer_norm_backward.plan`` (what the registry memoises) and the op itself (a plan made per call,
    then cast) give the same outputs in the same dtypes and shapes (a stand-in plan computes the reference's
    dw/db)."""
    from accel.kernels.ops.layer_norm import reference

    def fake_launch(dy, x, w, mean, rstd, dx, want, cfg, has_b):
        _, rw, rb = reference.native_layer_norm_backward(dy, x, [x.shape[1]], mean, rstd, w, w, [False, True, True])
        if dx is not None:
            dx.fill_(1.0)
        return (rw.float() if want[1] else None), (rb.float() if want[2] and has_b else None)

    class Plan:
        def __init__(self, x, w, want, cfg, has_b, cast):
            self.want, self.has_b, self.cast = want, has_b, cast

        def __call__(self, dy, x, w, mean, rstd, dx):
            dw, db = fake_launch(dy, x, w, mean, rstd, dx, self.want, None, self.has_b)
            cast = self.cast or torch.float32
            return (dw.to(cast) if dw is not None else None), (db.to(cast) if db is not None else None)

    from accel.kernels.ops.layer_norm._backward import make_backward

    op = make_backward("test", lambda x, m, n: {}, Plan)
    x = torch.randn(2, 3, 16, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w, b = torch.randn(16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)
    mean, rstd = torch.randn(2, 3, 1), torch.rand(2, 3, 1)
    for mask in ([True, True, True], [False, True, False], [True, False, True], [False, False, False]):
        args = (dy, x, [16], mean, rstd, w, b, mask)
        want = op(*args)
        got = op.plan(*args)(*args)
        for g, e in zip(got, want):
            assert (g is None) == (e is None)
            if g is not None:
                assert g.dtype == e.dtype and g.shape == e.shape and torch.equal(g, e)


def test_the_plan_casts_to_the_weight_dtype_and_leaves_mixed_dtypes_to_the_op():
    """``make_backward``'s plan: dw/db come back in the weight's dtype (the bias's without a weight); a weight and
    bias of two dtypes (which the conds decline) get the per-call op, which casts each on its own."""
    from accel.kernels.ops.layer_norm._backward import make_backward

    made = []

    class Plan:
        def __init__(self, x, w, want, cfg, has_b, cast):
            made.append(cast)

        def __call__(self, dy, x, w, mean, rstd, dx):
            return None, None

    op = make_backward("test", lambda x, m, n: {}, Plan)
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    stats = (torch.randn(4, 1), torch.rand(4, 1))
    f32, bf16 = torch.ones(8), torch.ones(8, dtype=torch.bfloat16)
    for w, b, cast in ((f32, f32, torch.float32), (bf16, bf16, torch.bfloat16), (None, bf16, torch.bfloat16),
                       (f32, None, torch.float32)):
        made.clear()
        assert op.plan(x, x, [8], *stats, w, b, [True, True, True]) is not op
        assert made == [cast]
    made.clear()
    assert op.plan(x, x, [8], *stats, bf16, f32, [True, True, True]) is op and made == []
    assert op.plan(x, x, [8], *stats, bf16, f32, [True, True, False]) is not op  # db not wanted: one cast


@pytest.mark.parametrize("cast", [None, torch.bfloat16])
def test_zero_rows_give_zero_sums_in_the_cast_dtype_in_two_tensors(cast):
    from accel.kernels.ops.layer_norm._backward import Partials

    dw, db = Partials(True, True, 1, 16, cast).zeros(torch.device("cpu"))
    assert dw.dtype == db.dtype == (cast or torch.float32) and not dw.any() and not db.any()
    assert dw.untyped_storage().data_ptr() != db.untyped_storage().data_ptr()


_FLIP = """
import os
from accel.kernels.ops.softmax import cutedsl_kernel as sk
a = sk.build("fwd", "bfloat16", 1024, 1, 128)
os.environ["ACCEL_CUTEDSL_TVM_FFI"] = "0"
b = sk.build("fwd", "bfloat16", 1024, 1, 128)
os.environ["ACCEL_CUTEDSL_TVM_FFI"] = "1"
print(a.ffi, b.ffi, a is sk.build("fwd", "bfloat16", 1024, 1, 128), a is b)
"""


@pytest.mark.skipif(not (HAS_CUTLASS and HAS_FFI), reason="needs nvidia-cutlass-dsl and apache-tvm-ffi (tox torch214)")
def test_each_calling_convention_compiles_and_caches_its_own_kernel():
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "ACCEL_CUTEDSL_TVM_FFI": "1"}
    r = subprocess.run([sys.executable, "-c", _FLIP], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-4:] == ["True", "False", "True", "False"]


_THREADS = """
import threading
from accel.kernels.ops.layer_norm import cutedsl_kernel as lk
errors, kernels = [], []
def work(n):
    try:
        kernels.append(lk.build("bfloat16", "bfloat16", n, 128, (True, True, True)))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(n,)) for n in (1024, 2048, 1024, 4096)]
[t.start() for t in threads]
[t.join() for t in threads]
print("ERRORS", errors, len(kernels))
"""


@pytest.mark.skipif(not HAS_CUTLASS, reason="nvidia-cutlass-dsl not installed here (tox env torch214 installs it)")
def test_concurrent_first_calls_compile_one_at_a_time():
    """Two ``cute.compile`` at once break CuTeDSL's compiler session (an error, or an abort of the process):
    first calls from several threads (autograd runs one backward thread per device) compile in turn."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a"}
    r = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("ERRORS", 1)[1].split() == ["[]", "4"], r.stdout


def _gpu_ok() -> bool:
    return torch.cuda.is_available() and HAS_CUTLASS and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.cuda
@pytest.mark.skipif(not _gpu_ok(), reason="needs an SM 9.0+ NVIDIA GPU and nvidia-cutlass-dsl")
@pytest.mark.parametrize("switch", ["1", "0"])
def test_both_conventions_match_aten_on_the_gpu(switch):
    """Softmax forward and LayerNorm backward through the TVM-FFI call and through CuTeDSL's executor, on the
    current stream of a side stream, against ATen (in a subprocess: the convention is fixed per compile)."""
    if switch == "1" and not HAS_FFI:
        pytest.skip("apache-tvm-ffi not installed")
    code = """
import json, torch
from accel.kernels.ops.softmax import cutedsl_impl as sc
from accel.kernels.ops.layer_norm import _backward, cutedsl_impl as lc
from accel.kernels.ops.layer_norm import reference
torch.manual_seed(0)
x = torch.randn(1000, 4096, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())  # x was made on the default stream
with torch.cuda.stream(s):
    y = torch.full_like(x, float("nan"))
    sc.launch_fwd(x, y, {"cluster": 1, "threads": 256})
s.synchronize()
err_sm = (y.float() - torch.softmax(x.float(), -1)).abs().max().item()
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
mean, rstd = x.float().mean(-1), x.float().var(-1, unbiased=False).add(1e-5).rsqrt()
dy = torch.randn_like(x)
dx = torch.full_like(x, float("nan"))
plan = lc.plan_bwd(x, w, (True, True, True), {"threads": 256, "ctas_per_sm": 1}, True, torch.bfloat16)
s.wait_stream(torch.cuda.current_stream())  # dy, w, mean, rstd and the NaN-filled dx: default stream
with torch.cuda.stream(s):
    dw, db = plan(dy, x, w, mean, rstd, dx)
s.synchronize()
rdx, rdw, rdb = torch.ops.aten.native_layer_norm_backward(dy, x, [4096], mean, rstd, w, w, [True, True, True])
print(json.dumps({"ffi": plan.kernel.ffi, "aliased": dw.untyped_storage().data_ptr() == db.untyped_storage().data_ptr(),
                  "sm": err_sm, "dx": (dx.float() - rdx.float()).abs().max().item(),
                  "dw": ((dw.float() - rdw.float()).abs().max() / rdw.float().abs().max()).item(),
                  "db": ((db.float() - rdb.float()).abs().max() / rdb.float().abs().max()).item()}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ACCEL_CUTEDSL_TVM_FFI": switch})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["ffi"] is (switch == "1") and not got["aliased"]
    assert got["sm"] < 1e-2 and got["dx"] < 0.1 and got["dw"] < 2e-2 and got["db"] < 2e-2, got
