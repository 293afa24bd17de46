"""accel's RMSNorm kernels (Triton, Helion): cond on meta tensors, numerics and routing in interpreter mode.

Four tests per kernel: the cond on meta (and fake-CUDA) tensors; numerics
against the reference with fresh random inputs, per-dtype tolerances and NaN-
poisoned outputs; the register -> route -> unregister -> ATen round trip on both
registry paths; all kernel code runs in the DSL's interpreter on CPU
(``TRITON_INTERPRET=1`` / ``HELION_INTERPRET=1``), in a subprocess because the
variables must be set before the DSL is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from accel import _compat
from accel.kernels.tuning import table as tuning
from accel.kernels.ops.rms_norm import conditions, helion_impl, triton_impl
from accel.testing.pytest_plugin import importorskip_dsl, require_dsl
from _kernel_helpers import meta_floors  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def _meta_floors(meta_floors):
    """The meta arch declares the 2**20 floors (:func:`_kernel_helpers.meta_floors`)."""
    return meta_floors

IMPLS = {"triton": triton_impl, "helion": helion_impl}
PATHS = ["accel"] + (["native"] if _compat.native_dsl_registry() is not None else [])
BIG = (4096, 4096)  # above tuning.MIN_NUMEL


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    return IMPLS[request.param]


@pytest.fixture
def conds(impl):
    conditions._arch.cache_clear()
    yield conditions.make_conds(impl.DSL, ["meta"], impl.LIMITS)
    conditions._arch.cache_clear()


# ------------------------------------------------------------------------- cond
@pytest.mark.parametrize("dtype", conditions.DTYPES)
def test_cond_accepts_supported_inputs_on_meta(impl, conds, dtype):
    fwd, bwd = conds
    x, w = _meta(*BIG, dtype=dtype), _meta(BIG[1], dtype=dtype)
    assert fwd(x, [BIG[1]], w, 1e-6) and fwd.why_not(x, [BIG[1]], w, 1e-6) is None
    assert fwd(_meta(8, 1024, 512, dtype=dtype), [512], _meta(512, dtype=dtype), None)
    rstd = torch.empty(BIG[0], 1, device="meta")
    assert bwd(x, x, [BIG[1]], rstd, w, [True, True])
    assert fwd(x, [BIG[1]], None, 1e-6) is (not impl.LIMITS.needs_weight)


def test_cond_rejects_with_reasons_on_meta(impl, conds):
    fwd, bwd = conds
    n = BIG[1]
    x, w = _meta(*BIG), _meta(n)
    too_long = impl.LIMITS.max_n_fwd * 2
    cases = [
        ((_meta(*BIG, dtype=torch.float64), [n], _meta(n, dtype=torch.float64)), "not in fp32/bf16/fp16"),
        ((x, [n], _meta(n, dtype=torch.float32)), "weight differs"),
        ((_meta(n, BIG[0]).t(), [BIG[0]], _meta(BIG[0])), "not contiguous"),
        ((_meta(BIG[0] * n + 1)[1:].view(*BIG), [n], w), "not 16-byte aligned"),
        ((_meta(4096, 4095), [4095], _meta(4095)), "not 16-byte aligned"),
        ((_meta(64, too_long), [too_long], _meta(too_long)), f"> {impl.LIMITS.max_n_fwd}"),
        ((_meta(4, n), [n], w), "default floor"),
        ((x, [n // 2], w), "does not match"),
        ((torch.empty(*BIG, dtype=torch.bfloat16), [n], torch.empty(n, dtype=torch.bfloat16)), "device type 'cpu'"),
    ]
    for args, reason in cases:
        assert fwd(*args) is False, reason
        assert reason in fwd.why_not(*args)
    rstd = torch.empty(BIG[0], 1, device="meta")
    assert "rstd" in bwd.why_not(x, x, [n], rstd.to(torch.bfloat16), w, [True, True])
    assert "grad_out" in bwd.why_not(_meta(*BIG[::-1]).t(), x, [n], rstd, w, [True, True])
    big_bwd = impl.LIMITS.max_n_bwd * 2
    assert f"> {impl.LIMITS.max_n_bwd}" in bwd.why_not(
        _meta(64, big_bwd), _meta(64, big_bwd), [big_bwd], torch.empty(64, 1, device="meta"), _meta(big_bwd),
        [True, True])


def test_cond_declines_empty_input_even_without_a_floor(impl, conds, monkeypatch):
    """With the floor at 0 (``tuning.MIN_NUMEL``, as the interpreter runs set it) empty input still goes to
    ATen: the backward's grid shares out rows and there are none."""
    monkeypatch.setitem(tuning.MIN_NUMEL, impl.DSL, 0)
    fwd, bwd = conds
    x, w = _meta(0, 64), _meta(64)
    assert fwd(x, [64], w, None) is False and "empty input" in fwd.why_not(x, [64], w, None)
    rstd = torch.empty(0, 1, device="meta")
    assert bwd(x, x, [64], rstd, w, [True, True]) is False
    assert fwd(_meta(2, 64), [64], w, None)  # the same floor takes a non-empty call


