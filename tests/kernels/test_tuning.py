"""The tuning table (accel.kernels.tuning.table): lookup, miss policy, shipped data, user cache under concurrency, --tune."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from accel.errors import KernelFallbackWarning, KernelRegistrationError
from accel.kernels.tuning import table as _tuning
from accel.testing.pytest_plugin import require_dsl


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(_tuning.TUNING_DIR_ENV, str(tmp_path / "tuning"))
    _tuning.reload()
    yield tmp_path / "tuning"
    _tuning.reload()


def test_buckets_are_next_powers_of_two():
    assert _tuning.bucket(4096, 4096) == (4096, 4096)
    assert _tuning.bucket(3000, 1000) == (1024, 4096)
    assert _tuning.bucket(1, 1) == (1, 1)


def test_shipped_sm_90_table_is_package_data_and_folds():
    import json

    assert _tuning.shipped_path("sm_90").is_file()
    entries = json.loads(_tuning.shipped_path("sm_90").read_text())["entries"]
    assert {e["op"] for e in entries} >= {"rms_norm_fwd", "softmax_fwd", "layer_norm_bwd"}
    for e in entries:  # every shipped entry is what a lookup of its own bucket returns
        hit = _tuning.lookup(e["op"], "sm_90", e["dtype"], e["m"], e["n"])
        assert hit is not None and hit.impl == e["impl"] and hit.source == "shipped", e
    assert _tuning.lookup("rms_norm_fwd", "sm_90", "bfloat16", 3, 5) is None
    assert _tuning.table("sm_999") == {}


def test_miss_policy_and_hits_route_per_dsl():
    # an arch without a table: nothing is guessed, every call declines with the command that tunes
    for m, n in ((4096, 4096), (4, 64)):
        why = _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", m, n)
        assert why.startswith("no tuning entry for sm_999 bf16 (softmax_fwd, bucket ") and "`accel bench --tune`" in why
        assert not _tuning.takes("softmax_fwd", "triton", "sm_999", "bfloat16", m, n)
    _tuning.write_user_table("sm_999", [
        dict(op="softmax_fwd", dtype="bfloat16", m=4096, n=4096, impl="helion", config={"num_warps": 4}),
        dict(op="softmax_fwd", dtype="bfloat16", m=64, n=64, impl="triton")],
        defaults=[dict(op="softmax_fwd", dtype="bfloat16", impl="triton", min_numel=1 << 20, source="test run")])
    # a declared default: misses of at least its floor route, smaller ones decline with its source
    assert _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", 8192, 8192) is None
    why = _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", 4, 1024)
    assert why.startswith("4096 elements < 1048576, the user sm_999 table's default floor for softmax_fwd bf16 "
                          "(triton; test run)"), why
    assert "no declared default for triton" in _tuning.route("softmax_fwd", "triton", "sm_999", "float16", 8192, 8192)
    assert "no declared default for helion" in _tuning.route("softmax_fwd", "helion", "sm_999", "bfloat16", 8192, 8192)
    assert "picks helion" in _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", 4000, 4096)
    assert _tuning.route("softmax_fwd", "helion", "sm_999", "bfloat16", 4000, 4096) is None
    assert _tuning.config("softmax_fwd", "helion", "sm_999", "bfloat16", 4000, 4096) == {"num_warps": 4}
    assert _tuning.config("softmax_fwd", "triton", "sm_999", "bfloat16", 4000, 4096) is None
    assert _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", 64, 64) is None  # evidence beats MIN_NUMEL


def test_user_table_overrides_shipped_and_merges(cache_dir):
    path = _tuning.write_user_table("sm_90", [dict(op="rms_norm_fwd", dtype="bfloat16", m=4096, n=4096, impl="aten")])
    assert path == cache_dir / "sm_90.json"
    assert _tuning.lookup("rms_norm_fwd", "sm_90", "bfloat16", 4096, 4096).impl == "aten"
    _tuning.write_user_table("sm_90", [dict(op="softmax_bwd", dtype="float16", m=8, n=8, impl="triton")])
    data = json.loads(path.read_text())
    assert data["format"] == 1 and len(data["entries"]) == 2
    assert not list(cache_dir.glob("*.tmp"))


def test_bad_entries_and_corrupt_files_are_reported(cache_dir):
    good = dict(op="layer_norm_bwd", dtype="bfloat16", m=4096, n=4096, impl="triton")
    for bad, says in ((dict(op="x", dtype="bfloat16", m=1, n=1), "lacks impl"),
                      ({**good, "impl": "cute"}, "has impl 'cute', not one of"),
                      ({**good, "op": "layernorm_bwd"}, "has op 'layernorm_bwd', not one of"),
                      ({**good, "dtype": "bf16"}, "has dtype 'bf16', not one of"),
                      ({**good, "m": 0}, "m or n that is not an integer >= 1"),
                      ({**good, "n": 4096.0}, "m or n that is not an integer >= 1")):
        with pytest.raises(KernelRegistrationError, match=f"{says}.*nothing was written"):
            _tuning.write_user_table("sm_90", [good, bad])
    assert not (cache_dir / "sm_90.json").exists()  # nothing written
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "sm_90.json").write_text(json.dumps({"format": 0}))
    with pytest.warns(KernelFallbackWarning, match="unreadable .*not a format-1 table"):
        t = _tuning.table("sm_90")
    assert t[("rms_norm_fwd", "bfloat16", 4096, 4096)].source == "shipped"
    # writing over an unreadable file keeps it aside, named in the warning: hand-edited entries are not lost
    with pytest.warns(KernelFallbackWarning, match=r"unreadable .* kept as .*sm_90\.json\.unreadable-"):
        _tuning.write_user_table("sm_90", [good])
    (aside,) = cache_dir.glob("sm_90.json.unreadable-*")
    assert json.loads(aside.read_text()) == {"format": 0}
    assert [e["m"] for e in json.loads((cache_dir / "sm_90.json").read_text())["entries"]] == [4096]


def test_concurrent_writers_lose_nothing(cache_dir):
    code = textwrap.dedent("""
        import sys
        from accel.kernels.tuning import table as _tuning
        i = int(sys.argv[1])
        for j in range(5):
            _tuning.write_user_table("sm_77", [dict(op=_tuning.OPS[i], dtype="bfloat16", m=2 ** j, n=8, impl="triton")])
    """)
    env = {**__import__("os").environ, _tuning.TUNING_DIR_ENV: str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], env=env) for i in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    entries = json.loads((cache_dir / "sm_77.json").read_text())["entries"]
    assert sorted((e["op"], e["m"]) for e in entries) == sorted((_tuning.OPS[i], 2 ** j) for i in range(4) for j in range(5))


def test_tune_on_cpu_in_the_interpreter_writes_winners(cache_dir):
    """Smoke test of accel bench --tune's code (numbers meaningless): CPU device, Triton interpreter."""
    import os

    from accel.kernels.ops.softmax import triton_impl

    if not triton_impl.available()[0]:
        pytest.skip(triton_impl.available()[1])
    require_dsl("triton")
    code = textwrap.dedent("""
        import json, torch
        from accel.kernels.bench import tune as bench_tune
        import accel.kernels.ops.softmax.helion_impl as sh
        sh.available = lambda: (False, "off in this test")
        r = bench_tune.tune(ops=("softmax",), dtypes=("fp32",), budget_s=300, device=torch.device("cpu"),
                            shapes=((4, 64),))  # what accel bench --tune --shapes 4x64 passes
        print("REPORT" + json.dumps(r))
    """)
    env = {k: v for k, v in os.environ.items() if k != "HELION_INTERPRET"}
    env.update(TRITON_INTERPRET="1", **{_tuning.TUNING_DIR_ENV: str(cache_dir)})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("REPORT"))[6:])
    assert r["arch"] == "cpu" and [e["op"] for e in r["entries"]] == ["softmax_fwd", "softmax_bwd"]
    for e in r["entries"]:
        assert set(e["us"]) == {"aten", "triton"} and e["impl"] in ("aten", "triton")
        assert e["rounds"] == 3  # medians of the confirmation rounds; a kernel only at >= 1.05x ATen
        assert (e["impl"] == "triton") == (e["us"]["aten"] / e["us"]["triton"] >= 1.05), e
        assert (e["config"] is None) == (e["impl"] == "aten")
        assert set(e["configs"]) == {"triton"}  # every DSL's best config, for the table builder
    written = json.loads((cache_dir / "cpu.json").read_text())["entries"]
    assert len(written) == 2


