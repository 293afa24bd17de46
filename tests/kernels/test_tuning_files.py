"""Tuning-table files brought from elsewhere (accel.kernels.tuning.files): a user table made for another arch,
schema or DSL release, or hand-edited into something inconsistent, is refused with one warning naming the file
and why, and never applied; one that fits is applied whichever accel version wrote it."""

from __future__ import annotations

import json
import warnings

import pytest

from accel.errors import KernelFallbackWarning, TuningTableError, TuningTableWarning
from accel.kernels.tuning import files
from accel.kernels.tuning import table as _tuning

pytestmark = pytest.mark.cpu

#: The DSL versions this test pretends are installed (the real ones do not matter to the checks).
HERE = {"triton": "3.6.1", "helion": "1.4.0", "cutedsl": None}
#: An entry the shipped tables do not have, in a bucket of its own: applied only if the user table is.
ENTRY = dict(op="softmax_fwd", dtype="float16", m=64, n=64, impl="triton", config={"num_warps": 2})
LOOKUP = ("softmax_fwd", "sm_90", "float16", 64, 64)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(_tuning.TUNING_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(files, "installed_dsl_versions", lambda: dict(HERE))
    _tuning.reload()
    yield tmp_path
    _tuning.reload()


def fitting(**changes):
    """A user table for sm_90 that fits :data:`HERE`, with ``changes`` to its header."""
    data = {"format": 1, "arch": "sm_90", "dsls": {"triton": "3.6.0"}, "accel": "0.1.0", "entries": [ENTRY]}
    data.update(changes)
    return data


def read_everything(arch: str = "sm_90") -> list[str]:
    """Every way accel reads a table, twice (with a reload between): the TuningTableWarnings said."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            _tuning.table(arch)
            _tuning.defaults(arch)
            _tuning.route(*LOOKUP[:1], "triton", *LOOKUP[1:])
            _tuning.floor("softmax_fwd", "triton")
            _tuning.reload()
    return [str(w.message) for w in seen if issubclass(w.category, TuningTableWarning)]


def write(cache_dir, data, arch="sm_90"):
    path = cache_dir / f"{arch}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


REFUSED = [
    pytest.param(dict(arch="gfx942"), "measured on 'gfx942', read here for sm_90", id="another-arch"),
    pytest.param(dict(arch=None), "does not say which arch", id="no-arch"),
    pytest.param(dict(format=2), "format 2, written by a newer accel", id="newer-schema"),
    pytest.param(dict(format=0), "not a format-1 table", id="older-schema"),
    pytest.param(dict(dsls={"triton": "3.5.0"}), "measured with triton 3.5.0, and triton 3.6.1 is installed",
                 id="dsl-release"),
    pytest.param(dict(dsls={}), "does not say which triton version", id="dsl-unrecorded"),
    pytest.param(dict(dsls={"triton": None}), "measured with no triton installed", id="dsl-absent-then"),
    pytest.param(dict(dsls={"triton": "3.6.0", "cutedsl": "4.8.1"},
                      entries=[ENTRY, dict(ENTRY, op="softmax_bwd", impl="cutedsl", config=None)]),
                 "cutedsl is not installed here", id="dsl-absent-now"),
    pytest.param(dict(entries=[ENTRY, dict(ENTRY, op="rms_norm_hf_fwd", impl="helion")]),
                 "names helion for rms_norm_hf_fwd, but accel has no helion kernel of rms_norm_hf_fwd", id="no-kernel"),
    pytest.param(dict(entries=[ENTRY, dict(ENTRY, impl="cute")]), "has impl 'cute', not one of", id="no-dsl"),
    pytest.param(dict(defaults=[dict(op="softmax_fwd", dtype="float16", impl="triton", min_numel=0, source="me")]),
                 "min_numel=0, not an integer >= 1", id="zero-floor"),
    pytest.param(dict(defaults=[dict(op="softmax_fwd", dtype="float16", impl="triton", min_numel=-5, source="me")]),
                 "min_numel=-5, not an integer >= 1", id="negative-floor"),
    pytest.param(dict(entries=[ENTRY, dict(ENTRY, m=60, impl="aten", config=None)]),
                 "entries 0 and 1 both give softmax_fwd float16 bucket M<=64 x N<=64 but disagree", id="two-winners"),
    pytest.param(dict(defaults=[dict(op="softmax_fwd", dtype="float16", impl="triton", min_numel=m, source="me")
                                for m in (4096, 8192)]), "defaults 0 and 1 both declare", id="two-floors"),
    pytest.param(dict(entries=[dict(ENTRY, us={"aten": 10.0, "triton": 12.5})]),
                 "picks triton, but its own times say triton 12.5 µs against ATen's 10 µs", id="slower-winner"),
]


@pytest.mark.parametrize(("changes", "says"), REFUSED)
def test_a_table_that_does_not_fit_is_refused_once_naming_the_file_and_why(cache_dir, changes, says):
    data = fitting(**changes)
    if data["arch"] is None:
        del data["arch"]
    path = write(cache_dir, data)
    said = read_everything()
    assert len(said) == 1, said
    assert str(path) in said[0] and says in said[0] and "Ignored as a whole" in said[0], said[0]
    with pytest.warns(TuningTableWarning):  # a fresh process would say it again: the said-once memory is per process
        _tuning._SAID.clear()
        assert _tuning.lookup(*LOOKUP) is None  # not applied
    assert all(c.source == "shipped" for c in _tuning.table("sm_90").values())  # the shipped table still routes
    assert ("softmax_fwd", "float16", "triton") not in _tuning.defaults("sm_90") or \
        _tuning.defaults("sm_90")[("softmax_fwd", "float16", "triton")].source == "shipped"
    with pytest.raises(TuningTableError, match="tuning table .*sm_90.json") as info:
        files.check_file(path)  # what accel doctor reports
    assert says in str(info.value)


def test_the_warning_is_a_kernel_fallback_warning_as_before(cache_dir):
    write(cache_dir, fitting(arch="gfx942"))
    with pytest.warns(KernelFallbackWarning, match="Ignored as a whole"):
        _tuning.table("sm_90")


@pytest.mark.parametrize("accel_version", ["0.0.1", "99.0", None])
def test_a_fitting_table_applies_whichever_accel_wrote_it(cache_dir, accel_version):
    data = fitting(accel=accel_version, dsls={"triton": "3.6.0+git9f8e7d6"},  # same release series as 3.6.1
                   defaults=[dict(op="softmax_fwd", dtype="float16", impl="triton", min_numel=4096, source="run 1")])
    if accel_version is None:
        del data["accel"]  # written by an accel that did not record itself
    write(cache_dir, data)
    assert read_everything() == []
    hit = _tuning.lookup(*LOOKUP)
    assert hit is not None and (hit.impl, hit.source, dict(hit.config)) == ("triton", "user", {"num_warps": 2})
    assert _tuning.defaults("sm_90")[("softmax_fwd", "float16", "triton")].min_numel == 4096
    files.check_file(cache_dir / "sm_90.json")


def test_an_aten_only_table_depends_on_no_dsl(cache_dir):
    write(cache_dir, fitting(dsls={}, entries=[dict(ENTRY, impl="aten", config=None)]))
    assert read_everything() == []
    assert _tuning.lookup(*LOOKUP).impl == "aten"


def test_shipped_tables_are_judged_by_schema_and_arch_not_by_dsl_release(monkeypatch):
    """The shipped sm_90 table was measured with triton 3.6: it routes with any installed release."""
    monkeypatch.setattr(files, "installed_dsl_versions", lambda: {"triton": "9.9.0", "helion": None, "cutedsl": None})
    _tuning.reload()
    assert read_everything() == []
    assert _tuning.lookup("rms_norm_fwd", "sm_90", "bfloat16", 4096, 4096).source == "shipped"
    data = json.loads(_tuning.shipped_path("sm_90").read_text())
    assert data["arch"] == "sm_90" and set(data["dsls"]) == {"triton", "helion", "cutedsl"}
    assert files.misfit(data, "sm_90", shipped=True) is None
    assert "measured on 'sm_90', read here for gfx942" in files.misfit(data, "gfx942", shipped=True)


def test_written_tables_say_what_they_were_made_for(cache_dir):
    path = _tuning.write_user_table("sm_90", [ENTRY, dict(ENTRY, op="softmax_bwd", impl="aten", config=None)])
    data = json.loads(path.read_text())
    assert (data["format"], data["arch"], data["dsls"]) == (1, "sm_90", {"triton": "3.6.1"})
    assert data["accel"] == __import__("accel").__version__
    assert _tuning.lookup(*LOOKUP).source == "user"


def test_writing_over_a_table_of_another_dsl_release_keeps_it_aside_and_merges_nothing(cache_dir):
    old = dict(ENTRY, op="softmax_bwd")
    write(cache_dir, fitting(dsls={"triton": "3.5.0"}, entries=[old]))
    with pytest.warns(TuningTableWarning, match=r"does not fit this machine \(it was measured with triton 3.5.0.*"
                                                r"kept as .*sm_90\.json\.unreadable-"):
        _tuning.write_user_table("sm_90", [ENTRY])
    (aside,) = cache_dir.glob("sm_90.json.unreadable-*")
    assert json.loads(aside.read_text())["entries"] == [old]
    assert [e["op"] for e in json.loads((cache_dir / "sm_90.json").read_text())["entries"]] == ["softmax_fwd"]


@pytest.mark.parametrize(("entry", "says"), [
    (dict(ENTRY, op="rope_fwd", impl="cutedsl"), "no cutedsl kernel of rope_fwd (its kernels: triton)"),
    (dict(ENTRY, us={"aten": 1.0, "triton": 2.0}), "its own times say triton 2 µs"),
    (dict(ENTRY, gbs={"aten": 900.0, "triton": 450.0}), "its own bandwidths say triton 450 GB/s"),
])
def test_write_refuses_an_inconsistent_entry(cache_dir, entry, says):
    with pytest.raises(TuningTableError, match="nothing was written") as info:
        _tuning.write_user_table("sm_90", [entry])
    assert says in str(info.value)
    assert not (cache_dir / "sm_90.json").exists()


def test_dsl_series_is_major_minor():
    assert files.dsl_series("3.6.0") == files.dsl_series("3.6.2+gitabc") == "3.6"
    assert files.dsl_series("3.7.0") != files.dsl_series("3.6.0")
    assert files.dsl_series(None) is None and files.dsl_series("nightly") == "nightly"
