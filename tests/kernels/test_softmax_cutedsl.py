"""accel's CuTeDSL softmax (kernels/ops/softmax/cutedsl_*): configs, cond, registration, compiled code, GPU numerics.

CuTeDSL kernels do not run on a CPU, so the CPU tests check what can be checked there: the config
arithmetic, the cond with faked device facts (arch, alignment, row length, tuning table), the
register -> call -> ATen round trip on both registry paths, and - where ``nvidia-cutlass-dsl`` is
installed (tox env ``torch214``) - the kernels compiled for ``sm_90a``, reading the PTX for the vector
loads, the cluster exchange and the CTA size each config asks for. The ``cuda`` tests run every
config on the GPU against ATen with NaN-poisoned outputs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings

import pytest
import torch

import accel.kernels as ak
from accel.kernels.ops import conds as _conds
from accel.kernels.dsl import cutedsl_utils as _cutedsl
from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.tuning import table as _tuning
from accel.kernels.ops.softmax import conditions as sm_conds
from accel.kernels.ops.softmax import cutedsl_configs as cc
from accel.kernels.ops.softmax import cutedsl_impl as ci
from accel.kernels.ops.softmax import triton_impl as st

from _kernel_helpers import PATHS  # noqa: F401  (fixtures: a clean registry per test)
from _kernel_helpers import _clean_registry  # noqa: F401
from _kernel_helpers import gpu_user_table, ptxas_spills, routing_table, sm90a_ptx

HAS_CUTLASS = importlib.util.find_spec("cutlass") is not None


# ---------------------------------------------------------------------- configs
@pytest.mark.parametrize("inputs", [1, 2])
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [1024, 4096, 6144, 16384, 32768, 65536])
def test_every_candidate_covers_the_row_exactly(n, itemsize, inputs):
    cands = cc.candidate_configs(n, itemsize, inputs)
    assert cands and cands[0] == cc.default_config(n, itemsize, inputs)
    assert len({(c["cluster"], c["threads"]) for c in cands}) == len(cands)
    vec = 16 // itemsize
    for c in cands:
        per_thread = n // (c["cluster"] * c["threads"])
        assert n % (c["cluster"] * c["threads"] * vec) == 0, c
        assert per_thread * inputs <= cc.MAX_ELEMENTS_PER_THREAD and per_thread >= vec, c


def test_configs_for_the_long_row_and_rows_no_config_covers():
    # 8192x32768 bf16: the nine forward configs session 7 run A timed (H200: {4, 128} fastest)
    assert [(c["cluster"], c["threads"]) for c in cc.candidate_configs(32768, 2)] == [
        (4, 256), (1, 512), (2, 256), (2, 512), (4, 128), (4, 512), (8, 128), (8, 256), (8, 512)]
    assert cc.default_config(32768, 2, 2) == {"cluster": 8, "threads": 256}  # 2 x 16 values per thread
    assert cc.default_config(4096, 2) == {"cluster": 1, "threads": 256}
    for n in (1000, 40, 4100, 1 << 20):
        assert cc.default_config(n, 2) is None and cc.candidate_configs(n, 2) == []
    assert not cc.fits(4096, 2, 3, 256) and not cc.fits(4096, 2, 1, 96) and not cc.fits(0, 2, 1, 128)


# ------------------------------------------------------------------------- cond
def test_config_reason_checks_arch_alignment_and_row_length(cutedsl_sm90, monkeypatch):
    x = torch.empty(8, 4096, dtype=torch.bfloat16)
    assert ci.config_reason("softmax_fwd", x, 4096) is None
    assert ci.config_reason("softmax_bwd", x, 4096) is None
    shifted = torch.empty(8 * 4096 + 1, dtype=torch.bfloat16)[1:].view(8, 4096)
    assert "16-byte aligned" in ci.config_reason("softmax_fwd", shifted, 4096)
    odd = torch.empty(8, 1000, dtype=torch.bfloat16)
    assert "no CuTeDSL config covers rows of 1000 bfloat16" in ci.config_reason("softmax_fwd", odd, 1000)
    for other in ("sm_80", "gfx942", "cpu", "sm_8x"):
        monkeypatch.setattr(_cutedsl, "arch", lambda device, a=other: a)
        assert f"need an NVIDIA GPU of sm_90+ (clusters, cp.async); this device is {other}" in \
            ci.config_reason("softmax_fwd", x, 4096)
    monkeypatch.setattr(_cutedsl, "arch", lambda device: "sm_100a")
    assert ci.config_reason("softmax_fwd", x, 4096) is None


def test_a_tuned_config_is_used_and_one_that_does_not_fit_gives_way_to_the_default(cutedsl_sm90, monkeypatch):
    folded: dict = {}
    _tuning._fold(folded, [dict(op="softmax_fwd", dtype="bfloat16", m=8, n=4096, impl="cutedsl",
                                config={"cluster": 2, "threads": 128}),
                           dict(op="softmax_bwd", dtype="bfloat16", m=8, n=4096, impl="cutedsl",
                                config={"cluster": 8, "threads": 512})], "user")
    monkeypatch.setattr(_tuning, "table", lambda arch: folded)
    x = torch.empty(8, 4096, dtype=torch.bfloat16)
    assert ci._config("softmax_fwd", x, 8, 4096) == {"cluster": 2, "threads": 128}
    assert ci.config_reason("softmax_fwd", x, 4096) is None
    assert ci._config("softmax_bwd", x, 8, 4096) == cc.default_config(4096, 2, 2)  # 4096 / (8*512) < 8
    assert ci.config_reason("softmax_bwd", x, 4096) is None


def test_a_malformed_or_misfitting_tuned_config_falls_back_to_the_default(cutedsl_sm90, monkeypatch):
    x = torch.empty(8, 4096, dtype=torch.bfloat16)
    for bad in ({"cluster": 4}, {"cluster": 3, "threads": 256}, {"cluster": 2, "threads": "256"}, 7, [4, 128],
                "abc", {"cluster": 8, "threads": 512}):
        folded: dict = {}
        _tuning._fold(folded, [dict(op="softmax_fwd", dtype="bfloat16", m=8, n=4096, impl="cutedsl", config=bad)],
                      "user")
        monkeypatch.setattr(_tuning, "table", lambda arch, f=folded: f)
        assert ci._config("softmax_fwd", x, 8, 4096) == cc.default_config(4096, 2), bad
        assert ci.config_reason("softmax_fwd", x, 4096) is None, bad


def test_a_bucket_named_for_cutedsl_leaves_rows_it_cannot_take_to_the_next_dsl(monkeypatch):
    folded: dict = {}
    _tuning._fold(folded, [dict(op=f"softmax_{d}", dtype="bfloat16", m=8192, n=32768, impl="cutedsl",
                                config={"cluster": 4, "threads": 128}) for d in ("fwd", "bwd")], "user")
    monkeypatch.setattr(_tuning, "table", lambda arch: folded)
    monkeypatch.setattr(_cutedsl, "arch", lambda device: "sm_90")
    for op in ("softmax_fwd", "softmax_bwd"):  # no CuTeDSL override registered: the entry is a miss for Triton
        assert _tuning.takes(op, "triton", "sm_90", "bfloat16", 8192, 32768)
    names = ci.register(["cpu"])
    for n, cute_takes in ((32768, True), (30720, False), (20000, False), (24576, True)):
        for op in ("softmax_fwd", "softmax_bwd"):
            assert _tuning.takes(op, "triton", "sm_90", "bfloat16", 8192, n) is not cute_takes, (op, n)
            assert (_tuning.route(op, "triton", "sm_90", "bfloat16", 8192, n) is None) is not cute_takes
            if not cute_takes:  # CuTeDSL's own check declines them
                assert "no CuTeDSL config covers" in ci.config_reason(op, torch.empty(8, n, dtype=torch.bfloat16), n)
    # N=24576 backward: the tuned {4, 128} does not fit (48 values per thread over two inputs); the default does
    y = torch.empty(8192, 24576, dtype=torch.bfloat16, device="meta")
    monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: 0)
    assert ci._config("softmax_bwd", y, 8192, 24576) == cc.default_config(24576, 2, 2) is not None
    assert ci.config_reason("softmax_bwd", y, 24576) is None
    ak.unregister(names[0])  # the forward's override gone: Triton takes the forward's bucket again
    assert _tuning.takes("softmax_fwd", "triton", "sm_90", "bfloat16", 8192, 32768)
    assert not _tuning.takes("softmax_bwd", "triton", "sm_90", "bfloat16", 8192, 32768)


def test_backward_checks_the_alignment_of_grad_output_too(cutedsl_sm90):
    y = torch.empty(8, 4096, dtype=torch.bfloat16)
    dy = torch.empty(8 * 4096 + 1, dtype=torch.bfloat16)[1:].view(8, 4096)
    assert "16-byte aligned" in ci.config_reason("softmax_bwd", y, 4096, dy)

def test_backward_cond_declines_a_misaligned_grad_output(cutedsl_sm90, monkeypatch):
    monkeypatch.setattr(_tuning, "takes", lambda *a: True)
    monkeypatch.setattr(_tuning, "floor", lambda op, dsl: 0)
    y = torch.empty(8, 4096, dtype=torch.bfloat16)
    dy = torch.empty(8 * 4096 + 1, dtype=torch.bfloat16)[1:].view(8, 4096)
    _, bwd = sm_conds.make_conds("cutedsl", ["cpu"], ci.LIMITS, ci.config_reason)
    assert bwd(y, y, -1, torch.bfloat16)
    assert not bwd(dy, y, -1, torch.bfloat16)
    assert "16-byte aligned" in bwd.why_not(dy, y, -1, torch.bfloat16)


def test_more_elements_than_32_bit_offsets_reach_go_elsewhere(fake_backend, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(_tuning, "floor", lambda op, dsl: 0)
    fwd, _ = sm_conds.make_conds("cutedsl", ["cuda"], ci.LIMITS, ci.config_reason)
    with FakeTensorMode(), warnings.catch_warnings(), fake_backend("cuda", arch="sm_90"):
        warnings.simplefilter("ignore", UserWarning)
        _conds.arch.cache_clear()
        huge = torch.empty(131073, 32768, dtype=torch.bfloat16, device="cuda")
        assert "too many elements for the cutedsl kernel" in fwd.why_not(huge, -1, False)
    _conds.arch.cache_clear()


def test_cond_routes_only_where_the_table_names_cutedsl(fake_backend, monkeypatch):
    fwd, _ = sm_conds.make_conds("cutedsl", ["cuda"], ci.LIMITS, ci.config_reason)
    tfwd, _ = sm_conds.make_conds("triton", ["cuda"], st.LIMITS)
    entry = dict(op="softmax_fwd", dtype="bfloat16", m=8192, n=32768, impl="cutedsl",
                 config={"cluster": 4, "threads": 128})
    ci.register(["cpu"])  # an override of the DSL the table names must exist for Triton to step aside
    with routing_table(monkeypatch, [entry], archs=("sm_90", "sm_80")):
        big = torch.empty(8192, 32768, dtype=torch.bfloat16, device="cuda")
        miss = torch.empty(8192, 16384, dtype=torch.bfloat16, device="cuda")
        with fake_backend("cuda", arch="sm_90"):
            _conds.arch.cache_clear()
            assert fwd(big, -1, False) and fwd.why_not(big, -1, False) is None
            assert "picks cutedsl" in tfwd.why_not(big, -1, False)  # Triton steps aside
            assert "cutedsl kernels run only where a table routes them (tuning.MIN_NUMEL['cutedsl'] is 2**62" \
                in fwd.why_not(miss, -1, False)  # a miss is never CuTeDSL's
            assert tfwd(miss, -1, False)
        with fake_backend("cuda", arch="sm_80"):
            _conds.arch.cache_clear()
            assert "sm_90+" in fwd.why_not(big, -1, False)


# --------------------------------------------------------------- registration
@pytest.mark.parametrize("path", PATHS)
def test_register_call_unregister_on_cpu_gives_aten(path):
    ak.use_registry(path)
    names = ci.register(["cpu"])
    assert names == ["softmax_fwd.cutedsl", "softmax_bwd.cutedsl"]
    info = {o.name: o for o in ak.overrides()}
    assert {info[n].dsl for n in names} == {"cutedsl"}
    x = torch.randn(4, 64, requires_grad=True)
    y = torch.softmax(x, -1)
    y.backward(torch.ones_like(y))
    assert [o.routed for o in ak.overrides()] == [0, 0]  # never on a CPU tensor
    with ak.disabled():
        ref = torch.softmax(x.detach(), -1)
    assert torch.equal(y.detach(), ref)
    for n in names:
        ak.unregister(n)
    assert ak.overrides() == []


def test_available_reads_metadata_only(monkeypatch):
    monkeypatch.setattr(_cutedsl.importlib.util, "find_spec", lambda name: None)
    assert ci.available() == (False, "nvidia-cutlass-dsl is not installed (pip install nvidia-cutlass-dsl, or in "
                                     "your accel clone: pip install '.[cutedsl]')")
    monkeypatch.setattr(_cutedsl.importlib.util, "find_spec", lambda name: None if name == "cuda" else object())
    assert "cuda-python" in ci.available()[1]
    monkeypatch.setattr(_cutedsl.importlib.util, "find_spec", lambda name: object())
    for version, ok, says in (("4.7.0", False, "nvidia-cutlass-dsl 4.7.0 < 4.8.1 (oldest version the kernels are "
                                                "checked with; pip install -U 'nvidia-cutlass-dsl>=4.8.1')"),
                              ("bogus", False, "nvidia-cutlass-dsl version 'bogus' is not a version number"),
                              ("4.8.1", True, "nvidia-cutlass-dsl 4.8.1 installed")):
        monkeypatch.setattr(_cutedsl, "module_version", lambda dist, v=version: v)
        assert ci.available() == (ok, says)
    assert "cutlass" not in sys.modules or HAS_CUTLASS  # importing the impl imported no CuTeDSL


def test_launch_of_zero_rows_returns_before_the_dsl(monkeypatch):
    def no_dsl():
        raise AssertionError("the kernel module was asked for")

    monkeypatch.setattr(ci, "_kernels", no_dsl)
    x = torch.empty(0, 1024)
    ci.launch_fwd(x, torch.empty_like(x), {"cluster": 1, "threads": 128})
    ci.launch_bwd(x, x, torch.empty_like(x), {"cluster": 1, "threads": 128})
    with pytest.raises(AssertionError, match="asked for"):
        ci.launch_fwd(torch.empty(2, 1024), torch.empty(2, 1024), {"cluster": 1, "threads": 128})


# ---------------------------------------------------------- compiled for sm_90a
@pytest.mark.skipif(not HAS_CUTLASS, reason="nvidia-cutlass-dsl not installed here (tox env torch214 installs it)")
@pytest.mark.parametrize("kind,dtype,n,cluster,threads", [
    ("fwd", "bfloat16", 32768, 4, 128), ("fwd", "float32", 4096, 1, 256), ("bwd", "float16", 32768, 8, 256)])
def test_kernels_compile_for_sm_90a_with_vector_loads_and_the_cluster_exchange(tmp_path, kind, dtype, n, cluster,
                                                                                threads):
    ptx, out = sm90a_ptx(tmp_path, "accel.kernels.ops.softmax.cutedsl_kernel", [kind, dtype, n, cluster, threads],
                         [kind, dtype, n + 8, cluster, threads])
    assert "REFUSED" in out and f"does not fit rows of {n + 8}" in out
    vectors = n // cluster // threads // (16 // (4 if dtype == "float32" else 2))  # per thread and tensor
    loads = 1 if kind == "fwd" else 2
    assert len(re.findall(r"ld\.global\.v4\.b32", ptx)) == loads * vectors
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == vectors
    assert f".reqntid {threads}, 1, 1" in ptx
    clustered = ["st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32", "barrier.cluster.wait",
                 "mbarrier.try_wait"]
    for op in clustered:
        assert (op in ptx) is (cluster > 1), op
    assert ("bar.sync" in ptx or "barrier.sync" in ptx) is (cluster == 1)
    assert ptxas_spills(tmp_path, ptx) == (0, 0)


@pytest.mark.skipif(not HAS_CUTLASS, reason="nvidia-cutlass-dsl not installed here (tox env torch214 installs it)")
def test_build_refuses_unknown_kinds_dtypes_and_configs_with_value_errors():
    from accel.kernels.ops.softmax import cutedsl_kernel as k

    for args, words in ((("forward", "bfloat16", 4096, 1, 256), "kind 'forward'"),
                        (("fwd", "bf16", 4096, 1, 256), "dtype 'bf16'"),
                        (("fwd", "bfloat16", 65536, 1, 128), "at most 64 values per thread")):
        with pytest.raises(ValueError, match=words):
            k.build(*args)


# ----------------------------------------------------------------------- GPU
def _gpu_ok() -> bool:
    return torch.cuda.is_available() and HAS_CUTLASS and torch.cuda.get_device_capability()[0] >= 9


gpu = pytest.mark.skipif(not _gpu_ok(), reason="needs an SM 9.0+ NVIDIA GPU and nvidia-cutlass-dsl")


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,n", [(3, 1024), (37, 4096), (5, 32768), (2, 65536)])
def test_every_config_matches_aten_on_the_gpu(m, n, dtype):
    torch.manual_seed(m * n)
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 4
    x[0, : n // 3] = -float("inf")  # a third of one row masked: whole warps see only -inf
    if m > 2:
        x[1] = -float("inf")  # a fully masked row: NaN, as ATen
        x[2] = -100.0
        x[2, : n // 2] = -float("inf")  # whole CTAs of -inf beside logits whose exp underflows: 0, not NaN
    if m > 4:
        x[3, n // 2:] = -float("inf")
        x[3, 0] = float("nan")  # a NaN beside whole warps of -inf: NaN everywhere, as ATen
        x[4, n // 2:] = -float("inf")
        x[4, 1] = float("inf")  # +inf: NaN everywhere, as ATen
    dy = torch.randn_like(x)
    with ak.disabled():
        y_ref = torch.softmax(x, -1)
        dx_ref = torch.ops.aten._softmax_backward_data(dy, y_ref, -1, dtype)
    for kind, inputs in (("fwd", 1), ("bwd", 2)):
        for cfg in cc.candidate_configs(n, x.element_size(), inputs):
            got = torch.full_like(x, 7.0)
            if kind == "fwd":
                ci.launch_fwd(x, got, cfg)
                ref = y_ref
            else:
                ci.launch_bwd(dy, y_ref, got, cfg)
                ref = dx_ref
            torch.cuda.synchronize()
            assert torch.equal(torch.isnan(got), torch.isnan(ref)), (kind, cfg)
            ok = ~torch.isnan(ref)
            problem = _tolerance.compare(got[ok], ref[ok])[1]
            assert problem is None, (kind, cfg, problem)


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("scale", [2e3, 1e5])
def test_large_fp32_logits_keep_fp32_precision_on_the_gpu(scale):
    torch.manual_seed(1)
    x = torch.randn(4, 32768, device="cuda") * 3 + scale
    with ak.disabled():
        ref = torch.softmax(x, -1)
    for cfg in cc.candidate_configs(32768, 4):
        got = torch.empty_like(x)
        ci.launch_fwd(x, got, cfg)
        torch.cuda.synchronize()
        rel = ((got - ref).abs() / ref.clamp_min(1e-30)).max().item()
        assert rel < 2e-5, (cfg, rel)  # ATen and Triton: 2e-7 - 5e-7; x*log2e - max*log2e gave 4e-4 - 7e-3


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("path", PATHS)
def test_routed_where_the_table_names_cutedsl_on_the_gpu(path, monkeypatch, tmp_path):
    with gpu_user_table(monkeypatch, tmp_path, [dict(op=f"softmax_{d}", dtype="bfloat16", m=64, n=4096,
                                                     impl="cutedsl", config={"cluster": 2, "threads": 128})
                                                for d in ("fwd", "bwd")]):
        ak.use_registry(path)
        names = ci.register(["cuda"])
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = torch.softmax(x, -1)
        y.backward(torch.ones_like(y) + x.detach())
        got = (y.detach().clone(), x.grad.clone())
        counts = {o.name: (o.routed, o.failed) for o in ak.overrides()}
        assert counts == {n: (1, 0) for n in names}, counts
        for n in names:
            ak.unregister(n)
        x.grad = None
        y2 = torch.softmax(x, -1)
        y2.backward(torch.ones_like(y2) + x.detach())
        assert _tolerance.compare(got, (y2.detach(), x.grad))[1] is None