@pytest.mark.parametrize("vendor,arch", [("cuda", "sm_90"), ("cuda", "sm_107"), ("rocm", "gfx942:sramecc+:xnack-"),
                                         ("rocm", "gfx1100")])
def test_tuning_arch_key_is_the_backend_arch(vendor, arch):
    """The tuning table's arch key and accel.backend().arch() name a device the same way."""
    import torch

    import accel
    from accel.kernels.ops import conds as _conds
    from accel.testing import fake_backend

    with fake_backend(vendor, arch=arch):
        _conds.arch.cache_clear()
        try:
            assert _conds.arch(torch.device("cuda", 0)) == accel.backend().arch()
        finally:
            _conds.arch.cache_clear()


def test_floor_follows_a_table_loaded_after_it(tmp_path, monkeypatch):
    """A user table that appears after the floors were computed (another process ran --tune) lowers
    the floor once its arch's table is loaded (explain/route load it), so cond and route agree."""
    monkeypatch.setenv(_tuning.TUNING_DIR_ENV, str(tmp_path))
    _tuning.reload()
    try:
        assert _tuning.floor("softmax_fwd", "triton") == 1 << 20  # the shipped sm_90 table's declared default
        triton = _tuning.files.installed_dsl_versions()["triton"]
        (tmp_path / "sm_999.json").write_text(json.dumps({"format": 1, "arch": "sm_999", "dsls": {"triton": triton},
                                                          "entries": [{"op": "softmax_fwd", "dtype": "bfloat16",
                                                                       "m": 64, "n": 64, "impl": "triton"}]}))
        assert _tuning.route("softmax_fwd", "triton", "sm_999", "bfloat16", 64, 64) is None  # loads sm_999
        assert _tuning.floor("softmax_fwd", "triton") <= 64 * 64
    finally:
        _tuning.reload()


