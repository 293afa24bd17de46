"""Built-in kernel availability (reasons shown by ``accel info``), install(), ``accel kernels`` and ``accel bench``."""

from __future__ import annotations

import json

import pytest
import torch

import accel.kernels as ak
from accel.cli import main
from accel.errors import KernelRegistrationError, KernelUnavailableError
from accel.kernels.ops.rms_norm import helion_impl, reference, triton_impl

from _kernel_helpers import register_forward_only


@pytest.fixture(autouse=True)
def _clean():
    yield
    for o in ak.overrides():
        ak.unregister(o.name)


def test_availability_without_gpu_names_the_probe():
    found = {(a.kernel, a.dsl): a for a in ak.availability()}
    assert set(found) == ({(k, d) for k in ("rms_norm", "softmax", "layer_norm") for d in ("triton", "helion")}
                          | {("softmax", "cutedsl"), ("layer_norm", "cutedsl")}
                          | {(k, "triton") for k in ("add_rms_norm_hf", "geglu", "linear_cross_entropy", "rms_norm_hf",
                                                   "rope", "swiglu")})
    for a in found.values():
        # Triton kernels are offered on every GPU vendor (issue 23); Helion and CuTeDSL on NVIDIA only
        vendors = ("cuda", "rocm", "xpu") if a.dsl == "triton" else ("cuda",)
        assert a.backends == vendors and not a.available and not a.installed
        if "not installed" not in a.reason:
            assert a.reason.startswith("no usable backend among ")
            assert all(f"{v} (" in a.reason for v in vendors), a.reason
    assert ak.install() == []


def test_install_refuses_unknown_dsl_or_kernel_names():
    from accel.errors import UnknownKernelError

    cases = (({"dsl": "cute"}, "unknown DSL 'cute'; the built-in kernels have cutedsl, helion, triton"),
             ({"dsl": ["triton", "CuTeDSL"]}, "unknown DSL 'CuTeDSL'; the built-in kernels have cutedsl, helion, triton"),
             ({"kernels": "softmx"}, "unknown kernel family 'softmx'; the built-in kernels have add_rms_norm_hf, "
                                     "geglu, layer_norm, linear_cross_entropy, rms_norm, rms_norm_hf, rope, softmax, swiglu"))
    for kwargs, message in cases:
        with pytest.raises(UnknownKernelError, match=message):
            ak.install(**kwargs)
    assert ak.overrides() == []


def test_install_refuses_non_names_and_is_all_or_nothing(monkeypatch):
    from accel.errors import KernelRegistrationError
    from accel.kernels import catalog as _catalog

    with pytest.raises(TypeError, match="dsl must be a name or a sequence of names"):
        ak.install(dsl=3)
    with pytest.raises(TypeError, match="kernels must be"):
        ak.install(kernels=[None])

    class P:
        available, reason = True, "1 device(s) visible"

    monkeypatch.setattr(_catalog, "probes", lambda: {"cuda": P(), "cpu": P()})
    rows = [_catalog.Availability(k, d, ("cuda",), True, "ok", False) for k, d in (("rms_norm", "triton"),
                                                                                  ("softmax", "triton"))]
    monkeypatch.setattr(_catalog, "availability", lambda: rows)

    def fails(backends):
        raise KernelRegistrationError("no")

    monkeypatch.setattr(triton_impl, "register", lambda backends: [ak.register(
        "aten::sin", impl=torch.sin, backends=["cpu"], dsl="triton", name="probe.sin")])
    from accel.kernels.ops.softmax import triton_impl as sm_t

    monkeypatch.setattr(sm_t, "register", fails)
    with pytest.raises(KernelRegistrationError):
        ak.install()
    assert ak.overrides() == []  # the first family's registration was taken back


def test_cutedsl_rows_say_where_the_kernels_run_and_how_they_are_called(monkeypatch):
    from accel.kernels.dsl import cutedsl_utils as _cutedsl

    monkeypatch.setattr(_cutedsl, "_ffi_installed", lambda: True)
    rows = {a.kernel: a.reason for a in ak.availability() if a.dsl == "cutedsl"}
    assert rows["softmax"].endswith("(CuTeDSL kernels run on sm_90+ GPUs, only for the shapes a tuning table "
                                    "routes to them; launched through TVM-FFI)")
    assert rows["layer_norm"].endswith("routes to them; the backward only; launched through TVM-FFI)")
    monkeypatch.setattr(_cutedsl, "_ffi_installed", lambda: False)
    rows = {a.kernel: a.reason for a in ak.availability() if a.dsl == "cutedsl"}
    assert rows["softmax"].endswith("launched through CuTeDSL's executor, ~15 µs more host time per call: "
                                    "apache-tvm-ffi is not installed (pip install apache-tvm-ffi, or '.[cutedsl]'))")


