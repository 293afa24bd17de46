"""accel's CuTeDSL LayerNorm backward (kernels/ops/layer_norm/cutedsl_*): configs, cond, registration,
compiled code, GPU numerics.

As for the CuTeDSL softmax (tests/kernels/test_softmax_cutedsl.py): on the CPU the config arithmetic, the
cond with faked device facts, the register -> call -> ATen round trip on both registry paths and, where
``nvidia-cutlass-dsl`` is installed, the kernel compiled for ``sm_90a`` (its PTX read for the ``cp.async``
staging, the vector loads and stores, and no local-memory spills); the ``cuda`` tests run every config
against ATen with NaN-poisoned outputs.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch

import accel.kernels as ak
from accel.kernels.ops import conds as _conds
from accel.kernels.dsl import cutedsl_utils as _cutedsl
from accel.kernels.tuning import tolerance as _tolerance
from accel.kernels.tuning import table as _tuning
from accel.kernels.ops.layer_norm import cutedsl_configs as lcc
from accel.kernels.ops.layer_norm import cutedsl_impl as lc

from _kernel_helpers import PATHS  # noqa: F401
from _kernel_helpers import _clean_registry  # noqa: F401
from _kernel_helpers import gpu_user_table, ptxas_spills, routing_table, sm90a_ptx

HAS_CUTLASS = importlib.util.find_spec("cutlass") is not None


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("n", [1024, 2048, 4096, 8192])
def test_every_candidate_covers_the_row_exactly(n, itemsize):
    cands = lcc.candidate_configs(n, itemsize)
    assert cands[0] == lcc.default_config(n, itemsize)
    for c in cands:
        assert n % (c["threads"] * 16 // itemsize) == 0
        assert n // c["threads"] <= (lcc.MAX_VALUES_PER_THREAD if c["threads"] <= 256 else 16)
        assert 4 * n * itemsize <= lcc.MAX_SHARED_BYTES
        assert c["ctas_per_sm"] in lcc.CTAS_PER_SM
    assert len({tuple(sorted(c.items())) for c in cands}) == len(cands)


def test_configs_refuse_rows_no_cta_covers():
    assert lcc.candidate_configs(1000, 2) == [] and lcc.default_config(1000, 2) is None
    assert lcc.candidate_configs(32768, 2) == []  # 64 values per thread even at 512 threads
    assert lcc.default_config(4096, 2) == {"threads": 128, "ctas_per_sm": 2}
    # 16384 bf16: 32 values per thread at 512 threads, whose 128 registers spill them (ptxas -v: 348 bytes)
    assert lcc.candidate_configs(16384, 2) == [] and not lcc.fits(16384, 2, 512)
    # fp32 16384 would stage 256 KiB of shared memory (sm_90 allows 227 KiB per CTA)
    assert not lcc.fits(16384, 4, 512) and lcc.fits(8192, 4, 256)
    assert [c["threads"] for c in lcc.candidate_configs(8192, 2)] == [256] * 4 + [512] * 4


def test_config_reason_checks_arch_statistics_alignment_and_rows(cutedsl_sm90, monkeypatch):
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    stat = torch.empty(64)
    assert lc.config_reason(x, 4096, stat, stat) is None
    assert "fp32 mean/rstd" in lc.config_reason(x, 4096, stat.bfloat16(), stat)
    shifted = torch.empty(64 * 4096 + 1, dtype=torch.bfloat16)[1:].view(64, 4096)
    assert "16-byte aligned" in lc.config_reason(shifted, 4096, stat, stat)
    assert "no CuTeDSL config covers rows of 1000" in lc.config_reason(torch.empty(64, 1000), 1000, stat, stat)
    monkeypatch.setattr(_cutedsl, "arch", lambda device: "sm_80")
    assert "sm_90+" in lc.config_reason(x, 4096, stat, stat)


def test_a_misaligned_weight_is_declined(cutedsl_sm90):
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    stat = torch.empty(64)
    flat = torch.empty(2 * 4096 + 1, dtype=torch.bfloat16)
    w = flat[1:4097]  # a contiguous view at an odd offset (parameters packed in one buffer)
    assert lc.config_reason(x, 4096, stat, stat, flat[:4096]) is None
    assert "the weight is not 16-byte aligned" in lc.config_reason(x, 4096, stat, stat, w)


def test_the_table_names_cutedsl_only_while_its_override_is_registered(monkeypatch):
    folded: dict = {}
    _tuning._fold(folded, [dict(op="layer_norm_bwd", dtype="bfloat16", m=16384, n=8192, impl="cutedsl",
                                config={"threads": 256, "ctas_per_sm": 1})], "user")
    monkeypatch.setattr(_tuning, "table", lambda arch: folded)
    assert _tuning.takes("layer_norm_bwd", "triton", "sm_90", "bfloat16", 16384, 8192)  # none registered
    (name,) = lc.register(["cpu"])
    assert not _tuning.takes("layer_norm_bwd", "triton", "sm_90", "bfloat16", 16384, 8192)
    assert "picks cutedsl" in _tuning.route("layer_norm_bwd", "triton", "sm_90", "bfloat16", 16384, 8192)
    assert _tuning.takes("layer_norm_bwd", "triton", "sm_90", "bfloat16", 16384, 8000)  # no config covers 8000
    ak.unregister(name)
    assert _tuning.takes("layer_norm_bwd", "triton", "sm_90", "bfloat16", 16384, 8192)


def test_cond_routes_only_where_the_table_names_cutedsl(fake_backend, monkeypatch):
    from accel.kernels.ops.layer_norm import conditions

    _, bwd = conditions.make_conds("cutedsl", ["cuda"], lc.LIMITS, extra=lc.config_reason)
    with routing_table(monkeypatch, [dict(op="layer_norm_bwd", dtype="bfloat16", m=4096, n=4096, impl="cutedsl",
                                          config={"threads": 128, "ctas_per_sm": 2})]):

        def args(m, n=4096, stat_dtype=torch.float32):
            x = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            w = torch.empty(n, dtype=torch.bfloat16, device="cuda")
            s = torch.empty(m, 1, dtype=stat_dtype, device="cuda")
            return x, x, [n], s, s, w, w, [True, True, True]

        with fake_backend("cuda", arch="sm_90"):
            _conds.arch.cache_clear()
            assert bwd(*args(4096)) and bwd.why_not(*args(4096)) is None
            assert "MIN_NUMEL['cutedsl']" in bwd.why_not(*args(8192))  # a miss
            assert "fp32 mean/rstd" in bwd.why_not(*args(4096, stat_dtype=torch.bfloat16))


@pytest.mark.parametrize("path", PATHS)
def test_register_call_unregister_on_cpu_gives_aten(path):
    ak.use_registry(path)
    assert lc.register(["cpu"]) == ["layer_norm_bwd.cutedsl"]
    layer = torch.nn.LayerNorm(64)
    x = torch.randn(4, 64, requires_grad=True)
    layer(x).sum().backward()
    (o,) = ak.overrides()
    assert (o.name, o.dsl, o.routed) == ("layer_norm_bwd.cutedsl", "cutedsl", 0)
    got = x.grad.clone()
    ak.unregister(o.name)
    x.grad = None
    layer(x).sum().backward()
    assert torch.equal(got, x.grad)


def test_zero_rows_launch_nothing(monkeypatch):
    monkeypatch.setattr(lc, "_k", lambda: (_ for _ in ()).throw(AssertionError("kernel module asked for")))
    x = torch.empty(0, 1024)
    dw, db = lc.launch_bwd(x, x, torch.ones(1024), torch.empty(0), torch.empty(0), torch.empty_like(x),
                           [True, True, True], {"threads": 128, "ctas_per_sm": 1}, True)
    assert torch.equal(dw, torch.zeros(1024)) and torch.equal(db, torch.zeros(1024))


@pytest.mark.skipif(not HAS_CUTLASS, reason="nvidia-cutlass-dsl not installed here (tox env torch214 installs it)")
@pytest.mark.parametrize("dtype,w,n,threads,want", [("bfloat16", "bfloat16", 8192, 256, "111"),
                                                    ("float16", "float32", 4096, 128, "110"),
                                                    ("float32", "", 4096, 512, "100"),
                                                    ("bfloat16", "bfloat16", 8192, 512, "111")])
def test_kernel_compiles_for_sm_90a_with_staged_rows_and_no_spills(tmp_path, dtype, w, n, threads, want):
    ptx, out = sm90a_ptx(tmp_path, "accel.kernels.ops.layer_norm.cutedsl_kernel",
                         [dtype, w or None, n, threads, [c == "1" for c in want]], [dtype, w or None, n + 8, threads, [c == "1" for c in want]])
    assert "REFUSED" in out
    vec = 16 // (4 if dtype == "float32" else 2)
    k = n // threads // vec  # 16-byte vectors per thread per tensor
    assert len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx)) == 2 * 2 * k  # x, dy: first row + loop
    assert len(re.findall(r"ld\.shared\.v4", ptx)) == 2 * k
    stores = (k if want[0] == "1" else 0) + sum(n // threads // 4 for c in want[1:] if c == "1")  # dx; dw/db fp32
    assert len(re.findall(r"st\.global\.v4", ptx)) == stores
    assert ptxas_spills(tmp_path, ptx) == (0, 0)  # registers hold w, x, dy and the dw/db sums (ptxas -v)
    assert f".reqntid {threads}, 1, 1" in ptx
    assert ("bar.sync" in ptx or "barrier.sync" in ptx) is (want[0] == "1")  # the row sums need the CTA


def _gpu_ok() -> bool:
    return torch.cuda.is_available() and HAS_CUTLASS and torch.cuda.get_device_capability()[0] >= 9


gpu = pytest.mark.skipif(not _gpu_ok(), reason="needs an SM 9.0+ NVIDIA GPU and nvidia-cutlass-dsl")


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("dtype,pdt", [(torch.bfloat16, "same"), (torch.float16, torch.float32),
                                       (torch.float32, None)])
@pytest.mark.parametrize("m,n", [(3, 1024), (300, 4096), (37, 8192)])
def test_every_config_matches_aten_on_the_gpu(m, n, dtype, pdt):
    torch.manual_seed(m + n)
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 0.3
    dy = torch.randn_like(x)
    wdt = dtype if pdt == "same" else pdt
    w = None if pdt is None else torch.randn(n, device="cuda", dtype=wdt)
    b = None if pdt is None else torch.randn(n, device="cuda", dtype=wdt)
    from accel.kernels.ops.layer_norm import reference as lref  # ATen's CUDA kernels take no mixed dtypes

    _, mean, rstd = lref.native_layer_norm(x, [n], w, b, 1e-5)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        ref = lref.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b, mask)
        if w is None:  # no weight: dw and db are not asked for
            ref = (ref[0], None, None)
        for cfg in lcc.candidate_configs(n, x.element_size()):
            dx = torch.full_like(x, float("nan")) if mask[0] else None
            dw, db = lc.launch_bwd(dy, x, w, mean.view(-1), rstd.view(-1), dx, mask, cfg, b is not None)
            torch.cuda.synchronize()
            for got, want in zip((dx, dw, db), ref):
                assert (got is None) == (want is None), (mask, cfg)
                if got is not None:
                    problem = _tolerance.compare(got.to(want.dtype), want)[1]
                    assert problem is None, (mask, cfg, problem)


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("path", PATHS)
def test_routed_where_the_table_names_cutedsl_on_the_gpu(path, monkeypatch, tmp_path):
    with gpu_user_table(monkeypatch, tmp_path, [dict(op="layer_norm_bwd", dtype="bfloat16", m=512, n=4096,
                                                     impl="cutedsl", config={"threads": 256, "ctas_per_sm": 1})]):
        ak.use_registry(path)
        (name,) = lc.register(["cuda"])
        layer = torch.nn.LayerNorm(4096, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        layer(x).float().square().sum().backward()
        got = (x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone())
        (o,) = ak.overrides()
        assert (o.routed, o.failed) == (1, 0)
        ak.unregister(name)
        x.grad = layer.weight.grad = layer.bias.grad = None
        layer(x).float().square().sum().backward()
        assert _tolerance.compare(got, (x.grad, layer.weight.grad, layer.bias.grad))[1] is None