def test_a_user_table_with_one_bad_entry_is_ignored_as_a_whole(monkeypatch, tmp_path):
    import json

    from accel.errors import KernelFallbackWarning

    monkeypatch.setenv("ACCEL_TUNING_DIR", str(tmp_path))
    good = dict(op="softmax_fwd", dtype="bfloat16", m=4096, n=4096, impl="helion", config={"num_warps": 4})
    (tmp_path / "sm_999.json").write_text(json.dumps({"format": 1, "entries": [good, "oops"]}))
    _tuning.reload()
    try:
        with pytest.warns(KernelFallbackWarning, match="Ignored as a whole"):
            assert _tuning.lookup("softmax_fwd", "sm_999", "bfloat16", 4096, 4096) is None
    finally:
        _tuning.reload()


def test_tuned_config_hit_or_default(monkeypatch):
    """The impls' one lookup: the table's config on a hit; on a miss the default, called with n when callable."""
    from accel.kernels.ops import conds as _conds

    seen = []
    monkeypatch.setattr(_tuning, "config", lambda *a: seen.append(a) or ({"hit": 1} if a[-1] == 64 else None))
    x = torch.empty(3, 64, dtype=torch.bfloat16)
    assert _conds.tuned_config("softmax_fwd", "triton", x, 3, 64, lambda n: {"n": n}) == {"hit": 1}
    assert seen[-1] == ("softmax_fwd", "triton", "cpu", "bfloat16", 3, 64)
    assert _conds.tuned_config("softmax_fwd", "triton", x, 3, 32, lambda n: {"n": n}) == {"n": 32}
    assert _conds.tuned_config("softmax_fwd", "helion", x, 3, 32, {"d": 0}) == {"d": 0}