def test_helion_absent_or_too_old_is_reported(monkeypatch):
    from accel.kernels.dsl import helion_utils, triton_utils

    monkeypatch.setattr(helion_utils.importlib.util, "find_spec", lambda name: None)
    assert helion_utils.available() == (False, "helion is not installed (pip install helion, or in your accel clone: pip install '.[helion]')")
    monkeypatch.undo()
    monkeypatch.setattr(helion_utils.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(helion_utils, "module_version", lambda name: "1.3.9")
    assert helion_utils.available() == (False, "helion 1.3.9 < 1.4.0 (oldest version the kernels are checked with)")
    monkeypatch.setattr(helion_utils, "module_version", lambda name: "banana")
    assert "is not a version number" in helion_utils.available()[1]
    monkeypatch.setattr(helion_utils, "module_version", lambda name: "1.4.0")
    assert helion_utils.available() == (True, "helion 1.4.0 installed")
    monkeypatch.setattr(helion_utils.importlib.util, "find_spec", lambda name: None if name == "triton" else object())
    assert "triton (its code generator) is not" in helion_utils.available()[1]
    monkeypatch.setattr(triton_utils.importlib.util, "find_spec", lambda name: None)
    assert "triton is not installed" in triton_utils.available()[1]


def test_availability_with_a_gpu_and_install_filters(monkeypatch):
    from accel.kernels import catalog as _catalog

    from accel.kernels.ops.layer_norm import helion_impl as ln_h, triton_impl as ln_t
    from accel.kernels.ops.softmax import helion_impl as sm_h, triton_impl as sm_t

    for t in (triton_impl, sm_t, ln_t):
        monkeypatch.setattr(t, "available", lambda: (True, "triton 9.9 installed"))
    for h in (helion_impl, sm_h, ln_h):
        monkeypatch.setattr(h, "available", lambda: (False, "helion is not installed"))
    from accel.kernels.ops.layer_norm import cutedsl_impl as ln_c
    from accel.kernels.ops.softmax import cutedsl_impl as sm_c

    for c in (sm_c, ln_c):
        monkeypatch.setattr(c, "available", lambda: (False, "nvidia-cutlass-dsl is not installed"))
    registered = []
    monkeypatch.setattr(triton_impl, "register", lambda backends: registered.append(backends) or ["t1", "t2"])
    monkeypatch.setattr(sm_t, "register", lambda backends: registered.append(backends) or ["s1", "s2"])

    class P:
        available, reason = True, "1 device(s) visible"

    monkeypatch.setattr(_catalog, "probes", lambda: {"cuda": P(), "cpu": P()})
    found = {a.dsl: a for a in _catalog.availability() if a.kernel == "rms_norm"}
    assert found["triton"].available and found["triton"].reason == "triton 9.9 installed"
    assert not found["helion"].available
    assert ak.install(dsl="helion") == []
    assert ak.install(kernels="softmax") == ["s1", "s2"]
    assert ak.install(dsl=["triton"], kernels="rms_norm") == ["t1", "t2"]
    assert registered == [["cuda"], ["cuda"]]


def test_accel_kernels_json_shows_counts(capsys):
    register_forward_only("aten::_fused_rms_norm", impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager",
                          name="cli")
    import torch

    torch.ops.aten._fused_rms_norm(torch.randn(2, 8), [8], None, 1e-6)
    assert main(["kernels", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = next(o for o in data["overrides"] if o["name"] == "cli")
    assert (row["op"], row["dsl"], row["backends"], row["active"], row["routed"], row["fallbacks"]) == \
        ("aten::_fused_rms_norm", "eager", ["cpu"], True, 1, 0)
    assert {b["dsl"] for b in data["builtin"]} == {"triton", "helion", "cutedsl"}
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    assert "cli" in out and "built-in kernels" in out and "native DSL registry" in out


def test_accel_kernels_install_flag_and_empty_table(capsys):
    assert main(["kernels"]) == 0
    assert "none registered in this process" in capsys.readouterr().out
    assert main(["kernels", "--install"]) == 1  # CPU only: nothing installable: exit 1, and the table says why
    captured = capsys.readouterr()
    assert "no built-in kernel can be installed here" in captured.out
    assert "no usable backend among cuda" in captured.out  # the hardware reason comes first, not "install triton"
    assert captured.err.startswith("accel kernels: error: --install registered no built-in kernel: none can be "
                                   "installed here")  # the error format of every command
    assert main(["kernels", "--install", "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["installed"] == [] and "accel kernels: error: --install" in captured.err
    assert report["error"]["type"] == "KernelUnavailableError" and report["error"]["command"] == "kernels"
    assert "none can be installed here" in report["error"]["message"]


def test_accel_bench_errors_without_gpu(capsys):
    assert main(["bench"]) == 1, "no GPU is this machine's limit, not bad input: exit 1"
    assert "no GPU device" in capsys.readouterr().err
    assert main(["bench", "--shapes", "4096"]) == 2
    assert "--shapes '4096': '4096' is not MxN" in capsys.readouterr().err
    assert main(["bench", "--shapes", "64x64,4096x"]) == 2
    assert "'4096x' is not MxN" in capsys.readouterr().err
    assert main(["bench", "--dtypes", "fp8"]) == 2
    assert "--dtypes 'fp8': ['fp8'] not among" in capsys.readouterr().err
    assert main(["bench", "--shapes", "99999999999999999999x64"]) == 2  # refused, not a crash inside torch
    assert "more than 17179869184 (2**34) elements" in capsys.readouterr().err
    # empty lists are refused, not run as "nothing" (or as the defaults)
    for argv, message in ((["--ops="], "--ops '': none given"), (["--shapes="], "--shapes '': '' is not MxN"),
                          (["--dtypes="], "--dtypes '': none given")):
        assert main(["bench", *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv
    # out-of-range options are refused before the device check, as BenchArgumentError
    for argv, message in ((["--reps", "0"], "reps=0"), (["--reps", "-3"], "reps=-3"),
                          (["--budget", "-1"], "budget=-1.0"), (["--budget", "nan"], "budget=nan"),
                          (["--shapes", "0x5"], "shapes [(0, 5)]"), (["--tune", "--shapes", "4x0"], "shapes [(4, 0)]")):
        assert main(["bench", *argv, "--json"]) == 2, argv
        captured = capsys.readouterr()
        assert message in captured.err and "no GPU device" not in captured.err, argv
        assert json.loads(captured.out)["error"]["type"] == "BenchArgumentError"


def test_benchmark_script_entry_point_is_accel_bench(capsys):
    """python benchmarks/kernel_bench.py and python -m accel.kernels.bench (accel.cli.bench.main) report bad input as
    accel bench does: one line, exit 2."""
    from accel.cli import bench

    assert bench.main(["--shapes", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accel bench: error: --shapes 'abc': 'abc' is not MxN") and "Traceback" not in err
    assert bench.main(["--ops", "softmax,softmax", "--dtypes", "fp32,fp32"]) == 1  # valid: no GPU here
    assert "no GPU device" in capsys.readouterr().err


def test_python_m_accel_kernels_bench_is_accel_bench():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "accel.kernels.bench", "--shapes", "abc", "--json"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("accel bench: error: --shapes 'abc': 'abc' is not MxN") and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["error"]["type"] == "BenchArgumentError"


def test_benchmark_measures_a_repeated_op_dtype_or_shape_once(monkeypatch):
    from accel.kernels import bench
    from accel.kernels.bench import runner, timing

    seen = []
    monkeypatch.setattr(runner, "run_family", lambda family, report, timer, device, dtypes, started, budget,
                        ceiling, shapes, rounds, directions: seen.append((family.name, dtypes, shapes)))
    monkeypatch.setattr(timing, "router_overhead", lambda device: {})
    bench.run(shapes=((8, 64), (8, 64)), dtypes=("fp32", "fp32"), ops=("softmax", "softmax"), reps=1,
              device=torch.device("cpu"))
    assert seen == [("softmax", ("fp32",), ((8, 64),))]


def test_benchmark_run_checks_its_arguments_before_anything():
    from accel.errors import BenchArgumentError
    from accel.kernels import bench

    for kwargs in (dict(reps=0), dict(reps=2.5), dict(reps=True), dict(budget_s=0), dict(shapes=((0, 64),)),
                   dict(shapes=((64,),)), dict(rounds=0), dict(rounds=1.5), dict(rounds=True)):
        with pytest.raises(BenchArgumentError):
            bench.run(device=torch.device("cpu"), **kwargs)
    assert issubclass(BenchArgumentError, ValueError)


def test_benchmark_and_tuner_refuse_unknown_or_no_op_families():
    from accel.errors import BenchArgumentError
    from accel.kernels import bench

    with pytest.raises(BenchArgumentError, match=r"ops \('nope',\): unknown \['nope'\]\. Valid: .*rms_norm"):
        bench.run(device=torch.device("cpu"), ops=("nope",))
    with pytest.raises(BenchArgumentError, match=r"ops \(\): none given"):
        bench.tune.tune(device=torch.device("cpu"), ops=())


def test_interleaved_rounds_time_every_candidate_once_per_round_and_report_medians(monkeypatch):
    """``Timer.interleaved``: round by round in the given order, ATen (only) with every override disabled, the
    median per name; a candidate that raises is dropped from later rounds with its error."""
    from accel.kernels import core as kcore, bench

    order, clock = [], iter([5.0, 1.0, 9.0, 7.0, 3.0, 2.0, 8.0])
    monkeypatch.setattr(bench.Timer, "__call__", lambda self, fn: fn() or next(clock))

    def make(name):
        return lambda: order.append((name, kcore.state.filters_in_force()[0]))

    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")

    errors: dict = {}
    got = bench.Timer(torch.device("cpu"), 1).interleaved(
        {"aten": make("aten"), "triton": make("triton"), "flaky": flaky}, 3, errors)
    assert order == [("aten", True), ("triton", False)] * 3
    # round 1: aten 5, triton 1, flaky 9; round 2: aten 7, triton 3, flaky raises; round 3: aten 2, triton 8
    assert got == {"aten": 5.0, "triton": 3.0} and errors == {"flaky": "RuntimeError: boom"}
    assert not kcore.state.filters_in_force()[0]


def test_typed_errors_subclass_builtins():
    assert issubclass(KernelRegistrationError, ValueError)
    assert issubclass(KernelUnavailableError, RuntimeError)


def test_benchmark_markdown_renders_a_report():
    from accel.kernels import bench

    report = {"device": "NVIDIA H200", "arch": "sm_90", "torch": "2.11.0", "versions": {}, "peers": {},
              "copy_ceiling_gbs": 4000.0, "skipped": [], "elapsed_s": 1.0,
              "aten_faster": [{"key": ["sm_90", "triton", "fwd", "bfloat16"], "entry": [1024, 65536, 65536],
                               "routed_us": 70.0, "aten_us": 60.0}],
              "router_overhead": {"aten_us": 9.0, "with_router_us": 13.0, "router_cost_us": 4.0},
              "rows": [{"dtype": "bf16", "shape": [4096, 4096], "direction": "fwd", "routed_to": "rms_norm_fwd.triton",
                        "errors": {"helion": "ImportError: x"},
                        "impls": {"aten": {"us": 30.0, "gbs": 2000.0, "pct_ceiling": 50.0, "vs_aten": 1.0,
                                           "vs_best_peer": None}}}]}
    md = bench.to_markdown(report)
    assert "2000 (50%) 1.00x" in md and "ImportError: x" in md and "+4.00 µs" in md and "bare" not in md
    report["router_overhead"]["bare_router_cost_us"] = 3.5
    assert "a bare torch.library router that only calls ATen's kernel: +3.50 µs, so accel's own part is +0.50 µs" \
        in bench.to_markdown(report)
    assert "('sm_90', 'triton', 'fwd', 'bfloat16'): ((1024, 65536, 65536),)" in md


def test_router_overhead_needs_a_live_override_and_survives_a_failing_bare_router(monkeypatch):
    """No accel override of aten::_fused_rms_norm: nothing to time (no negative "own part" from timing ATen
    against ATen). A bare router whose timing raises gives no floor, accel's cost is still measured, and the
    dispatcher is as before."""
    import accel.kernels as ak
    from accel.kernels import bench
    from accel.kernels.bench import timing
    from accel.kernels.ops.rms_norm import reference

    ak.use_registry("accel")
    cpu = torch.device("cpu")
    ro = timing.router_overhead(cpu, calls=10, rounds=1)
    assert "no accel override of aten::_fused_rms_norm is active on cpu" in ro["skipped"]
    assert "Router cost not measured: no accel override" in bench.to_markdown(
        {"device": "cpu", "arch": "cpu", "torch": "x", "versions": {}, "peers": {}, "copy_ceiling_gbs": 1.0,
         "skipped": [], "elapsed_s": 1.0, "aten_faster": [], "rows": [], "router_overhead": ro})
    # the backward first, as a user registers a pair: the timing's disabled() blocks then warn of nothing
    ak.register("aten::_fused_rms_norm_backward", impl=reference.fused_rms_norm_backward, backends=["cpu"],
                dsl="eager", fallback=reference.fused_rms_norm_backward, name="ro_b")
    ak.register("aten::_fused_rms_norm", impl=reference.fused_rms_norm, backends=["cpu"], dsl="eager",
                cond=lambda *a, **k: False, name="ro")
    try:
        class Raising:  # the kernel the bare router captures: every call raises
            def call_boxed(self, *args, **kwargs):
                raise RuntimeError("boom")
        real = timing.bare_router

        def failing(op_name, key):  # the real bare router around a raising kernel
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(torch.library, "get_kernel", lambda op, k: Raising())
                return real(op_name, key)
        monkeypatch.setattr(timing, "bare_router", failing)
        before = torch._C._dispatch_dump("aten::_fused_rms_norm")
        with ak.disabled():
            plain_dump = torch._C._dispatch_dump("aten::_fused_rms_norm")
        ro = timing.router_overhead(cpu, calls=10, rounds=2)
        assert ro["bare_router_cost_us"] is None and ro["with_router_us"] > 0
        assert torch._C._dispatch_dump("aten::_fused_rms_norm") == before != plain_dump
    finally:
        ak.unregister("ro")
        ak.unregister("ro_b")


@pytest.mark.once
def test_benchmark_script_runs_end_to_end_on_cpu_in_the_interpreter():
    """Smoke test of the benchmark's own code (numbers meaningless here): CPU device, Triton interpreter."""
    import os
    import subprocess
    import sys
    import textwrap

    from accel.kernels.ops.rms_norm import triton_impl as ti

    if not ti.available()[0]:
        pytest.skip(ti.available()[1])
    code = textwrap.dedent("""
        import json, torch
        import accel.kernels as ak
        from accel.kernels import bench
        from accel.kernels.tuning import table as tuning
        from accel.kernels.ops.rms_norm import triton_impl
        tuning.MIN_NUMEL["triton"] = 16384
        ak.install = lambda **k: triton_impl.register(["cpu"])
        r = bench.run(shapes=((64, 256),), dtypes=("bf16", "fp32"), reps=2, device=torch.device("cpu"), ops=("rms_norm",))
        print("REPORT" + json.dumps(r))
    """)
    env = {k: v for k, v in os.environ.items() if k != "HELION_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT"))[6:])
    assert [(row["dtype"], row["direction"], row["routed_to"]) for row in r["rows"]] == \
        [("bf16", "fwd", "rms_norm_fwd.triton"), ("fp32", "fwd", "rms_norm_fwd.triton")]
    for row in r["rows"]:
        assert {"aten", "triton", "routed"} <= set(row["impls"]), row["errors"]
        assert row["impls"]["aten"]["vs_aten"] == 1.0 and row["bytes"] == 2 * 64 * 256 * (2 if row["dtype"] == "bf16" else 4)
    assert r["routed_counts"]["rms_norm_fwd.triton"]["routed"] > 0
    assert r["router_overhead"]["with_router_us"] > 0 and r["installed"] == ["rms_norm_fwd.triton", "rms_norm_bwd.triton"]
    assert r["router_overhead"]["bare_router_cost_us"] is not None  # the floor, measured at the CPU key
    assert r["skipped"] == ["bwd: ATen has no aten::_fused_rms_norm_backward kernel on cpu"]


def test_bench_skips_a_family_without_a_bench_module_in_a_fresh_process():
    # accel's own ops (linear cross-entropy) are defined only once an impl module is imported; the runner asked
    # ATen about them before that and raised "operator accel::linear_cross_entropy does not exist" on the H200
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import json, torch
        import accel.kernels as ak
        from accel.kernels import bench
        ak.install = lambda **k: []
        r = bench.run(shapes=((8, 64),), dtypes=("fp32",), reps=1, device=torch.device("cpu"),
                      ops=("linear_cross_entropy", "softmax"))
        print("REPORT" + json.dumps(r))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT"))[6:])
    assert "linear_cross_entropy: its OpFamily declares no bench module (nothing to time here)" in r["skipped"]
    assert {row["op"] for row in r["rows"]} == {"softmax"}
