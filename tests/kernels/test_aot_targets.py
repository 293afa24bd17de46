"""AOT compile check (issue 23): accel's built-in Triton kernels, compiled on this CPU for every GPU target
(:data:`accel.kernels.dsl.triton_aot.TARGETS`), have no register spills, no scratch / local memory, the
target's wave size, 16-byte global loads where each thread holds 16 bytes of an aligned row, and fit the
target's threads, registers and shared memory / LDS.

The compiles run in a subprocess with a clean environment (``benchmarks/aot_targets.py``; the suite sets
``TRITON_INTERPRET=1`` for other tests, and Triton does not compile then). Every env compiles one case per
kernel function for all nine targets (``--set sample``); the env with ``ACCEL_TEST_ONCE=1`` compiles the
CI set (the shipped tables' configs plus one default per row-length class). A target is skipped only where
the installed Triton has no backend for it; a failing compile fails. A case failing the check passes only
where :data:`~accel.kernels.dsl.triton_aot.EXCLUSIONS` lists it, and an exclusion no case needs fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accel.errors import UnsupportedOperationError
from accel.kernels.dsl import triton_aot
from accel.kernels.dsl.triton_aot import TARGETS, Report, check, excluded, load_width

pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "aot_targets.py"


def _run(which: str, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("aot") / f"{which}.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--set", which, "--json", str(out), "--no-write", "--quiet"],
                          env=triton_aot.clean_env(), capture_output=True, text=True, timeout=1200)
    assert out.exists(), f"aot_targets.py --set {which} wrote no report (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> dict:
    return _run("sample", tmp_path_factory)


@pytest.fixture(scope="module")
def ci_set(tmp_path_factory) -> dict:
    return _run("ci", tmp_path_factory)


def _assert_target(doc: dict, target: str) -> list[dict]:
    """Every report of ``target`` passes, or fails exactly as an exclusion says; returns the reports."""
    if target in doc["meta"]["skipped"]:
        pytest.skip(f"{target}: the installed triton cannot compile for it: {doc['meta']['skipped'][target]}")
    t = TARGETS[target]
    reports = [r for r in doc["reports"] if r["target"] == target]
    assert reports, f"no compile for {target}"
    failures = []
    for r in reports:
        what = f"{r['label']} ({r['source']}) on {target}"
        if r["excluded"]:
            assert r["problems"], f"{what}: excluded ({r['excluded']}) but passes the check: drop the exclusion"
            assert not r["error"], f"{what}: excluded for {r['excluded']!r} but does not compile: {r['error']}"
            continue
        if r["problems"]:
            failures.append(f"{what}: {'; '.join(r['problems'])}")
            continue
        # the properties themselves, not only check()'s verdict
        assert r["spills"] == 0 and r["scratch"] == 0, what
        assert r["warp_size"] == t.warp_size, what
        assert r["load_bytes"] >= r["vector_bytes"], what
        assert r["shared"] <= t.shared_bytes and r["num_warps"] * t.warp_size <= t.max_threads, what
        assert r["regs"] > 0, f"{what}: no register count read"
    assert not failures, "\n".join(failures)
    assert any(r["load_bytes"] == 16 for r in reports), f"no 16-byte global load on {target}"
    return reports


@pytest.mark.parametrize("target", list(TARGETS))
def test_sample_compiles_and_fits(sample, target):
    """One case per kernel function (a shipped config where there is one) for every target."""
    reports = _assert_target(sample, target)
    names = {r["kernel"] for r in reports}
    assert {"rms_norm_fwd_rows", "rms_norm_bwd_rows", "softmax_fwd_looped", "layer_norm_bwd_split", "lce_rows",
            "rope_rows", "swiglu_bwd", "swiglu_bwd_product", "partials_finish"} <= names


@pytest.mark.once
@pytest.mark.parametrize("target", list(TARGETS))
def test_ci_set_compiles_and_fits(ci_set, target):
    """The shipped tables' Triton configs and one default per row-length class, bf16, on every target."""
    _assert_target(ci_set, target)


@pytest.mark.once
def test_every_exclusion_is_needed(ci_set):
    """Each :data:`EXCLUSIONS` entry covers a case of the CI set that fails the check (none is stale)."""
    used = {(r["kernel"], r["target"]) for r in ci_set["reports"] if r["excluded"] and r["problems"]}
    for ex in triton_aot.EXCLUSIONS:
        if ex.kind == "unfit" or ex.when.get("element_bytes", 0) > 2:
            continue  # 32-warp tuner candidates, fp32 rows: in the full matrix only (benchmarks/aot_targets.py)
        if ex.tritons and tuple(int(p) for p in ci_set["meta"]["triton"].split(".")[:2]) not in ex.tritons:
            continue  # another Triton version's misfit
        hit = [t for t in ex.targets if (ex.kernel, t) in used]
        assert hit == list(ex.targets), f"exclusion {ex.kernel} on {ex.targets}: no failing case on " \
                                        f"{sorted(set(ex.targets) - set(hit))}"


# ------------------------------------------------------------------------------------- no compile needed


def test_load_width_reads_amd_and_ptx_loads():
    assert load_width(["global_load_dwordx4", "buffer_load_dwordx4", "global_load_b128", "global_load_dword",
                       "global_load_ushort", "global_store_dwordx4"], "hip") == {16: 3, 4: 1, 2: 1}
    assert load_width(["ld.global.v4.b32", "ld.global.L1::evict_last.v2.b32", "ld.global.b16",
                       "ld.global.L2::cache_hint.v4.b32"], "cuda") == {16: 2, 8: 1, 2: 1}


