"""One parse for device indices everywhere: ASCII digits, no leading zeros (as torch.device), typed errors."""

from __future__ import annotations

import pytest
import torch

import accel
import accel.distributed as ad
import accel.memory
import accel.quant
from accel import _select
from accel.errors import DeviceIndexError, DistributedError, LocalRankError
from accel.testing import fake_backend

# Each is refused by torch.device too (asserted below), and was accepted or crashed accel before.
NOT_AN_INDEX = r"is not a non-negative integer written in ASCII digits without leading zeros"
BAD_INDICES = ["\u00b2", "\u0663", "01", "00", "+1", "-0", " 1", "1_0", "0x1", "", "\uff11"]


@pytest.mark.parametrize("text", BAD_INDICES)
def test_torch_refuses_these_indices_too(text):
    with pytest.raises((RuntimeError, ValueError)):
        torch.device(f"cpu:{text}")


@pytest.mark.parametrize("text", BAD_INDICES)
def test_accel_device_refuses_them_with_device_index_error(text):
    with pytest.raises(DeviceIndexError, match=NOT_AN_INDEX):
        accel.device(f"cpu:{text}")


@pytest.mark.parametrize("text", BAD_INDICES)
def test_runtime_index_refuses_them_the_same_way(monkeypatch, text):
    monkeypatch.setenv("ACCEL_DEVICE", "cpu")
    accel.clear_cache()
    for call in (accel.synchronize, accel.device_index, accel.memory.allocated):
        with pytest.raises(DeviceIndexError, match=NOT_AN_INDEX):
            call(f"cpu:{text}")


@pytest.mark.parametrize(("text", "index"), [("0", 0), ("7", 7), ("10", 10), ("123", 123)])
def test_parse_index_accepts_plain_ascii_indices(text, index):
    assert _select.parse_index(text, "t") == index
    assert torch.device(f"cpu:{text}").index == index


def test_good_indices_still_work():
    assert accel.device("cpu:0") == torch.device("cpu", 0)
    with fake_backend("cuda", device_count=12):
        assert accel.device("cuda:10") == torch.device("cuda", 10)
        assert accel.device(" CUDA:3 ") == torch.device("cuda", 3)


def test_quant_reads_the_index_from_the_selection():
    # fp8_dtype used to parse "cuda:<index>" itself; an int spec now names its device too.
    with fake_backend("cuda", device_count=2):
        assert accel.quant.fp8_dtype("e4m3", "cuda:1") == torch.float8_e4m3fn
        assert accel.quant.fp8_dtype("e4m3", 1) == torch.float8_e4m3fn
        with pytest.raises(DeviceIndexError, match="is not a non-negative integer written in ASCII digits"):
            accel.quant.fp8_dtype("e4m3", "cuda:01")


@pytest.mark.parametrize("raw", ["\u00b2", "01", "-1", "first", "1.5", ""])
def test_local_rank_env_uses_the_same_parse(monkeypatch, raw):
    monkeypatch.setenv("LOCAL_RANK", raw)
    with pytest.raises(LocalRankError, match=rf"LOCAL_RANK={raw!r} is not a non-negative integer") as info:
        ad.local_rank()
    assert isinstance(info.value, DistributedError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", [1.5, "bogus", -1, True, "1"])
def test_init_process_group_rejects_a_bad_local_rank(monkeypatch, bad):
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    for vendor in ("cpu", "cuda"):
        with fake_backend(vendor, device_count=2):
            with pytest.raises(LocalRankError, match=rf"local_rank={bad!r} \({type(bad).__name__}\) is not a "
                                                     r"non-negative integer"):
                ad.init_process_group(local_rank=bad)
    assert calls == []


def test_init_process_group_takes_a_numpy_integer_local_rank(monkeypatch):
    np = pytest.importorskip("numpy")
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with fake_backend("cpu"):
        assert ad.init_process_group(local_rank=np.int64(0)) == torch.device("cpu")
    assert len(calls) == 1
