"""The device of a rank (accel.device() and LOCAL_RANK), the launcher's variables, and the backend-fits-device check.

accel.device(): the argument as written, else ACCEL_DEVICE (its index wins), else LOCAL_RANK as the index on
CUDA, ROCm and XPU (faked with 2 devices), else no index (the current device). The CPU and MPS share one
device between processes and never read LOCAL_RANK. No process group is started here.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import accel
import accel.distributed as ad
from accel.errors import DeviceIndexError, DistributedError, LocalRankError
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu

GPUS = [("cuda", "cuda"), ("rocm", "cuda"), ("xpu", "xpu")]


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    for var in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("vendor,kind", GPUS)
def test_local_rank_is_the_index_on_a_faked_two_gpu_machine(monkeypatch, vendor, kind):
    with fake_backend(vendor, device_count=2):
        assert accel.device() == torch.device(kind)  # no LOCAL_RANK: the current device
        monkeypatch.setenv("LOCAL_RANK", "1")
        assert accel.device() == torch.device(kind, 1)  # the cache follows LOCAL_RANK without clear_cache
        assert accel.selection().reason.endswith("; index 1 from LOCAL_RANK")
        monkeypatch.setenv("LOCAL_RANK", "0")
        assert accel.device() == torch.device(kind, 0)


@pytest.mark.parametrize("vendor,kind", GPUS)
def test_accel_device_index_wins_and_an_argument_is_taken_as_written(monkeypatch, vendor, kind):
    monkeypatch.setenv("LOCAL_RANK", "1")
    with fake_backend(vendor, device_count=2):
        monkeypatch.setenv("ACCEL_DEVICE", f"{vendor}:0")
        assert accel.device() == torch.device(kind, 0)  # ACCEL_DEVICE's own index beats LOCAL_RANK
        monkeypatch.setenv("ACCEL_DEVICE", vendor)
        assert accel.device() == torch.device(kind, 1)  # no index there: LOCAL_RANK's
        assert accel.selection().source == "ACCEL_DEVICE"
        assert accel.device(vendor) == torch.device(kind)  # an explicit argument: as written (current device)
        assert accel.device(0) == torch.device(kind, 0)
        assert accel.device(f"{vendor}:1") == torch.device(kind, 1)
        monkeypatch.setenv("ACCEL_DEVICE", "cpu")
        assert accel.device() == torch.device("cpu")  # the CPU has no per-rank index


@pytest.mark.parametrize("vendor,kind", [("cpu", "cpu"), ("mps", "mps")])
def test_shared_devices_never_read_local_rank(monkeypatch, vendor, kind):
    monkeypatch.setenv("LOCAL_RANK", "not a rank")  # not even parsed
    with fake_backend(vendor, device_count=1):
        assert accel.device() == torch.device(kind)
        monkeypatch.setenv("LOCAL_RANK", "5")
        assert accel.device() == torch.device(kind)


def test_local_rank_out_of_range_or_malformed_is_a_typed_error(monkeypatch):
    with fake_backend("cuda", device_count=2):
        monkeypatch.setenv("LOCAL_RANK", "2")
        with pytest.raises(DeviceIndexError, match=r"LOCAL_RANK='2' names device 2 of backend 'cuda' \(best "
                                                   r"available\), which has 2 visible device\(s\), so valid indices "
                                                   r"are 0..1. Start at most one process per visible device "
                                                   r"\(torchrun --nproc-per-node=2\)"):
            accel.device()
        assert accel.backend().name == "cuda"  # the vendor does not depend on the rank's index
        assert accel.device("cuda:1") == torch.device("cuda", 1)  # nor does an explicit device
        monkeypatch.setenv("LOCAL_RANK", "01")
        with pytest.raises(LocalRankError, match=r"LOCAL_RANK='01' is not a non-negative integer"):
            accel.device()


def test_init_process_group_binds_the_same_index_as_accel_device(monkeypatch, spy_init):
    calls = spy_init
    monkeypatch.setenv("LOCAL_RANK", "1")
    with fake_backend("cuda", device_count=2):
        assert ad.init_process_group(rank=1, world_size=2) == torch.device("cuda", 1) == accel.device()
        monkeypatch.setenv("ACCEL_DEVICE", "cuda:0")
        assert ad.init_process_group(rank=1, world_size=2) == torch.device("cuda", 0) == accel.device()
        assert ad.init_process_group(rank=1, world_size=2, local_rank=1) == torch.device("cuda", 1)
        monkeypatch.delenv("ACCEL_DEVICE")
        monkeypatch.setenv("LOCAL_RANK", "2")
        with pytest.raises(DistributedError, match="init_process_group: accel.device: LOCAL_RANK='2' names device 2"):
            ad.init_process_group(rank=2, world_size=3)
    assert calls["set_device"] == [1, 0, 1]
    assert [kw["device_id"] for kw in calls["init"]] == [torch.device("cuda", i) for i in (1, 0, 1)]


def test_nccl_with_cpu_tensors_is_refused_before_any_collective(monkeypatch):
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr("accel._compat.c10d_backends", lambda: ("gloo", "nccl", "xccl"))
    monkeypatch.setattr(dist, "is_xccl_available", lambda: True, raising=False)
    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.append(kw))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with fake_backend("cpu"):
        with pytest.raises(DistributedError, match=r"c10d backend 'nccl' runs collectives on cuda tensors only, and "
                                                   r"these tensors are on cpu. Use the backend for cpu \('gloo'"):
            ad.init_process_group("nccl", rank=0, world_size=1)
        assert calls == []  # nothing was initialised
        assert ad.check_backend("cpu", backend="gloo") == "gloo"
        model = torch.nn.Linear(2, 2)
        with pytest.raises(DistributedError, match="'nccl' runs collectives on cuda tensors only"):
            ad.check_backend(model, backend="nccl")
        with pytest.raises(DistributedError, match="'xccl' runs collectives on xpu tensors only"):
            ad.check_backend(torch.zeros(1), backend="xccl")
        assert ad.check_backend(model, backend="cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"
        with pytest.raises(DistributedError, match="'cuda:nccl' names no backend for cpu tensors"):
            ad.check_backend(model, backend="cuda:nccl")
        assert ad.check_backend(model, backend="ucc") == "ucc"  # a backend no vendor names is not judged
    with fake_backend("cuda", device_count=2):
        assert ad.check_backend("cuda:1") == "nccl"
        assert ad.check_backend(torch.device("cuda", 0), backend="gloo") == "gloo"  # gloo stages CUDA tensors


def test_check_backend_reads_the_initialised_group(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    with fake_backend("cpu"), pytest.raises(DistributedError, match="'nccl' runs collectives on cuda tensors only"):
        ad.check_backend(torch.zeros(1))


def test_launch_env_reads_torchrun(monkeypatch):
    launch = ad.launch_env()
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size, launch.launched) == \
        (0, 1, 0, 1, False)
    for var, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(var, value)
    assert ad.launch_env() == ad.Launch(rank=3, world_size=4, local_rank=1, local_world_size=2, master_addr="node0",
                                        master_port=29500, launched=True)


@pytest.mark.parametrize("env,match", [
    ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a positive integer"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is not a non-negative integer"),
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}, "LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"),
    ({"MASTER_PORT": "99999"}, r"MASTER_PORT='99999' is not a TCP port \(1 .. 65535\)"),
])
def test_launch_env_refuses_inconsistent_variables(monkeypatch, env, match):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(DistributedError, match=match):
        ad.launch_env()


def test_launch_env_local_rank_error_is_the_local_rank_one(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "first")
    with pytest.raises(LocalRankError, match="LOCAL_RANK='first' is not a non-negative integer"):
        ad.launch_env()