def test_quack_layer_norm_peer_calls_quacks_kernels_as_their_schema_says():
    """The benchmark's quack LayerNorm peer (quack 0.6.5 has no quack.layernorm: its RMSNorm kernels take
    ``is_layernorm=True``) passes each argument where quack's op schema has it, with an fp32 weight and
    bias, quack's own mean/rstd from a forward first, and sums the per-SM partials."""
    from accel.kernels.ops.layer_norm import bench as layer_norm_bench

    calls = []
    n = 32

    def _rmsnorm_fwd(x, weight, out, bias=None, rstd=None, mean=None, residual=None, residual_out=None, eps=1e-6,
                     is_layernorm=False, weight_offset=0.0):
        calls.append("fwd")
        assert is_layernorm and weight.dtype == bias.dtype == torch.float32 and residual is None
        y, mu, r = torch.ops.aten.native_layer_norm(x, [n], weight, bias, eps)
        out.copy_(y), mean.copy_(mu.view(-1)), rstd.copy_(r.view(-1))

    def _rmsnorm_bwd(x, weight, dout, rstd, dx, dw_partial, db_partial=None, dresidual_out=None, dresidual=None,
                     sm_count=None, mean=None, is_layernorm=False, weight_offset=0.0):
        calls.append("bwd")
        assert is_layernorm and mean is not None and dw_partial.shape == db_partial.shape == (sm_count, n)
        g = torch.ops.aten.native_layer_norm_backward(dout, x, [n], mean.view(-1, 1), rstd.view(-1, 1), weight,
                                                      weight, [True, True, True])
        dx.copy_(g[0])
        dw_partial.zero_()[0] = g[1]
        db_partial.zero_()[0] = g[2]

    x, dy, w, b = torch.randn(6, n), torch.randn(6, n), torch.randn(n), torch.randn(n)
    fwd, bwd = layer_norm_bench.quack_layer_norm((_rmsnorm_fwd, _rmsnorm_bwd), x, w, b, dy)
    got = bwd()
    assert calls == ["fwd", "bwd"]  # the forward first: the backward reads quack's mean and rstd
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, layer_norm_bench.EPS)
    torch.testing.assert_close(got, torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean, rstd, w, b,
                                                                              [True, True, True]))
    torch.testing.assert_close(fwd(), torch.nn.functional.layer_norm(x, (n,), w, b, layer_norm_bench.EPS))


@pytest.mark.parametrize("check, item", [
    ("check_entries", dict(op="layer_norm_bwd", dtype="bfloat16", m=1, n=1, impl="zzzz")),
    ("check_entries", dict(op="layer_norm_bwd", dtype="bfloat16", m=1, n=1, impl="trton")),
    ("check_defaults", dict(op="rms_norm_fwd", dtype="bfloat16", impl="zzzz", min_numel=1, source="s")),
    ("check_defaults", dict(op="rms_norm_fwd", dtype="bfloat16", impl="trton", min_numel=1, source="s")),
])
def test_a_refused_item_is_said_in_sentences_with_one_stop_each(check, item):
    with pytest.raises(KernelRegistrationError) as info:
        getattr(_tuning, check)([item], "sm_90.json")
    text = str(info.value)
    assert "not one of" in text and not re.search(r"(\.\.|\?\.) [A-Z]", text)  # no stop doubled before a sentence
