"""Kernels on every vendor (issue 23): one routing policy, per-arch keys, vendor facts, device-agnostic bench.

On a faked ROCm gfx942 and a faked XPU (``accel.testing.fake_backend``) the built-in Triton kernels are
available, installed where this torch has the ATen kernels to fall back to, and decline with the command
that tunes them; a user table written for ``gfx942`` makes them route (the conds on fake tensors, and a
Triton interpreter run whose CPU tensors stand in for the MI300X's). The benchmark's timing on a faked XPU
calls no ``torch.cuda`` function.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import accel
import accel.kernels as ak
from accel.kernels.dsl import launch, triton_configs
from accel.kernels.ops import conds as _conds
from accel.kernels.ops.rms_norm import conditions as rms_conditions, triton_impl as rms_triton
from accel.kernels.tuning import table as _tuning
from accel.testing import fake_backend
from accel.testing.pytest_plugin import require_dsl

from _kernel_helpers import _clean_registry  # noqa: F401 (fixture)

TUNE = "run `accel bench --tune`"
GPU = ("cuda", "rocm", "xpu")


@pytest.fixture(autouse=True)
def _own_tables(tmp_path, monkeypatch):
    """A fresh user-table directory per test; the arch and table caches forgotten before and after."""
    monkeypatch.setenv(_tuning.TUNING_DIR_ENV, str(tmp_path / "tuning"))
    accel.clear_cache()
    yield
    accel.clear_cache()


def _kernels_report(*argv: str) -> tuple[int, dict]:
    from accel.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["kernels", *argv, "--json"])
    return code, json.loads(out.getvalue())


# ------------------------------------------------------------------------------ accel kernels per arch
@pytest.mark.parametrize("vendor, arch, shown", [("rocm", "gfx942:sramecc+:xnack-", "gfx942"),
                                                 ("rocm", "gfx1100", "gfx1100"), ("xpu", None, "pvc")])
def test_accel_kernels_lists_triton_as_not_tuned_with_the_command(vendor, arch, shown):
    require_dsl("triton")
    with fake_backend(vendor, arch=arch):
        code, data = _kernels_report()
    assert code == 0 and data["arch"] == shown and data["backend"] == vendor
    rows = {(r["kernel"], r["dsl"]): r for r in data["builtin"]}
    for (kernel, dsl), r in rows.items():
        if dsl == "triton":
            assert tuple(r["backends"]) == GPU and r["available"], r
            assert r["tuning"] == f"not tuned for {shown}: {TUNE}", r
        else:  # Helion and CuTeDSL stay NVIDIA, saying why
            assert tuple(r["backends"]) == ("cuda",) and not r["available"] and r["tuning"] is None, r
            assert ("torch's native DSL registry says Helion is not available on ROCm builds" in r["reason"]
                    if dsl == "helion" else "NVIDIA GPUs only" in r["reason"]), r


def test_accel_kernels_on_sm_90_shows_the_shipped_table():
    require_dsl("triton")
    with fake_backend("cuda", arch="sm_90"):
        _, data = _kernels_report()
    rows = {(r["kernel"], r["dsl"]): r["tuning"] for r in data["builtin"]}
    assert rows[("rms_norm", "triton")] == (
        "fwd: tuned for sm_90: 5 entries (shipped) naming it; default floors for bf16, fp16, fp32 (not measured: "
        "fp16, fp32); bwd: tuned for sm_90: 2 entries (shipped) naming it; default floors for bf16, fp16, fp32 (not "
        "measured: fp16, fp32)")
    # the floors the table declares without a measurement (their sources say "not measured") are said as such
    assert rows[("swiglu", "triton")] == ("tuned for sm_90: default floors for bf16, fp16, fp32 (not measured: bf16, "
                                          "fp16, fp32)")
    assert rows[("softmax", "triton")].endswith("default floors for bf16, fp16, fp32 (not measured: fp32)")
    assert rows[("layer_norm", "cutedsl")] == (  # a backward-only DSL that takes no misses
        f"fwd: not tuned for sm_90: {TUNE}; bwd: tuned for sm_90: 3 entries (shipped) naming it; no default floor "
        "(misses decline)")


def test_accel_kernels_install_on_a_faked_gfx942_installs_them_not_tuned():
    require_dsl("triton")
    if not torch.backends.cuda.is_built():
        pytest.skip(f"torch {torch.__version__} is a CPU build: ATen has no CUDA kernels to fall back to, so no "
                    "kernel can be registered at the CUDA key (a CUDA build, tox env torch214/torch215, runs this)")
    with fake_backend("rocm", arch="gfx942:sramecc+:xnack-"):
        code, data = _kernels_report("--install")
        try:
            assert code == 0 and data["installed"]
            assert all(n.endswith(".triton") for n in data["installed"]), data["installed"]
            for r in data["builtin"]:
                if r["dsl"] == "triton":
                    assert r["installed"] and r["tuning"] == f"installed, not tuned for gfx942: {TUNE}", r
        finally:
            for o in ak.overrides():
                ak.unregister(o.name)


# ------------------------------------------------------------------------------ the conds' decisions
def _fake(shape, device, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device=device)


@contextlib.contextmanager
def _fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # FakeTensor.data_ptr() deprecation
        yield


def test_gfx942_declines_until_a_user_table_routes_it():
    fwd, bwd = rms_conditions.make_conds("triton", GPU, rms_triton.LIMITS)
    with fake_backend("rocm", arch="gfx942:sramecc+:xnack-"), _fake_tensors():
        x, w = _fake((4096, 4096), "cuda", torch.float16), _fake((4096,), "cuda", torch.float16)
        assert not fwd(x, [4096], w, None)
        assert fwd.why_not(x, [4096], w, None) == (
            f"no tuning entry for gfx942 fp16 (rms_norm_fwd, bucket M<=4096 x N<=4096) and no declared default for "
            f"triton: {TUNE} on this GPU (it measures ATen against each kernel and writes the user table "
            f"{_tuning.user_table_path('gfx942')}); until then ATen runs")
        _tuning.write_user_table("gfx942", [dict(op="rms_norm_fwd", dtype="float16", m=4096, n=4096, impl="triton",
                                                 us={"aten": 60.0, "triton": 40.0}, rounds=3)])
        assert fwd(x, [4096], w, None) and fwd.why_not(x, [4096], w, None) is None
        other = _fake((4096, 2048), "cuda", torch.float16)  # another bucket: still not tuned
        assert "no tuning entry for gfx942 fp16 (rms_norm_fwd, bucket M<=4096 x N<=2048)" in fwd.why_not(
            other, [2048], _fake((2048,), "cuda", torch.float16), None)
        rstd = torch.empty(4096, 1, device="cuda")
        assert "no tuning entry for gfx942 fp16 (rms_norm_bwd" in bwd.why_not(x, x, [4096], rstd, w, [True, True])


def test_a_faked_xpu_keys_its_own_family_and_declines():
    fwd, _ = rms_conditions.make_conds("triton", GPU, rms_triton.LIMITS)
    with fake_backend("xpu", extra_properties={"architecture": 0x0000000500400400}), _fake_tensors():
        x, w = _fake((8192, 4096), "xpu"), _fake((4096,), "xpu")
        assert launch.arch(x.device) == "bmg"
        assert fwd.why_not(x, [4096], w, None).startswith(
            "no tuning entry for bmg bf16 (rms_norm_fwd, bucket M<=8192 x N<=4096) and no declared default")
        _tuning.write_user_table("bmg", [], defaults=[dict(op="rms_norm_fwd", dtype="bfloat16", impl="triton",
                                                             min_numel=1 << 22, source="accel bench --tune on a B580")])
        assert fwd(x, [4096], w, None)  # 2**25 elements: above the floor this table declares
        small = _fake((1024, 1024), "xpu")
        assert fwd.why_not(small, [1024], _fake((1024,), "xpu"), None).startswith(
            "1048576 elements < 4194304, the user bmg table's default floor for rms_norm_fwd bf16 (triton; accel bench "
            "--tune on a B580)")


def test_sm_90_routes_as_before_except_the_fp16_layer_norm_backward_it_lost():
    """The shipped sm_90 table declares today's 2**20 floor for every op, dtype and DSL (with its source) and
    picks ATen for the fp16 LayerNorm backward 4096x4096 bucket (routed Triton: 0.93x ATen, session 8)."""
    from accel.kernels.ops.layer_norm import conditions as ln_conditions, triton_impl as ln_triton

    fwd, _ = rms_conditions.make_conds("triton", GPU, rms_triton.LIMITS)
    _, ln_bwd = ln_conditions.make_conds("triton", GPU, ln_triton.LIMITS)
    with fake_backend("cuda", arch="sm_90"), _fake_tensors():
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x, w = _fake((2048, 512), "cuda", dtype), _fake((512,), "cuda", dtype)  # 2**20 elements, a miss
            assert fwd(x, [512], w, None), dtype
            small = _fake((64, 512), "cuda", dtype)
            assert "the shipped sm_90 table's default floor for rms_norm_fwd" in fwd.why_not(small, [512], w, None)
        x = _fake((4096, 4096), "cuda", torch.float16)
        w = _fake((4096,), "cuda", torch.float16)
        mean = rstd = torch.empty(4096, 1, device="cuda")
        why = ln_bwd.why_not(x, x, [4096], mean, rstd, w, w, [True, True, True])
        assert why == "the shipped tuning table for sm_90 picks aten for layer_norm_bwd float16 bucket M<=4096 x N<=4096"
    sources = {d.why.split(":")[0] for d in _tuning.defaults("sm_90").values()}
    assert sources == {"bf16, measured", "bf16, not measured by accel bench",
                       "bf16, not measured against the op's default kernel", "fp16, measured in one run only (benchmarks/"
                       "results/h200/sm_90-table/kernels-20261201-120206.json", "fp16, not measured on the H200",
                       "fp32, not measured on the H200"}, sources
    assert {k[1] for k in _tuning.defaults("sm_90")} == {"float32", "bfloat16", "float16"}


def test_a_default_needs_its_source():
    from accel.errors import TuningTableError

    with pytest.raises(TuningTableError, match="default 0 has an empty source: say where the floor was measured"):
        _tuning.write_user_table("gfx942", [], defaults=[dict(op="rms_norm_fwd", dtype="bfloat16", impl="triton",
                                                               min_numel=1, source=" ")])
    with pytest.raises(TuningTableError, match="has impl 'aten', not one of"):
        _tuning.write_user_table("gfx942", [], defaults=[dict(op="rms_norm_fwd", dtype="bfloat16", impl="aten",
                                                               min_numel=1, source="x")])
    assert not _tuning.user_table_path("gfx942").exists()


# ------------------------------------------------------------------------------ interpreter: a gfx942 table routes
SCRIPT = textwrap.dedent("""
    import json, torch
    import accel.kernels as ak
    from accel.kernels.ops import conds
    from accel.kernels.ops.rms_norm import FAMILY, reference
    from accel.kernels.tuning import table
    # CPU tensors stand in for an MI300X's: the conds read the arch key gfx942 (the interpreter runs the kernel)
    conds.arch = lambda device: "gfx942"
    names = FAMILY.register("triton", ["cpu"])
    op = torch.ops.aten._fused_rms_norm.default
    x, w = torch.randn(64, 64), torch.randn(64)
    out = {"names": names}
    out["before"] = str(ak.explain(op, x, [64], w, 1e-6))
    op(x, [64], w, 1e-6)
    out["routed_before"] = {o.name: o.routed for o in ak.overrides()}
    table.write_user_table("gfx942", [dict(op="rms_norm_fwd", dtype="float32", m=64, n=64, impl="triton", rounds=3)])
    out["after"] = ak.explain(op, x, [64], w, 1e-6).kernel
    y, rstd = op(x, [64], w, 1e-6)
    ref, _ = reference.fused_rms_norm(x, [64], w, 1e-6)
    out["err"] = (y - ref).abs().max().item()
    out["routed_after"] = {o.name: o.routed for o in ak.overrides()}
    print(json.dumps(out))
