"""accel.random against hostile inputs: offset state tensors, tensor seeds, non-str snapshot fields, degenerate keys."""

from __future__ import annotations

import io
import random
import subprocess
import sys
import textwrap

import pytest
import torch

import accel.random as ar
from accel.errors import RngSnapshotError, RngStateError, SeedError

np = pytest.importorskip("numpy", reason="these tests check NumPy's stream too; install numpy (the 'test' extra)")



def _all_states():
    return random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()


# -- 1. a state tensor with a storage offset (torch's Generator.set_state crashes on one) ----------------
_OFFSET_SCRIPT = textwrap.dedent(
    """
    import io, sys, torch
    import accel.random as R
    sys.stderr.write("start\\n")
    state = R.get_rng_state("cpu")
    stacked = torch.stack([torch.zeros_like(state), state])
    a = torch.rand(3)
    R.set_rng_state(stacked[1], "cpu")  # a view at storage offset 5056
    assert torch.equal(torch.rand(3), a), "set_rng_state from a view did not reproduce the draws"

    snap = R.snapshot()
    x = torch.rand(4)
    shared = torch.stack([torch.zeros_like(snap["torch_cpu"]), snap["torch_cpu"]])
    snap["torch_cpu"] = shared[1]
    buf = io.BytesIO(); torch.save(snap, buf); buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert loaded["torch_cpu"].storage_offset() != 0, "torch.save/load no longer keeps the offset"
    R.restore(loaded)
    assert torch.equal(torch.rand(4), x), "restore from a view did not reproduce the draws"
    print("survived")
    """
)


def test_state_with_a_storage_offset_does_not_crash():
    # In a subprocess: a regression is a segfault, which must not kill the test run.
    proc = subprocess.run([sys.executable, "-c", _OFFSET_SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "ACCEL_DEVICE": "cpu"})
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.stdout.strip().endswith("survived")


def test_set_state_passes_a_fresh_contiguous_clone(cpu, monkeypatch):
    seen = []
    real = torch.set_rng_state

    def spy(state):
        seen.append(state)
        return real(state)

    monkeypatch.setattr(torch, "set_rng_state", spy)
    state = torch.get_rng_state()
    base = torch.cat([torch.zeros(3, dtype=torch.uint8), state])
    view = base[3:]
    ar.set_rng_state(view, "cpu")
    snap = ar.snapshot()
    snap["torch_cpu"] = view
    ar.restore(snap)
    assert len(seen) == 2
    for got in seen:
        assert got.storage_offset() == 0 and got.is_contiguous()
        assert got.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
        assert torch.equal(got, state)


def test_non_contiguous_state_is_accepted(cpu):
    state = torch.get_rng_state()
    a = torch.rand(3)
    strided = torch.stack([state, torch.zeros_like(state)], dim=1)[:, 0]  # stride 2
    assert not strided.is_contiguous()
    ar.set_rng_state(strided, "cpu")
    assert torch.equal(torch.rand(3), a)


# -- 2. typed errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [torch.tensor([1, 2]), torch.tensor(1.5), torch.tensor(True), torch.tensor([]),
                                 np.array([1, 2])])
def test_tensor_seeds_that_are_not_one_integer_raise_seed_error(cpu, bad):
    before = torch.get_rng_state()
    for fn in (ar.manual_seed, ar.manual_seed_all):
        with pytest.raises(SeedError, match="A seed is an integer"):
            fn(bad)
    with pytest.raises(SeedError, match="A seed is an integer"):
        ar.set_philox_state((bad, 0))
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize("seed", [torch.tensor(7), torch.tensor(7, dtype=torch.int32), np.int64(7)])
def test_zero_dim_integer_tensor_seeds_like_torch(cpu, seed):
    ar.manual_seed(seed)
    a = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(a, torch.rand(3)) and ar.initial_seed("cpu") == 7


