"""Issue 24 fuzzing: ``accel.random.restore()`` of corrupted snapshots (hypothesis, bounded CI profile).

Property: whatever is done to a snapshot (a key dropped, a value replaced by junk of any type, a tensor
of another dtype, shape or size, a word out of range, a Python/NumPy part shuffled), ``restore`` either
restores it or raises one of accel's typed snapshot errors, and when it raises, no stream changed.
Never another exception type (``KeyError``, ``TypeError``, ``OverflowError``, ...).

The findings became the regression tests at the bottom.
"""

from __future__ import annotations

import copy
import os
import random
import warnings

import pytest
import torch

import accel.random as ar
from accel.errors import RngRestoreError, RngSnapshotError
from accel.testing import fake_backend, fake_rng

np = pytest.importorskip("numpy")
hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

#: CI profile: a few seconds. ACCEL_FUZZ_EXAMPLES=20000 for an offline hour's worth.
EXAMPLES = int(os.environ.get("ACCEL_FUZZ_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

TYPED = (RngSnapshotError, RngRestoreError)

junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([float("nan"), float("inf"), -float("inf")]),
    st.text(max_size=8), st.binary(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=2**33), max_size=5), st.dictionaries(st.text(max_size=3), st.none(), max_size=2),
    st.sampled_from([torch.zeros(0), torch.zeros(3, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8),
                     torch.zeros(625, dtype=torch.int64), torch.full((625,), 2**40, dtype=torch.int64),
                     torch.zeros(5056, dtype=torch.uint8), torch.ones(2, 2), torch.zeros(624, dtype=torch.int32),
                     float("nan"), object()]),
)

PATHS = [(), ("version",), ("format",), ("vendor",), ("device_type",), ("device_count",), ("torch_cpu",),
         ("devices",), ("devices", 0), ("devices", 1), ("python",), ("python", "version"), ("python", "internal"),
         ("python", "gauss_next"), ("numpy",), ("numpy", "key"), ("numpy", "pos"), ("numpy", "has_gauss"),
         ("numpy", "cached_gaussian"), ("numpy", "bit_generator")]


def _states(rng):
    return (torch.get_rng_state().tolist(), [g.get_state().tolist() for g in rng.generators], random.getstate(),
            repr(np.random.get_state()))


def _mutate(snap, path, action, value):
    """``snap`` with one change at ``path`` (a path that no longer leads anywhere changes nothing)."""
    if not path:
        return value if action == "replace" else snap
    parent = snap
    for part in path[:-1]:
        if (isinstance(parent, dict) and part in parent) or (
                isinstance(parent, list) and isinstance(part, int) and part < len(parent)):
            parent = parent[part]
        else:
            return snap
    key = path[-1]
    if isinstance(parent, list):
        if not isinstance(key, int) or key >= len(parent):
            return snap
    elif not isinstance(parent, dict) or (action != "replace" and key not in parent):
        return snap
    if action == "drop":
        del parent[key]
    elif action == "replace":
        parent[key] = value
    elif action == "flip" and isinstance(parent[key], torch.Tensor) and parent[key].numel():
        t = parent[key].clone()
        if t.dtype in (torch.uint8, torch.int64, torch.int32):
            flat = t.view(-1)
            flat[hash(repr(value)) % flat.numel()] ^= 1
        parent[key] = t
    elif action == "retype" and isinstance(parent[key], torch.Tensor):
        parent[key] = parent[key].to(torch.float32)
    return snap


@SETTINGS
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["drop", "replace", "flip", "retype"]),
                                    junk), min_size=1, max_size=3), strict=st.booleans())
def test_restore_of_a_corrupted_snapshot_is_typed_and_atomic(mutations, strict):
    with fake_backend("xpu", device_count=2), fake_rng("xpu", device_count=2) as rng:
        snap = ar.snapshot()
        for path, action, value in mutations:
            snap = _mutate(snap, path, action, value)
        random.random(), np.random.rand(), torch.rand(1), rng.draw(0, 1)
        before = _states(rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # restore's RngRestoreWarning for skipped parts
            try:
                ar.restore(copy.copy(snap), strict=strict)
            except TYPED as exc:
                if not isinstance(exc, RngRestoreError) or "Nothing was restored" in str(exc):
                    assert _states(rng) == before, f"{type(exc).__name__} changed state: {exc}"
                return
            except Exception as exc:  # noqa: BLE001 - the property: no other exception type
                pytest.fail(f"restore raised {type(exc).__name__}: {exc} (mutations {mutations})")
        # what was restored draws like a generator: finite Gaussians (a cached Gaussian of NaN/inf would not)
        assert np.isfinite(random.gauss(0.0, 1.0)) and np.isfinite(np.random.standard_normal()), mutations


# -- findings, kept as regression tests ---------------------------------------------------------------------------
def _snap():
    return ar.snapshot()


@pytest.mark.parametrize("value", [2**64, -1, 2**40, 10**30])
def test_finding_out_of_range_device_count_is_typed(cpu, value):
    snap = _snap()
    snap["device_count"] = value
    with pytest.raises(RngSnapshotError, match="devices"):
        ar.restore(snap)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e308])
def test_finding_non_finite_gauss_next_is_refused(cpu, bad):
    """Python's random.setstate accepts gauss_next=nan/inf; random.gauss() then returns nan forever."""
    snap = _snap()
    snap["python"]["gauss_next"] = bad
    if bad == 1e308:
        ar.restore(snap)  # a finite float is a possible cached Gaussian
        return
    with pytest.raises(RngSnapshotError, match="gauss_next"):
        ar.restore(snap)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_finding_non_finite_numpy_cached_gaussian_is_refused(cpu, bad):
    snap = _snap()
    snap["numpy"]["cached_gaussian"] = bad
    snap["numpy"]["has_gauss"] = 1
    with pytest.raises(RngSnapshotError, match="cached_gaussian"):
        ar.restore(snap)