def _report(target: str, **kw) -> Report:
    base = dict(op="x_fwd", kernel="k", label="k", source="test", target=target, config={}, num_warps=8,
                warp_size=TARGETS[target].warp_size, regs=40, load_bytes=16, vector_bytes=16)
    return Report(**{**base, **kw})


def test_check_flags_each_property():
    assert check(_report("sm_90"), TARGETS["sm_90"]) == []
    assert check(_report("gfx942"), TARGETS["gfx942"]) == []
    assert any("spills" in p for p in check(_report("sm_90", spills=64), TARGETS["sm_90"]))
    assert any("scratch" in p for p in check(_report("gfx942", scratch=16), TARGETS["gfx942"]))
    assert any("wave size" in p for p in check(_report("gfx1100", warp_size=64), TARGETS["gfx1100"]))
    assert any("global load" in p for p in check(_report("sm_80", load_bytes=8), TARGETS["sm_80"]))
    # 32 wave64 warps: 2048 work-items, over AMD's 1024 per workgroup
    assert any("threads per block" in p for p in check(_report("gfx90a", num_warps=32), TARGETS["gfx90a"]))
    # 16 warps x 136 registers: 69632 allocated > 65536 per block
    assert any("per block" in p for p in check(_report("sm_90", num_warps=16, regs=136), TARGETS["sm_90"]))
    # 16 waves over 4 SIMDs = 4 per SIMD; 4 x 136 VGPRs > 512
    assert any("VGPRs" in p for p in check(_report("gfx942", num_warps=16, regs=136), TARGETS["gfx942"]))
    assert check(_report("gfx942", num_warps=16, regs=128), TARGETS["gfx942"]) == []
    # 160 KiB LDS fits gfx950, not gfx942
    assert check(_report("gfx950", shared=150 * 1024), TARGETS["gfx950"]) == []
    assert any("shared memory" in p for p in check(_report("gfx942", shared=150 * 1024), TARGETS["gfx942"]))


def test_excluded_matches_config_bounds():
    assert excluded("rms_norm_bwd", "sm_90", {"block_n": 16384, "num_warps": 16}).kind == "spills"
    assert excluded("rms_norm_bwd", "sm_90", {"block_n": 8192, "num_warps": 16}) is None
    assert excluded("rms_norm_bwd", "gfx942", {"block_n": 16384, "num_warps": 16}) is None
    assert excluded("softmax_bwd", "gfx950", {"block_n": 4096, "num_warps": 32}).kind == "unfit"
    assert excluded("softmax_bwd", "sm_100", {"block_n": 32768, "num_warps": 16, "element_bytes": 2}) is None
    assert excluded("softmax_bwd", "sm_100", {"block_n": 32768, "num_warps": 16, "element_bytes": 4}).kind == "spills"
    split = {"split": 2, "block_n": 8192, "num_warps": 8}
    assert excluded("layer_norm_bwd", "gfx1201", split, triton=(3, 5)).kind == "spills"
    assert excluded("layer_norm_bwd", "gfx1201", split, triton=(3, 9)) is None
    assert excluded("layer_norm_bwd", "sm_90", split, triton=(3, 8)).kind == "spills"
    assert excluded("layer_norm_bwd", "sm_90", split, triton=(3, 9)) is None


def test_compile_case_refuses_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = triton_aot.Case("x_fwd", object(), {}, {}, (), 4)
    with pytest.raises(UnsupportedOperationError, match="TRITON_INTERPRET=1"):
        triton_aot.compile_case(case, TARGETS["sm_90"])


def test_clean_env_drops_the_interpreter():
    env = triton_aot.clean_env({"TRITON_INTERPRET": "1", "PATH": "/bin"})
    assert "TRITON_INTERPRET" not in env and env["PATH"] == "/bin" and env["TRITON_ALWAYS_COMPILE"] == "1"


def test_cases_cover_every_kernel_and_the_shipped_configs():
    """The CI set has every built-in Triton kernel and every Triton config of the shipped tables (a table format
    change that hid them would shrink the check silently)."""
    from accel.kernels.ops import triton_aot_cases

    table = [t for t in triton_aot_cases.table_configs() if t[5] is not None]
    assert table, "no Triton config read from the shipped tuning tables"
    cases = triton_aot_cases.cases()
    names = {c.name for c in cases}
    assert names == {"rms_norm_fwd_rows", "rms_norm_fwd_looped", "rms_norm_bwd_rows", "softmax_fwd_rows",
                     "softmax_fwd_looped", "softmax_bwd_rows", "softmax_bwd_looped", "layer_norm_fwd_rows",
                     "layer_norm_bwd_rows", "layer_norm_bwd_split", "partials_finish", "rms_norm_hf_fwd",
                     "rms_norm_hf_bwd", "swiglu_fwd", "swiglu_bwd", "swiglu_bwd_product", "rope_rows", "lce_rows", "lce_tile_stats",
                     "lce_tile_grad", "lce_coefs", "lce_scale"}
    for arch, op, dtype, m, n, cfg in table:
        if dtype == "bfloat16":  # compiled, or deduplicated into an identical earlier case
            assert any(c.op == op and c.config == cfg for c in cases) or any(
                f"table {arch} {dtype} {m}x{n}" == c.source for c in cases), (arch, op, m, n, cfg)
    with pytest.raises(ValueError, match="unknown kernel families"):
        triton_aot_cases.cases(["rmsnorm"])


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(triton_aot, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 6
