"""Compile plans per vendor (faked), accel.compile merging, RDNA3 FlexAttention options."""

import pytest
import torch
import torch._inductor.config as inductor_config

import accel
from accel import _compat
from accel.compile import flex_attention_kernel_options
from accel.errors import CompileOptionError
from accel.testing import fake_backend

KEY = "max_autotune_gemm_backends"
# Tests that need the running torch to know NVGEMM / CuTeDSL (torch 2.13+); older torch (the lead's
# 2.11) is covered by the "key absent" tests, which fake the absence on any torch.
requires_nvgemm = pytest.mark.skipif(
    not (_compat.inductor_config_has("nvgemm_max_profiling_configs") and _compat.inductor_config_has("cutedsl_enable_autotuning")),
    reason=f"torch {torch.__version__} has no NVGEMM / CuTeDSL GEMM backends")
requires_origami = pytest.mark.skipif(not _compat.inductor_config_has("rocm.origami"),
                                      reason=f"torch {torch.__version__} has no rocm.origami")
MODES = [None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
SETUPS = [("cuda", "sm_80"), ("cuda", "sm_90"), ("cuda", "sm_100"), ("cuda", "sm_107"), ("cuda", "sm_120"),
          ("rocm", "gfx90a"), ("rocm", "gfx942:sramecc+:xnack-"), ("rocm", "gfx950"), ("rocm", "gfx1100"),
          ("xpu", "pvc"), ("mps", "apple-m3"), ("cpu", None)]


@pytest.fixture
def all_packages(monkeypatch):
    """Pretend every optional package (cutlass DSL, ck4inductor, rocm-origami) is installed."""
    for name in ("nvgemm_available", "cutedsl_available", "ck_available", "origami_available"):
        monkeypatch.setattr(_compat, name, lambda: True)


def _tokens(value):
    return [t.strip() for t in value.split(",")]


@pytest.mark.parametrize("vendor,arch", SETUPS)
@pytest.mark.parametrize("mode", MODES)
def test_every_planned_key_is_a_real_config_key_that_torch_accepts(vendor, arch, mode, all_packages):
    with fake_backend(vendor, arch=arch):
        plan = accel.compile_plan(mode)
    for item in plan:
        assert _compat.inductor_config_has(item.key), item
        assert item.reason
    for item in plan.skipped:
        # a decision may be skipped *because* this torch lacks the key (rocm.origami before torch 2.13):
        # then its reason must say exactly that
        assert _compat.inductor_config_has(item.key) or f"no Inductor config key {item.key!r}" in item.reason, item
        assert item.reason
    if plan:
        # torch.compile validates option keys when it is called (before any tracing)
        torch.compile(lambda x: x + 1, options={**_compat.inductor_mode_options(mode), **plan.options})


@pytest.mark.parametrize("vendor,arch", SETUPS)
def test_nothing_is_planned_without_autotuning(vendor, arch, all_packages):
    with fake_backend(vendor, arch=arch):
        assert list(accel.compile_plan("reduce-overhead")) == []
        assert accel.backend().compile_options(mode="reduce-overhead") == {}


@requires_nvgemm
def test_nvgemm_added_on_hopper_under_max_autotune(all_packages):
    with fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune")
        assert [i.key for i in plan] == [KEY]
        assert _tokens(plan.options[KEY]) == _tokens(inductor_config.max_autotune_gemm_backends.upper()) + ["NVGEMM"]
        assert "NVGEMM" in plan[0].reason and "sm_90" in plan[0].reason
        assert accel.backend().compile_options(mode="max-autotune") == plan.options
        cutedsl = [s for s in plan.skipped if s.value == "CUTEDSL"]
        assert cutedsl and "sm_100..sm_109" in cutedsl[0].reason


@requires_nvgemm
def test_cutedsl_added_on_blackwell_only(all_packages):
    with fake_backend("cuda", arch="sm_100"):
        assert _tokens(accel.compile_plan("max-autotune").options[KEY])[-2:] == ["NVGEMM", "CUTEDSL"]
    with fake_backend("cuda", arch="sm_120"):
        assert "CUTEDSL" not in accel.compile_plan("max-autotune").options[KEY]


@requires_nvgemm
def test_nvgemm_not_added_without_package(monkeypatch):
    monkeypatch.setattr(_compat, "nvgemm_available", lambda: False)
    monkeypatch.setattr(_compat, "cutedsl_available", lambda: False)
    with fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    (nv,) = [s for s in plan.skipped if s.value == "NVGEMM"]
    assert "pip install nvidia-cutlass-dsl" in nv.reason


@requires_nvgemm
def test_nvgemm_not_added_before_hopper(all_packages):
    with fake_backend("cuda", arch="sm_80"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    assert any("sm_90" in s.reason for s in plan.skipped if s.value == "NVGEMM")


def test_template_skipped_when_torch_lacks_its_key(monkeypatch, all_packages):
    real = _compat.inductor_config_has
    monkeypatch.setattr(_compat, "inductor_config_has", lambda key: key != "nvgemm_max_profiling_configs" and real(key))
    with fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    assert any("no Inductor config key 'nvgemm_max_profiling_configs'" in s.reason for s in plan.skipped)


def test_planned_key_missing_in_torch_is_never_set(monkeypatch, all_packages):
    real = _compat.inductor_config_has
    monkeypatch.setattr(_compat, "inductor_config_has", lambda key: key != KEY and real(key))
    with fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    assert any(s.key == KEY and "no Inductor config key" in s.reason for s in plan.skipped)


@requires_nvgemm
def test_user_options_win(all_packages):
    with fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune", options={KEY: "ATEN"})
    assert list(plan) == []
    assert any("yours wins" in s.reason and "'ATEN'" in s.reason for s in plan.skipped)


@requires_nvgemm
def test_user_max_autotune_option_turns_plan_on(all_packages):
    with fake_backend("cuda", arch="sm_90"):
        assert "NVGEMM" in accel.compile_plan(None, options={"max_autotune_gemm": True}).options[KEY]


@requires_nvgemm
def test_plan_extends_the_current_backends_setting(all_packages):
    # (config.patch, not monkeypatch: Inductor's ConfigModule loses keys under monkeypatch's undo)
    with inductor_config.patch({KEY: "aten,Triton"}), fake_backend("cuda", arch="sm_90"):
        assert accel.compile_plan("max-autotune").options[KEY] == "ATEN,TRITON,NVGEMM"
    with inductor_config.patch({KEY: "ATEN,NVGEMM"}), fake_backend("cuda", arch="sm_90"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []  # already there: nothing to add


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942:sramecc+:xnack-", "gfx950"])
def test_ck_added_on_instinct(arch, all_packages):
    with fake_backend("rocm", arch=arch):
        plan = accel.compile_plan("max-autotune-no-cudagraphs")
    assert _tokens(plan.options[KEY])[-1] == "CK"


def test_ck_not_added_on_rdna3_or_without_package(monkeypatch, all_packages):
    with fake_backend("rocm", arch="gfx1100"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    assert any("ck_supported_arch" in s.reason for s in plan.skipped)
    monkeypatch.setattr(_compat, "ck_available", lambda: False)
    with fake_backend("rocm", arch="gfx942"):
        plan = accel.compile_plan("max-autotune")
    assert list(plan) == []
    assert any("composable_kernel" in s.reason for s in plan.skipped)


def test_origami_is_reported_never_set(monkeypatch):
    monkeypatch.setattr(_compat, "ck_available", lambda: False)
    monkeypatch.setattr(_compat, "origami_available", lambda: False)
    with fake_backend("rocm", arch="gfx942"):
        (o,) = [s for s in accel.compile_plan("max-autotune").skipped if s.key == "rocm.origami"]
        if not _compat.inductor_config_has("rocm.origami"):  # older torch (2.11): nothing to offer
            assert "no Origami" in o.reason
            return
        assert "pip install rocm-origami" in o.reason
        monkeypatch.setattr(_compat, "origami_available", lambda: True)
        plan = accel.compile_plan("max-autotune")
        (o,) = [s for s in plan.skipped if s.key == "rocm.origami"]
        assert "TORCHINDUCTOR_ORIGAMI=1" in o.reason
        assert "rocm.origami" not in plan.options
        (o,) = [s for s in accel.compile_plan(None).skipped if s.key == "rocm.origami"]
        assert "autotuning" in o.reason
        monkeypatch.setattr(_compat, "inductor_config_has", lambda key: False)
        (o,) = [s for s in accel.compile_plan("max-autotune").skipped if s.key == "rocm.origami"]
        assert "no Origami" in o.reason


@requires_origami
def test_origami_reported_active_when_inductor_loaded_it(monkeypatch):
    import sys
    import types

    monkeypatch.setattr(_compat, "origami_available", lambda: True)
    holder = types.ModuleType("torch._inductor.template_heuristics.triton")
    holder.origami = object()
    monkeypatch.setitem(sys.modules, "torch._inductor.template_heuristics.triton", holder)
    monkeypatch.delitem(sys.modules, "torch._inductor.heuristics.template.triton", raising=False)
    with fake_backend("rocm", arch="gfx942"):
        (o,) = [s for s in accel.compile_plan("max-autotune").skipped if s.key == "rocm.origami"]
    assert "already active" in o.reason


def test_unknown_mode_raises():
    with fake_backend("cuda"), pytest.raises(CompileOptionError, match="unknown torch.compile mode 'max-autotuner'"):
        accel.compile_plan("max-autotuner")


# -- accel.compile ------------------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    calls = []

    def fake_compile(model=None, **kwargs):
        calls.append(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    return calls


@requires_nvgemm
def test_compile_merges_mode_plan_and_user_options(captured, all_packages):
    with fake_backend("cuda", arch="sm_90"):
        accel.compile(len, mode="max-autotune", options={"coordinate_descent_tuning": False}, fullgraph=True,
                      loss_pass=False)
    (kw,) = captured
    assert "mode" not in kw and kw["fullgraph"] is True and kw["backend"] == "inductor"
    opts = kw["options"]
    assert opts["max_autotune"] is True and opts["triton.cudagraphs"] is True
    assert opts["coordinate_descent_tuning"] is False  # the user's value wins over the mode's
    assert opts[KEY].endswith(",NVGEMM")


def test_compile_passes_through_when_nothing_to_add(captured):
    with fake_backend("cpu"):
        f = accel.compile(len, mode="reduce-overhead", dynamic=False, loss_pass=False)
    assert f is len
    assert captured == [{"mode": "reduce-overhead", "options": None, "backend": "inductor", "dynamic": False}]


def test_compile_accepts_mode_and_options_together(captured):
    with fake_backend("cpu"):
        accel.compile(len, mode="max-autotune-no-cudagraphs", options={"epilogue_fusion": False}, loss_pass=False)
    assert captured[0]["options"] == {"max_autotune": True, "coordinate_descent_tuning": True, "epilogue_fusion": False}
    assert "mode" not in captured[0]


@requires_nvgemm
def test_the_loss_pass_wraps_the_inductor_backend_torch_compile_would_build(captured, all_packages):
    """With the loss pass (the default) torch.compile gets accel's backend around the very Inductor backend
    ``torch.compile(mode=..., options=...)`` builds: the same config, the same dynamic."""
    with fake_backend("cuda", arch="sm_90"):
        accel.compile(len, mode="max-autotune", options={"coordinate_descent_tuning": False}, dynamic=False)
        accel.compile(len, mode="max-autotune", options={"coordinate_descent_tuning": False}, dynamic=False,
                      loss_pass=False)
    wrapped, plain = captured
    assert set(wrapped) == {"backend", "dynamic"} and wrapped["dynamic"] is False
    want = torch._TorchCompileInductorWrapper(None, plain["options"], False)
    assert wrapped["backend"].inner == want and wrapped["backend"].config[KEY].endswith(",NVGEMM")


def test_compile_other_backends_untouched(captured, all_packages):
    with fake_backend("cuda", arch="sm_90"):
        accel.compile(len, mode="max-autotune", backend="aot_eager")
    assert captured == [{"mode": "max-autotune", "options": None, "backend": "aot_eager"}]


def test_compile_runs_for_real_on_cpu():
    f = accel.compile(lambda x: torch.sin(x) * 2, backend="eager")
    x = torch.linspace(0, 1, 8)
    torch.testing.assert_close(f(x), torch.sin(x) * 2)


# -- FlexAttention kernel options -----------------------------------------------------------
@pytest.mark.parametrize("seq_len,block_m", [(1, 16), (127, 16), (128, 32), (511, 32), (512, 64), (8192, 64)])
def test_rdna3_flex_tiers_by_sequence_length(monkeypatch, seq_len, block_m):
    monkeypatch.setattr(_compat, "has_rdna3_flex_heuristics", lambda: False)
    with fake_backend("rocm", arch="gfx1100"):
        opts = flex_attention_kernel_options(seq_len, head_dim=256, dtype=torch.bfloat16)
    assert opts["BLOCK_M"] == block_m and opts["BLOCK_N"] == 16 and opts["num_warps"] == 4


@pytest.mark.parametrize("vendor,arch,head_dim,dtype", [
    ("rocm", "gfx942", 256, torch.bfloat16), ("rocm", "gfx1100", 128, torch.bfloat16),
    ("rocm", "gfx1151", 256, torch.float32), ("cuda", "sm_90", 256, torch.bfloat16), ("cpu", None, 256, torch.float16),
])
def test_flex_options_empty_elsewhere(monkeypatch, vendor, arch, head_dim, dtype):
    monkeypatch.setattr(_compat, "has_rdna3_flex_heuristics", lambda: False)
    with fake_backend(vendor, arch=arch):
        assert flex_attention_kernel_options(1024, head_dim=head_dim, dtype=dtype) == {}


def test_flex_options_empty_where_torch_has_the_tiers(monkeypatch):
    monkeypatch.setattr(_compat, "has_rdna3_flex_heuristics", lambda: True)
    with fake_backend("rocm", arch="gfx1100"):
        assert flex_attention_kernel_options(100, head_dim=256, dtype=torch.float16) == {}


def test_rdna3_tiers_match_torch_when_torch_has_them(monkeypatch):
    """Where the running torch ships the tiers (2.14), accel's table is the same numbers."""
    if not _compat.has_rdna3_flex_heuristics():
        pytest.skip(f"torch {torch.__version__} has no RDNA3 FlexAttention tiers to compare with")
    import torch._inductor.heuristics.template.triton as heur

    from accel.backends.rocm import RDNA3_FLEX_TIERS

    monkeypatch.setattr(heur, "get_backend_num_stages", lambda: 1)  # asks the (absent) HIP driver
    monkeypatch.setattr(heur.BaseHeuristicSingleton, "_instances", {})  # build a fresh one, cache nothing
    with fake_backend("rocm", arch="gfx1100"):
        h = heur.ROCmConfigHeuristic()
    theirs = [h.rdna3_short_seq_flex_config, h.rdna3_medium_seq_flex_config, h.rdna3_default_flex_config]
    for (_, ours), table in zip(RDNA3_FLEX_TIERS, theirs):
        cfg = table[(torch.bfloat16, 256)]
        assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_warps) == (
            ours["BLOCK_M"], ours["BLOCK_N"], ours["num_stages"], ours["num_warps"])
        assert cfg.waves_per_eu == ours["waves_per_eu"]


@pytest.mark.parametrize("bad", [0, -4, 3.5, True, "128"])
def test_flex_options_reject_bad_lengths(bad):
    with pytest.raises(CompileOptionError, match="must be a positive int"):
        flex_attention_kernel_options(bad, head_dim=64, dtype=torch.float16)