""")


def test_a_user_table_for_gfx942_makes_the_kernel_route_in_the_interpreter(tmp_path):
    require_dsl("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", _tuning.TUNING_DIR_ENV: str(tmp_path / "tuning")}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["names"] == ["rms_norm_fwd.triton", "rms_norm_bwd.triton"]
    assert "runs aten" in out["before"] and "no tuning entry for gfx942 fp32 (rms_norm_fwd" in out["before"], out
    assert TUNE in out["before"]
    assert out["routed_before"]["rms_norm_fwd.triton"] == 0
    assert out["after"] == "rms_norm_fwd.triton"
    assert out["routed_after"]["rms_norm_fwd.triton"] == 1 and out["err"] < 1e-5, out


# ------------------------------------------------------------------------------ vendor facts
@pytest.mark.parametrize("vendor, arch, expect", [
    ("rocm", "gfx942:sramecc+:xnack-", ("gfx942", "cdna", 64, 64 * 1024, "fnuz")),
    ("rocm", "gfx950", ("gfx950", "cdna", 64, 160 * 1024, "ocp")),
    ("rocm", "gfx90a", ("gfx90a", "cdna", 64, 64 * 1024, None)),
    ("rocm", "gfx1100", ("gfx1100", "rdna", 32, 64 * 1024, None)),
    ("rocm", "gfx1201", ("gfx1201", "rdna", 32, 64 * 1024, "ocp")),
    ("cuda", "sm_90", ("sm_90", "nvidia", 32, 227 * 1024, "ocp")),
    ("cuda", "sm_80", ("sm_80", "nvidia", 32, 163 * 1024, None)),
    ("cuda", "sm_120", ("sm_120", "nvidia", 32, 99 * 1024, "ocp")),
])
def test_kernel_limits_per_arch(vendor, arch, expect):
    with fake_backend(vendor, arch=arch):
        limits = accel.backend().kernel_limits(0)
        assert (limits.arch, limits.family, limits.wave_size, limits.shared_memory, limits.fp8) == expect
        assert limits == launch.kernel_limits(accel.device(0))
        assert limits.fp8 == accel.backend().capabilities().fp8  # one fp8 flavour, the Backend's


def test_kernel_limits_of_an_intel_gpu_come_from_its_properties():
    with fake_backend("xpu", extra_properties={"sub_group_sizes": [16, 32], "local_mem_size": 128 * 1024,
                                               "last_level_cache_size": 204 * 2**20}):
        limits = accel.backend().kernel_limits(0)
    assert (limits.arch, limits.family, limits.wave_size, limits.shared_memory, limits.fp8) == \
        ("pvc", "xe", 32, 128 * 1024, "ocp")
    assert limits.cache_bytes == 204 * 2**20
    with fake_backend("xpu", extra_properties={"sub_group_sizes": [8, 16]}):
        assert accel.backend().kernel_limits(0).wave_size == 16


@pytest.mark.parametrize("vendor, arch, warps", [("rocm", "gfx942", 4), ("rocm", "gfx1100", 8), ("cuda", "sm_90", 8),
                                                 ("xpu", None, 8)])
def test_a_default_config_follows_the_wave_size(vendor, arch, warps):
    """A miss's default config keeps its threads per program: half the warps on CDNA's wave64, as is on RDNA."""
    cfg = {"looped": False, "block_n": 4096, "rows": 1, "num_warps": 8}
    with fake_backend(vendor, arch=arch), _fake_tensors():
        x = _fake((4096, 4096), accel.device(0).type)
        got = _conds.tuned_config("rms_norm_fwd", "triton", x, 4096, 4096, lambda n: dict(cfg))
    assert got["num_warps"] == warps and {k: v for k, v in got.items() if k != "num_warps"} == \
        {k: v for k, v in cfg.items() if k != "num_warps"}
    assert triton_configs.for_wave(cfg, 64)["num_warps"] == 4 and triton_configs.for_wave(cfg, 32) is cfg


# ------------------------------------------------------------------------------ bench on a faked XPU
class _Event:
    """Stands in for an XPU ``torch.Event`` (no XPU device here): records what the timer asks of it."""

    made: list = []

    def __init__(self, device=None, *, enable_timing=False):
        self.device, self.timing, self.at = device, enable_timing, None
        _Event.made.append(self)

    def record(self):
        import time

        self.at = time.perf_counter()


def test_bench_timing_on_a_faked_xpu_calls_no_torch_cuda_function():
    from accel.kernels.bench import timing, tune

    from unittest import mock

    called: list[str] = []
    synced: list = []
    with fake_backend("xpu", extra_properties={"architecture": 0x000000030F000700}), contextlib.ExitStack() as stack:
        for name in dir(torch.cuda):  # every public torch.cuda function records its call from here on
            fn = getattr(torch.cuda, name)
            if callable(fn) and not name.startswith("_") and not isinstance(fn, type):
                stack.enter_context(mock.patch.object(torch.cuda, name, lambda *a, _n=name, **k: called.append(_n)))
        device = timing.bench_device("accel bench", "run it on one.")
        assert device.type == "xpu" and (device.index or 0) == 0
        assert timing.device_facts(device) == {"device": "Intel(R) Data Center GPU Max 1550", "arch": "pvc",
                                               "backend": "xpu"}
        assert timing.flush_bytes(device) == timing.FLUSH_BYTES
        stack.enter_context(mock.patch.object(accel, "Event", _Event))
        stack.enter_context(mock.patch.object(accel, "elapsed_time", lambda s, e: (e.at - s.at) * 1e3))
        stack.enter_context(mock.patch.object(accel, "synchronize", lambda d=None: synced.append(d)))
        real_empty = torch.empty  # the flush buffer cannot live on a faked XPU: a small CPU one stands in
        stack.enter_context(mock.patch.object(torch, "empty", lambda n, dtype, device: real_empty(1, dtype=dtype)))
        timer = timing.Timer(device, 5)
        us = timer(lambda: None)
        assert isinstance(tune.timer_for(device), timing.Timer)
    assert us >= 0 and len(_Event.made) == 10 and all(e.device == device and e.timing for e in _Event.made)
    assert synced and all(d == device for d in synced)
    assert called == [], f"torch.cuda functions called on a faked XPU: {called}"


def test_bench_refuses_a_machine_without_a_gpu_backend():
    from accel.errors import KernelUnavailableError
    from accel.kernels.bench import timing

    with fake_backend("cpu"), pytest.raises(KernelUnavailableError, match="accel bench: no GPU device: the active "
                                                                          "backend is 'cpu'"):
        timing.bench_device("accel bench", "run it on one.")


def test_bench_devices_are_the_backends_op_families_register_for():
    from accel.kernels.bench import timing
    from accel.kernels.core import spec

    assert timing.GPU_BACKENDS is spec.GPU_BACKENDS  # one tuple: bench reads core's, never a copy


def test_tune_takes_at_least_three_rounds_and_keeps_aten_below_the_speedup():
    from accel.errors import BenchArgumentError
    from accel.kernels.bench import tune

    with pytest.raises(BenchArgumentError, match="rounds=2 is fewer than 3"):
        tune.tune(ops=("softmax",), device=torch.device("cpu"), rounds=2)
    assert tune._winner({"aten": 10.0, "triton": 9.8}) == ("aten", "triton only 1.02x ATen (< 1.05x): ATen")
    assert tune._winner({"aten": 10.0, "triton": 9.0, "helion": 9.4})[0] == "triton"
    ticks = iter(range(100))
    medians = tune._confirm(lambda fn: (fn(), float(next(ticks)))[1], lambda: None,
                            {"triton": (lambda cfg: None, {"num_warps": 4})}, 3)
    assert medians == {"aten": 2.0, "triton": 3.0}  # rounds interleave: aten 0, triton 1, aten 2, ...


def test_a_table_entry_whose_triton_config_cannot_launch_on_the_arch_declines():
    # 32 warps of 64 work-items exceed an AMD workgroup (the AOT check's "unfit" exclusion); on sm_90 they fit
    entry = dict(op="softmax_fwd", dtype="bfloat16", m=4096, n=4096, impl="triton",
                 config={"block_n": 4096, "num_warps": 32}, rounds=3)
    _tuning.write_user_table("gfx942", [entry])
    _tuning.write_user_table("sm_90", [entry])
    args = ("softmax_fwd", "triton", "gfx942", "bfloat16", 4096, 4096)
    why = _tuning.route(*args)
    assert why is not None and "cannot launch there" in why and "1024" in why and TUNE.split()[-1] in why
    assert not _tuning.takes(*args)  # the per-call check agrees with explain's sentence
    assert _tuning.route("softmax_fwd", "triton", "sm_90", "bfloat16", 4096, 4096) is None
    assert _tuning.takes("softmax_fwd", "triton", "sm_90", "bfloat16", 4096, 4096)


def test_unfit_reason_judges_triton_configs_per_arch():
    cfg = {"block_n": 4096, "num_warps": 32}
    assert "1024" in _tuning.unfit_reason("softmax_fwd", "triton", "gfx942", torch.bfloat16, cfg)
    assert _tuning.unfit_reason("softmax_fwd", "triton", "gfx1100", torch.bfloat16, cfg) is None  # wave32: fits
    assert _tuning.unfit_reason("softmax_fwd", "helion", "gfx942", torch.bfloat16, cfg) is None


def test_a_dtype_no_table_can_hold_is_said_as_the_dtype_not_as_untuned():
    for dtype in (torch.float64, torch.int32):
        why = _conds.table_reason("rms_norm_fwd", "triton", torch.zeros(64, 1024, dtype=dtype), 1024)
        assert why == f"dtype {dtype} not in fp32/bf16/fp16"
    assert "no tuning entry for cpu fp32" in _conds.table_reason("rms_norm_fwd", "triton", torch.zeros(64, 1024), 1024)
