"""A process that a launcher bound to one GPU: the visible-devices variable names one device, LOCAL_RANK the node's.

Slurm ``--gpus-per-task=1`` and Kubernetes device plugins set ``CUDA_VISIBLE_DEVICES=3`` (or a GPU UUID,
``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``) and leave ``LOCAL_RANK=3``: the process sees one device, so
``LOCAL_RANK`` is not an index here and the device is index 0, with the reason in the selection (and ``accel
info``). Where the variable names several devices, ``LOCAL_RANK`` is the index and one past their count is
refused as before. Faked CUDA and ROCm (``accel.testing``); no process group is started.
"""

from __future__ import annotations

import json

import pytest
import torch

import accel
import accel.distributed as ad
from accel._select import visible_entries
from accel.cli import main
from accel.errors import DeviceIndexError, LocalRankError
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu

VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
UUID = "GPU-8f2c6a8e-3d5b-4c41-9f1e-2b7d6c0a9e13"


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    for var in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", *VISIBLE):
        monkeypatch.delenv(var, raising=False)


BOUND = [("cuda", "CUDA_VISIBLE_DEVICES", "3"), ("cuda", "CUDA_VISIBLE_DEVICES", UUID),
         ("cuda", "CUDA_VISIBLE_DEVICES", "3,-1,4"), ("rocm", "HIP_VISIBLE_DEVICES", "3"),
         ("rocm", "ROCR_VISIBLE_DEVICES", "3"), ("rocm", "CUDA_VISIBLE_DEVICES", "3")]


@pytest.mark.parametrize("vendor,var,value", BOUND)
def test_a_process_bound_to_one_device_gets_index_0_whatever_local_rank_says(monkeypatch, vendor, var, value):
    monkeypatch.setenv(var, value)
    monkeypatch.setenv("LOCAL_RANK", "3")
    with fake_backend(vendor, device_count=1):
        assert accel.device() == torch.device("cuda", 0)
        assert accel.selection().reason.endswith(
            f"; index 0: {var}={value!r} binds this process to one device, so LOCAL_RANK='3' is not an index here")
        monkeypatch.setenv("ACCEL_DEVICE", vendor)  # the backend named, no index: the same rule
        assert accel.device() == torch.device("cuda", 0)
        assert accel.device(f"{vendor}:0") == torch.device("cuda", 0)  # an explicit index is taken as written
        with pytest.raises(DeviceIndexError, match=r"has 1 visible device\(s\)"):
            accel.device(f"{vendor}:3")


def test_accel_info_says_why_local_rank_is_not_the_index(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    with fake_backend("cuda", device_count=1):
        assert main(["info", "--json"]) == 0
        sel = json.loads(capsys.readouterr().out)["selection"]
        assert sel["device"] == "cuda:0"
        assert "CUDA_VISIBLE_DEVICES='3' binds this process to one device, so LOCAL_RANK='3' is not an index" \
               in sel["reason"]
        assert main(["info"]) == 0
    assert "binds this process to one device" in capsys.readouterr().out


def test_init_process_group_binds_device_0_of_a_bound_process(monkeypatch, spy_init):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID)
    monkeypatch.setenv("LOCAL_RANK", "5")
    with fake_backend("cuda", device_count=1):
        assert ad.init_process_group(rank=5, world_size=8) == torch.device("cuda", 0)
    assert spy_init["set_device"] == [0]
    assert spy_init["init"][0]["device_id"] == torch.device("cuda", 0)


@pytest.mark.parametrize("vendor,var", [("cuda", "CUDA_VISIBLE_DEVICES"), ("rocm", "HIP_VISIBLE_DEVICES")])
def test_several_visible_devices_keep_local_rank_as_the_index_and_refuse_one_past_them(monkeypatch, vendor, var):
    monkeypatch.setenv(var, "2,3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with fake_backend(vendor, device_count=2):
        assert accel.device() == torch.device("cuda", 1)
        assert accel.selection().reason.endswith("; index 1 from LOCAL_RANK")
        monkeypatch.setenv("LOCAL_RANK", "3")
        with pytest.raises(DeviceIndexError, match=r"LOCAL_RANK='3' names device 3 of backend '" + vendor
                                                   + r"' \(best available\), which has 2 visible device\(s\)"):
            accel.device()


def test_a_malformed_local_rank_is_still_refused_in_a_bound_process(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("LOCAL_RANK", "03")
    with fake_backend("cuda", device_count=1), pytest.raises(LocalRankError, match="LOCAL_RANK='03' is not a"):
        accel.device()


def test_a_single_device_variable_that_did_not_take_effect_binds_nothing(monkeypatch):
    """More devices visible than the variable names (it was set after the runtime counted them): LOCAL_RANK
    stays the index."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with fake_backend("cuda", device_count=2):
        assert accel.device() == torch.device("cuda", 1)


@pytest.mark.parametrize("value,entries", [("3", ("3",)), (" 3 ", ("3",)), ("0,1", ("0", "1")), ("", ()),
                                           ("-1", ()), ("0,-1,2", ("0",)), ("3,", ("3",)),
                                           (f"{UUID},MIG-1", (UUID, "MIG-1")), ("0.1,1.0", ("0.1", "1.0"))])
def test_visible_entries_reads_the_list_as_the_runtimes_do(value, entries):
    assert visible_entries(value) == entries