def _snap():
    snap = ar.snapshot()
    buf = io.BytesIO()
    torch.save(snap, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


ARRAY = np.array(["a", "b"])


@pytest.mark.parametrize(
    ("path", "match"),
    [
        (["format"], "not an accel RNG snapshot"),
        (["version"], "not a positive int"),
        (["vendor"], "not strings"),
        (["device_type"], "not strings"),
        (["device_count"], "device_count"),
        (["devices"], "devices"),
        (["python", "version"], "version"),
        (["python", "gauss_next"], "gauss_next"),
        (["numpy", "bit_generator"], "bit generator"),
        (["numpy", "pos"], "pos is ndarray"),
        (["numpy", "cached_gaussian"], "cached_gaussian"),
    ],
)
def test_array_valued_snapshot_fields_are_corruption(cpu, path, match):
    snap = _snap()
    part = snap
    for key in path[:-1]:
        part = part[key]
    part[path[-1]] = ARRAY
    before = _all_states()
    with pytest.raises(RngSnapshotError, match=match) as info:
        ar.restore(snap)
    assert "Nothing was restored" in str(info.value)
    assert _all_states() == before


def test_restore_of_a_bare_array_format_names_it(cpu):
    before = _all_states()
    with pytest.raises(RngSnapshotError, match=r"not an accel RNG snapshot \(format: array"):
        ar.restore({"format": ARRAY})
    assert _all_states() == before


@pytest.mark.parametrize("bad", ["ab", b"ab", {"0": torch.get_rng_state()}])
def test_set_rng_state_all_rejects_strings_and_mappings(cpu, bad):
    before = torch.get_rng_state()
    with pytest.raises(RngStateError, match=r"is not a list/tuple of states"):
        ar.set_rng_state_all(bad)
    assert torch.equal(before, torch.get_rng_state())


def test_set_rng_state_all_still_takes_a_tuple(cpu):
    before = torch.get_rng_state()
    ar.set_rng_state_all(())  # no accelerator active: no device states (issue 24 item 3)
    ar.set_rng_state_all(iter([]))
    assert torch.equal(before, torch.get_rng_state())


# -- 3. degenerate (all-zero) MT19937 keys --------------------------------------------------------------------------
def _zero_python(snap):
    internal = snap["python"]["internal"].clone()
    internal[:624] = 0
    snap["python"]["internal"] = internal


def _zero_python_but_low_bits(snap):
    internal = snap["python"]["internal"].clone()
    internal[:624] = 0
    internal[0] = 0x7FFFFFFF  # MT19937 ignores the low 31 bits of the first word: still degenerate
    snap["python"]["internal"] = internal


def _zero_numpy(snap):
    snap["numpy"]["key"] = torch.zeros(624, dtype=torch.int64)


@pytest.mark.parametrize(("mutate", "part"), [(_zero_python, "python"), (_zero_python_but_low_bits, "python"),
                                              (_zero_numpy, "numpy")])
def test_all_zero_mt19937_key_is_corruption(cpu, mutate, part):
    snap = _snap()
    mutate(snap)
    before = _all_states()
    with pytest.raises(RngSnapshotError, match=rf"{part}.*degenerate MT19937 state") as info:
        ar.restore(snap)
    assert "Nothing was restored" in str(info.value)
    assert _all_states() == before
    assert random.random() != random.random()


def test_a_key_with_only_the_top_bit_of_word_0_set_is_valid(cpu):
    # What seeding with init_by_array leaves in word 0; the state is not degenerate.
    snap = _snap()
    internal = snap["python"]["internal"].clone()
    internal[0] = 0x80000000
    internal[1:624] = 0
    snap["python"]["internal"] = internal
    ar.restore(snap)
    assert random.getstate()[1][0] == 0x80000000


def test_a_corrupted_part_is_named_once_in_the_message():
    """The checker's own message already names the part ('torch_cpu: the state has ...'): the restore error
    says it once, with no doubled full stop, and restores nothing."""
    snap = ar.snapshot()
    snap["torch_cpu"] = torch.zeros(3, dtype=torch.uint8)
    before = torch.get_rng_state()
    with pytest.raises(RngSnapshotError) as info:
        ar.restore(snap)
    msg = str(info.value)
    assert "corrupted: torch_cpu: the state has 3 bytes" in msg
    assert "torch_cpu: torch_cpu" not in msg and ".." not in msg
    assert torch.equal(torch.get_rng_state(), before)
