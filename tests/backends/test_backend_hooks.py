"""Vendor behaviour answered by the Backend classes: backend_for_device, device_arch, dispatch keys, hooks.

``runtime``, ``memory``, ``graphs`` and ``random`` ask these hooks and hold no vendor branches of their
own; the last test reads their source to keep it so.
"""

from __future__ import annotations

import ast
import inspect
from unittest import mock

import pytest
import torch

import accel
import accel.graphs
import accel.memory
import accel.random
import accel.runtime
from accel import _compat
from accel.backends import BUILTIN, Backend, backend_for_device, dispatch_key_for_device_type
from accel.backends.cpu import CpuBackend
from accel.backends.cuda import CudaBackend
from accel.backends.mps import MpsBackend
from accel.backends.rocm import RocmBackend
from accel.backends.xpu import XpuBackend
from accel.errors import UnknownBackendError
from accel.testing import fake_backend

VENDOR_WORDS = {"cuda", "mps", "xpu", "rocm", "hip", "cpu"}


# -- backend_for_device ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("device_type, cls", [("cpu", CpuBackend), ("xpu", XpuBackend), ("mps", MpsBackend)])
def test_backend_for_device_by_device_type(device_type, cls):
    assert backend_for_device(torch.device(device_type)) is cls
    assert backend_for_device(torch.device(device_type, 0)) is cls


def test_backend_for_device_reads_torch_version_hip_per_call():
    with mock.patch.object(torch.version, "hip", None):
        assert backend_for_device(torch.device("cuda", 0)) is CudaBackend
        with mock.patch.object(torch.version, "hip", "6.4.0"):
            assert backend_for_device(torch.device("cuda", 0)) is RocmBackend
        assert backend_for_device(torch.device("cuda")) is CudaBackend


def test_backend_for_device_initialises_no_device():
    backend_for_device(torch.device("cuda", 0))
    backend_for_device(torch.device("xpu", 0))
    assert not torch.cuda.is_initialized()


def test_backend_for_device_unknown_type_names_the_served_types():
    with pytest.raises(UnknownBackendError, match=r"device type 'meta'.*cpu, cuda, mps, xpu"):
        backend_for_device(torch.device("meta"))


# -- device_arch ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_107", "sm_80"])
def test_cuda_device_arch_from_the_capability(arch):
    with fake_backend("cuda", arch=arch):
        dev = torch.device("cuda", 0)
        assert backend_for_device(dev).device_arch(dev) == arch
        assert CudaBackend.device_arch(dev) == accel.backend().arch(0) == arch


@pytest.mark.parametrize("gcn, arch", [("gfx942:sramecc+:xnack-", "gfx942"), ("gfx950", "gfx950"),
                                       ("gfx1100", "gfx1100")])
def test_rocm_device_arch_from_gcn_arch_name(gcn, arch):
    with fake_backend("rocm", arch=gcn):
        dev = torch.device("cuda", 0)
        assert backend_for_device(dev) is RocmBackend
        assert backend_for_device(dev).device_arch(dev) == arch == accel.backend().arch(0)


@pytest.mark.parametrize("device_type", ["cpu", "mps", "meta"])
def test_other_device_arch_is_the_device_type(device_type):
    dev = torch.device(device_type)
    assert Backend.device_arch(dev) == device_type
    if device_type != "meta":
        assert backend_for_device(dev).device_arch(dev) == device_type


@pytest.mark.parametrize("props, arch", [
    ({"architecture": 0x000000030F000700}, "pvc"), ({"architecture": 0x0000000500400400}, "bmg"),
    ({"architecture": 0x0000000501000400}, "lnl"), ({"architecture": 0x000000030DC00800}, "acm"),
    ({"device_id": 0xE20B}, "bmg"), ({"device_id": 0x0BD5}, "pvc"),
    ({"architecture": 0x0300000000000000, "device_id": 0x1234}, "pvc"),  # unknown ids: the name decides
])
def test_xpu_arch_is_the_intel_family_from_the_device_properties(props, arch):
    """The tuning-table key of an Intel GPU is its family (not just ``xpu``): from the SYCL ``architecture``
    enum, then the PCI ``device_id``, then the device name (the faked one is a Max 1550)."""
    from accel.testing import fake_backend

    with fake_backend("xpu", extra_properties=props):
        dev = torch.device("xpu", 0)
        assert backend_for_device(dev).device_arch(dev) == arch == accel.backend().arch(0)
        from accel.kernels.dsl import launch

        assert launch.arch(dev) == arch


# -- dispatch keys ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device_type, key", [("cuda", "CUDA"), ("cpu", "CPU"), ("xpu", "XPU"), ("mps", "MPS")])
def test_dispatch_key_for_device_type(device_type, key):
    assert dispatch_key_for_device_type(device_type) == key
    assert backend_for_device(torch.device(device_type)).dispatch_key == key