def _table(monkeypatch, arch, entries):
    """Make ``_tuning.table(arch)`` return ``entries`` (folded) for this test."""
    folded: dict = {}
    tuning._fold(folded, entries, "user")
    real = tuning.table
    monkeypatch.setattr(tuning, "table", lambda a: folded if a == arch else real(a))


def test_cond_consults_the_tuning_table(impl, conds, monkeypatch):
    fwd, bwd = conds
    _table(monkeypatch, "meta", [dict(op=f"rms_norm_{d}", dtype="bfloat16", m=8192, n=4096, impl="aten")
                                 for d in ("fwd", "bwd")])
    w = _meta(4096)
    assert "picks aten" in fwd.why_not(_meta(8192, 4096), [4096], w, None)
    assert fwd(_meta(16384, 4096), [4096], w, None)  # another bucket: a miss, large enough -> the kernel
    rstd = torch.empty(8192, 1, device="meta")
    assert "picks aten" in bwd.why_not(_meta(8192, 4096), _meta(8192, 4096), [4096], rstd, w, [True, True])


def test_cond_checks_the_vendor_on_fake_cuda_tensors(impl, fake_backend, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    fwd, _ = conditions.make_conds(impl.DSL, ["cuda"], impl.LIMITS)
    amd_fwd, _ = conditions.make_conds(impl.DSL, ["rocm"], impl.LIMITS)
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # FakeTensor.data_ptr() deprecation
        x = torch.empty(*BIG, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(BIG[1], dtype=torch.bfloat16, device="cuda")
        with fake_backend("cuda", arch="sm_90"):
            conditions._arch.cache_clear()
            _table(monkeypatch, "sm_90", [])  # independent of the shipped table: a miss routes
            assert fwd(x, [BIG[1]], w, None)
            assert "not a ROCm build" in amd_fwd.why_not(x, [BIG[1]], w, None)
            _table(monkeypatch, "sm_90", [dict(op="rms_norm_fwd", dtype="bfloat16", m=4096, n=4096, impl="aten")])
            assert "sm_90 picks aten" in fwd.why_not(x, [BIG[1]], w, None)
        with fake_backend("rocm"):
            assert "ROCm build" in fwd.why_not(x, [BIG[1]], w, None)
    conditions._arch.cache_clear()
    assert conditions.device_types_for(["cuda", "rocm"]) == {"cuda": None}


# ------------------------------------------------------------ interpreter runs
SCRIPT = textwrap.dedent("""
    import json, sys, torch, torch.nn as nn
    import accel.kernels as ak
    from accel.kernels.tuning import tolerance as _tolerance
    from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
    from accel.kernels.tuning import table as tuning
    from accel.kernels.ops.rms_norm import reference, triton_impl, helion_impl
    dsl, path = sys.argv[1], sys.argv[2]
    impl = {"triton": triton_impl, "helion": helion_impl}[dsl]
    torch.manual_seed(0)                   # fixed inputs: a failure reproduces
    _launch.poison_outputs = True          # unwritten outputs stay NaN and fail the comparison
    tuning.MIN_NUMEL[dsl] = 0              # tiny interpreter shapes must route
    report = {"numerics": [], "routing": {}}
    shapes = [((1, 64), [64]), ((7, 1000), [1000]), ((5, 37), [37]), ((2, 3, 64), [64]), ((3, 4, 16), [4, 16]), ((4, 16), [4, 16])]
    if dsl == "triton":
        shapes.append(((2, 20000), [20000]))   # looped forward (N > 16384)
    aten_fwd = torch.ops.aten._fused_rms_norm.default
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape, ns in shapes:
            x = torch.randn(shape, dtype=dtype)
            w = torch.randn(ns, dtype=dtype)
            dy = torch.randn(shape, dtype=dtype)
            eps = float(torch.rand(()) * 1e-4)
            for weight in ([w] if impl.LIMITS.needs_weight else [w, None]):
                out = impl.fused_rms_norm(x, ns, weight, eps)
                ref = reference.fused_rms_norm(x, ns, weight, eps)
                err, problem = _tolerance.compare(out, ref)
                _, vs_aten = _tolerance.compare(out, aten_fwd(x, ns, weight, eps))
                entry = dict(op="fwd", dtype=str(dtype), shape=list(shape), weight=weight is not None,
                             err=err, problem=problem, vs_aten=vs_aten)
                report["numerics"].append(entry)
                rstd = ref[1]
                if ns[-1] * len(ns) > impl.LIMITS.max_n_bwd:
                    continue
                for mask in ([True, True], [True, False], [False, True]):
                    out = impl.fused_rms_norm_backward(dy, x, ns, rstd, weight, mask)
                    ref = reference.fused_rms_norm_backward(dy, x, ns, rstd, weight, mask)
                    err, problem = _tolerance.compare(out, ref)
                    report["numerics"].append(dict(op="bwd", dtype=str(dtype), shape=list(shape), mask=mask,
                                                   weight=weight is not None, err=err, problem=problem))
    # register -> call the ATen op -> routed -> unregister -> ATen again
    ak.use_registry(path)
    names = impl.register(["cpu"])
    info = {o.name: o for o in ak.overrides()}
    report["routing"]["paths"] = {n: info[n].paths for n in names}
    layer = nn.RMSNorm(64, eps=1e-6)
    x = torch.randn(4, 64, requires_grad=True)
    y = layer(x)
    y.square().sum().backward()
    info = {o.name: o for o in ak.overrides()}
    report["routing"]["routed"] = [info[n].routed for n in names]
    report["routing"]["failed"] = [info[n].failed for n in names]
    got = (y.detach(), x.grad.clone(), layer.weight.grad.clone())
    for n in names:
        ak.unregister(n)
    x.grad = None; layer.weight.grad = None
    y2 = layer(x); y2.square().sum().backward()
    report["routing"]["after_unregister"] = [o.name for o in ak.overrides()]
    report["routing"]["matches_aten"] = _tolerance.compare(got, (y2.detach(), x.grad, layer.weight.grad))[1]
    print("REPORT" + json.dumps(report))
""")


def _run_interpreted(dsl: str, path: str) -> dict:
    ok, why = IMPLS[dsl].available()
    if not ok:
        pytest.skip(f"{dsl} unavailable: {why}")
    require_dsl(dsl)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "HELION_INTERPRET")}
    env[f"{dsl.upper()}_INTERPRET"] = "1"  # Helion refuses both at once
    proc = subprocess.run([sys.executable, "-c", SCRIPT, dsl, path], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT"))
    return json.loads(line.removeprefix("REPORT"))


@pytest.fixture(scope="module")
def interpreted():
    cache: dict = {}

    def get(dsl, path):
        if (dsl, path) not in cache:
            cache[dsl, path] = _run_interpreted(dsl, path)
        return cache[dsl, path]

    return get


@pytest.mark.parametrize("dsl", sorted(IMPLS))
def test_interpreter_numerics_match_reference_and_aten(interpreted, dsl):
    report = interpreted(dsl, PATHS[-1])
    assert len(report["numerics"]) >= 20
    bad = [e for e in report["numerics"] if e["problem"] is not None or e.get("vs_aten") is not None]
    assert bad == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dsl", sorted(IMPLS))
def test_interpreter_round_trip_register_route_unregister(interpreted, dsl, path):
    routing = interpreted(dsl, path)["routing"]
    fwd, bwd = f"rms_norm_fwd.{dsl}", f"rms_norm_bwd.{dsl}"
    assert routing["paths"][fwd] == {"CPU": path}
    assert routing["paths"][bwd] == {"CPU": "accel"}  # no ATen CPU kernel for the backward
    assert routing["routed"] == [1, 1] and routing["failed"] == [0, 0]
    assert routing["after_unregister"] == []
    assert routing["matches_aten"] is None


def test_registration_imports_no_dsl_runtime():
    code = textwrap.dedent("""
        import sys, torch
        before = {m for m in sys.modules if m.split('.')[0] in ('triton', 'helion')}
        import accel, accel.kernels as ak
        from accel.kernels.ops.rms_norm import triton_impl, helion_impl
        ak.availability(); ak.install()
        triton_impl.register(['cpu'])
        after = {m for m in sys.modules if m.split('.')[0] in ('triton', 'helion')}
        print(sorted(after - before))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


RMS_CONFIG_SCRIPT = textwrap.dedent("""
    import json, torch
    from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
    from accel.kernels.tuning import tolerance as _tolerance
    from accel.kernels.ops.rms_norm import reference, triton_impl as rt, triton_kernel as tk
    _launch.poison_outputs = True
    torch.manual_seed(0)
    out = []
    for n in (1000, 4096, 20000):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(3, n, dtype=dtype) * 3
            w = torch.randn(n, dtype=dtype)
            ref_y, ref_r = reference.fused_rms_norm(x, [n], w, 1e-6)
            for cfg in tk.candidate_configs(n):
                y = _launch.empty((3, n), dtype, x.device)
                r = _launch.empty(3, torch.float32, x.device)
                rt.launch_fwd(x, w, y, r, 1e-6, cfg, 3, n)
                out.append(dict(n=n, dtype=str(dtype), cfg=cfg, y=_tolerance.compare(y, ref_y)[1],
                                r=_tolerance.compare(r, ref_r.view(-1))[1]))
    print("REPORT" + json.dumps(out))
""")


@pytest.mark.once
def test_every_rms_norm_triton_forward_candidate_config_is_correct_interpreted():
    """``accel bench --tune`` may ship any forward candidate: each gives the reference result (rows in
    registers at several rows/warps, looped above 16384), fp32 and bf16, outputs NaN-poisoned."""
    from accel.kernels.ops.rms_norm import triton_impl

    if not triton_impl.available()[0]:
        pytest.skip(triton_impl.available()[1])
    require_dsl("triton")
    env = {k: v for k, v in os.environ.items() if k != "HELION_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", RMS_CONFIG_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT")).removeprefix("REPORT"))
    assert {r["cfg"]["looped"] for r in report} == {False, True} and len({json.dumps(r["cfg"]) for r in report}) > 6
    bad = [r for r in report if r["y"] is not None or r["r"] is not None]
    assert not bad, bad[:5]


def test_triton_forward_uses_int64_offsets_only_where_int32_would_overflow():  # accel.kernels.dsl.triton_configs.wide
    """The rows kernel's ``WIDE`` constexpr: int32 offsets while every program's (masked) offsets stay
    below 2**31, int64 from there (a plan object only: nothing launches)."""
    importorskip_dsl("triton")
    rt = triton_impl
    cfg = {"looped": False, "block_n": 4096, "rows": 2, "num_warps": 8}
    assert rt.fwd_launch(cfg, 32768, 4096, 1e-6, True).constexprs["WIDE"] is False
    # rows up to m + 1 (the last program's masked row): (m + 2) * 4096 must stay below 2**31
    assert rt.fwd_launch(cfg, (1 << 31) // 4096 - 3, 4096, 1e-6, True).constexprs["WIDE"] is False
    assert rt.fwd_launch(cfg, (1 << 31) // 4096 - 2, 4096, 1e-6, True).constexprs["WIDE"] is True
    assert rt.fwd_launch({**cfg, "hints": True}, 8, 4096, 1e-6, True).constexprs["HINTS"] is True
    assert rt.fwd_launch(cfg, 8, 4096, 1e-6, True).constexprs["HINTS"] is False
