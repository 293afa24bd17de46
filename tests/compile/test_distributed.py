"""accel.distributed: backend per vendor, device binding, and a real 2-process all-reduce over gloo."""

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import accel
import accel.distributed as ad
from accel import _compat
from accel.errors import DistributedError
from accel.testing import fake_backend


@pytest.mark.parametrize("vendor,want", [("cuda", "nccl"), ("rocm", "nccl"), ("xpu", "xccl"), ("mps", "gloo"),
                                         ("cpu", "gloo")])
def test_backend_per_vendor(monkeypatch, vendor, want):
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(dist, "is_xccl_available", lambda: True, raising=False)
    with fake_backend(vendor):
        assert ad.backend_name() == want


def test_newer_backend_only_where_registered(monkeypatch):
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    with fake_backend("cuda"):
        assert ad.backend_name() == "nccl"
        monkeypatch.setattr(_compat, "c10d_backends", lambda: ("gloo", "nccl", "nccl2"))
        assert ad.backend_name() == "nccl2"
    with fake_backend("rocm"):  # RCCL has no newer name
        assert ad.backend_name() == "nccl"


def test_missing_vendor_backend_is_a_typed_error(monkeypatch):
    monkeypatch.setattr(_compat, "c10d_backends", lambda: ("gloo", "nccl"))
    with fake_backend("xpu"), pytest.raises(DistributedError, match="does not register c10d backend 'xccl'"):
        ad.backend_name()
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    with fake_backend("cuda"), pytest.raises(DistributedError, match="built without it"):
        ad.backend_name()
    monkeypatch.setattr(dist, "is_available", lambda: False)
    with pytest.raises(DistributedError, match="without distributed support"):
        ad.backend_name("cpu")


def test_symmetric_memory_available_per_vendor():
    with fake_backend("cuda", arch="sm_90"):
        assert ad.symmetric_memory_available() is _compat.has_symmetric_memory()
    with fake_backend("cuda", arch="sm_80"):
        assert ad.symmetric_memory_available() is False
    with fake_backend("rocm", arch="gfx942"):
        assert ad.symmetric_memory_available() is _compat.has_symmetric_memory()
    with fake_backend("rocm", arch="gfx1100"):
        assert ad.symmetric_memory_available() is False
    assert ad.symmetric_memory_available("cpu") is False


def test_init_binds_rank_to_its_device(monkeypatch, spy_init):
    monkeypatch.setenv("LOCAL_RANK", "1")
    with fake_backend("cuda", device_count=2):
        dev = ad.init_process_group(rank=1, world_size=2, init_method="env://")
    assert dev == torch.device("cuda", 1)
    assert spy_init["set_device"] == [1]
    (kw,) = spy_init["init"]
    assert kw["backend"] == "nccl" and kw["device_id"] == torch.device("cuda", 1) and kw["rank"] == 1


def test_init_on_cpu_passes_no_device_id(spy_init):
    with fake_backend("cpu"):
        assert ad.init_process_group(rank=0, world_size=1) == torch.device("cpu")
    assert "device_id" not in spy_init["init"][0] and spy_init["init"][0]["backend"] == "gloo"
    assert spy_init["set_device"] == []


def test_init_bad_input_changes_nothing(monkeypatch, spy_init):
    with fake_backend("cuda", device_count=2):
        with pytest.raises(DistributedError, match="local rank 2 has no device: 2 cuda device"):
            ad.init_process_group(local_rank=2)
        with pytest.raises(DistributedError, match="backend 'mpi' is not usable"):
            ad.init_process_group("mpi")
        monkeypatch.setenv("LOCAL_RANK", "first")
        with pytest.raises(DistributedError, match="LOCAL_RANK='first'"):
            ad.init_process_group()
        with pytest.raises(DistributedError, match="LOCAL_RANK='first'"):
            ad.local_rank()
    assert spy_init == {"init": [], "set_device": []}
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda: "gloo")
    with pytest.raises(DistributedError, match="already initialised"):
        ad.init_process_group("gloo")


def _worker(rank, world_size, init_file, out_dir):
    os.environ["ACCEL_DEVICE"] = "cpu"
    import datetime

    import torch
    import torch.distributed as dist

    import accel.distributed as ad

    device = ad.init_process_group(rank=rank, world_size=world_size, init_method=f"file://{init_file}",
                                   timeout=datetime.timedelta(seconds=30))
    try:
        t = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(t)
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
            f.write(f"{dist.get_backend()} {t.tolist()}")
    finally:
        dist.destroy_process_group()


def test_two_cpu_processes_all_reduce_over_gloo(tmp_path):
    ctx = mp.start_processes(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("2-process gloo all-reduce did not finish within 120 s")
    for rank in range(2):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "gloo [3.0, 3.0, 3.0, 3.0]"


def test_module_is_exported():
    assert accel.distributed is ad