def test_dispatch_key_for_rocm_is_cuda():
    with mock.patch.object(torch.version, "hip", "6.4.0"):
        assert dispatch_key_for_device_type("cuda") == RocmBackend.dispatch_key == "CUDA"


def test_dispatch_key_for_unknown_device_type():
    with pytest.raises(UnknownBackendError, match="device type 'meta'"):
        dispatch_key_for_device_type("meta")


# -- vendor facts on the Backend --------------------------------------------------------------------------------

def test_graph_facts():
    assert CpuBackend.no_graphs_reason.startswith("CPU has no graph capture")
    assert MpsBackend.no_graphs_reason.startswith("MPS has no graph capture")
    for cls in (CudaBackend, RocmBackend, XpuBackend):
        assert cls.no_graphs_reason is None
    assert CudaBackend.vendor_graph_class == RocmBackend.vendor_graph_class == "torch.cuda.CUDAGraph"
    assert XpuBackend.vendor_graph_class == "torch.xpu.XPUGraph"
    assert CudaBackend.graph_capture_error_mode == "global" and XpuBackend.graph_capture_error_mode is None
    assert CpuBackend.graph_class() is None and MpsBackend.graph_class() is None
    assert _compat.graph_pool_functions("cuda") == CudaBackend.graph_pool_functions()


def test_power_units_in_watts():
    assert CudaBackend.power_to_watts == 1e-3  # NVML reports milliwatts
    assert RocmBackend.power_to_watts == XpuBackend.power_to_watts == 1.0


def test_runtime_tables_live_on_the_backends():
    assert CudaBackend.runtime_sources is RocmBackend.runtime_sources
    for device_type in ("cuda", "xpu", "mps"):
        assert _compat.RUNTIME_SOURCES[device_type] is backend_for_device(torch.device(device_type)).runtime_sources
    assert "cpu" not in _compat.RUNTIME_SOURCES and CpuBackend.runtime_sources == {}


def test_events_and_streams():
    assert not CpuBackend.has_events and CpuBackend.host_stream
    for cls in (CudaBackend, RocmBackend, XpuBackend, MpsBackend):
        assert cls.has_events and not cls.host_stream


def test_rng_hooks():
    assert CpuBackend.rng_is_host and not any(b.rng_is_host for b in (CudaBackend, RocmBackend, XpuBackend, MpsBackend))
    assert CpuBackend.default_generator() is torch.default_generator is _compat.default_generator("cpu")
    assert MpsBackend.rng_initial_seed(object()) is None and MpsBackend.rng_current_index(object()) == 0


def test_memory_counters():
    assert CpuBackend.memory_counters()[0] == {} and CpuBackend.memory_counters()[1]() == (0, 0)
    for cls in (CudaBackend, RocmBackend, XpuBackend):
        assert cls.memory_counters() is None  # the caching allocator's statistics


def test_compat_keeps_every_name_of_the_single_module():
    names = ["RUNTIME_SOURCES", "accelerator_has", "accelerator_random", "default_generator", "device_module",
             "event_class", "has_accelerator_graph", "has_accelerator_random", "has_native_dsl_registry",
             "has_xpu_graph", "graph_class", "graph_pool_functions", "module_version", "resolve", "stream_class",
             "c10d_backends", "ck_available", "cutedsl_available", "has_cuda_tunable", "tunable_writer", "has_dtype",
             "has_rdna3_flex_heuristics", "has_scaled_mm", "has_scaled_mm_v2", "has_symmetric_memory",
             "inductor_config_get", "inductor_config_has", "inductor_mode_options", "nvgemm_available",
             "origami_available", "library_get_kernel", "checked_version", "native_dsl_registry",
             "native_dsl_registry_reason", "address_reader", "_lookup", "_find_spec"]
    assert [n for n in names if not hasattr(_compat, n)] == []
    assert set(_compat.__all__) <= set(dir(_compat))
    from accel._compat import checked_version, module_version  # noqa: F401 - the kernels' import

    assert set(BUILTIN) == {"cuda", "rocm", "xpu", "mps", "cpu"}


# -- no vendor branches left in the modules that ask the backend ------------------------------------------------

def _vendor_comparisons(module) -> list[str]:
    """``x == "cuda"``, ``t in ("cuda", "xpu")``, ``{"cuda": ...}.get(t)``-style vendor tables in ``module``."""
    tree = ast.parse(inspect.getsource(module))
    found = []

    def vendor_strings(node: ast.AST) -> set[str]:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {e.value for e in elts if isinstance(e, ast.Constant) and e.value in VENDOR_WORDS}

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if vendor_strings(side):
                    found.append(f"line {node.lineno}: comparison with {sorted(vendor_strings(side))}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in VENDOR_WORDS}
            if keys:
                found.append(f"line {node.lineno}: table keyed by {sorted(keys)}")
    return found


@pytest.mark.parametrize("module", [accel.runtime, accel.memory, accel.graphs, accel.random])
def test_no_vendor_branches(module):
    assert _vendor_comparisons(module) == []
