"""Every vendor path with faked torch-level facts: arch, family, capabilities, attributes."""

import pytest
import torch

import accel
from accel.backends import BUILTIN, cuda, rocm, xpu, mps
from accel.testing import fake_backend

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("cc,arch,family", [
    ((8, 0), "sm_80", "Ampere"), ((8, 9), "sm_89", "Ada"), ((9, 0), "sm_90", "Hopper"),
    ((10, 0), "sm_100", "Blackwell"), ((10, 3), "sm_103", "Blackwell"), ((12, 0), "sm_120", "Blackwell"),
    ((10, 7), "sm_107", "Rubin"),
])
def test_cuda_arch_and_family(cc, arch, family):
    with fake_backend("cuda", arch=arch):
        b = accel.backend()
        assert b.name == "cuda" and b.arch() == arch and b.family() == family and b.capability() == cc


@pytest.mark.parametrize("arch,fp8,mx", [("sm_80", None, False), ("sm_89", "ocp", False), ("sm_90", "ocp", False),
                                         ("sm_100", "ocp", True), ("sm_107", "ocp", True), ("sm_120", "ocp", True)])
def test_cuda_capabilities(arch, fp8, mx):
    with fake_backend("cuda", arch=arch):
        caps = accel.backend().capabilities()
    assert caps.fp8 == fp8 and caps.mxfp8 is mx and caps.mxfp4 is mx and caps.nvfp4 is mx
    assert ("float8_e4m3fn" in caps.dtypes) is (fp8 == "ocp")
    assert caps.graph_capture and caps.tunable_op and caps.float64


@pytest.mark.parametrize("arch_list,covered", [
    (["sm_80", "sm_90"], True),
    (["sm_80", "compute_80"], True),   # PTX JIT-compiles forward
    (["sm_80", "sm_86"], False),       # SASS only runs within a major
    (["sm_90a"], True),
    (["sm_100a"], False),
    ([], False),
])
def test_cuda_arch_coverage(arch_list, covered):
    ok, why = cuda.arch_covered(9, 0, arch_list)
    assert ok is covered
    if not ok:
        assert "sm_90 is not in this torch build's arch list" in why and "install a torch build" in why


def test_cuda_arch_supported_flags_unsupported_gpu():
    with fake_backend("cuda", arch="sm_107", arch_list=["sm_80", "sm_90", "compute_90"]):
        ok, why = accel.backend().arch_supported()
    assert ok and "PTX compute_90" in why
    with fake_backend("cuda", arch="sm_107", arch_list=["sm_80", "sm_90"]):
        ok, _ = accel.backend().arch_supported()
    assert not ok


@pytest.mark.parametrize("gcn,arch,family,fp8,mx", [
    ("gfx90a:sramecc+:xnack-", "gfx90a", "CDNA2", None, False),
    ("gfx942:sramecc+:xnack-", "gfx942", "CDNA3", "fnuz", False),
    ("gfx950", "gfx950", "CDNA4", "ocp", True),
    ("gfx1100", "gfx1100", "RDNA3", None, False),
    ("gfx1201", "gfx1201", "RDNA4", "ocp", False),
])
def test_rocm_arch_family_fp8(gcn, arch, family, fp8, mx):
    with fake_backend("rocm", arch=gcn, device_count=8):
        b = accel.backend()
        caps = b.capabilities(7)
        assert (b.name, b.arch(), b.family()) == ("rocm", arch, family)
        assert not b.arch().startswith("sm_")
    assert caps.fp8 == fp8 and caps.mxfp8 is mx and not caps.nvfp4
    if fp8 == "fnuz":
        assert "float8_e4m3fnuz" in caps.dtypes and "float8_e4m3fn" not in caps.dtypes


def test_rocm_arch_supported():
    with fake_backend("rocm", arch="gfx1100", arch_list=["gfx942", "gfx90a"]):
        ok, why = accel.backend().arch_supported()
    assert not ok and "gfx1100 is not in this torch build's arch list" in why


@pytest.mark.parametrize("name,family", [("Intel(R) Data Center GPU Max 1550", "pvc"),
                                         ("Intel(R) Arc(TM) B580 Graphics", "bmg"),
                                         ("Intel(R) Arc(TM) A770 Graphics", "acm"), ("Something", "xpu")])
def test_xpu_family(name, family):
    with fake_backend("xpu", device_name=name):
        assert accel.backend().arch() == family
        assert accel.backend().device_name() == name


def test_xpu_without_fp64():
    with fake_backend("xpu", extra_properties={"has_fp64": False}):
        caps = accel.backend().capabilities()
    assert not caps.float64 and "float64" not in caps.dtypes


def test_mps_has_no_float64_and_no_graphs():
    with fake_backend("mps", device_name="Apple M3 Max"):
        b = accel.backend()
        caps = b.capabilities()
        assert b.arch() == "apple-m3"
    assert not caps.float64 and "float64" not in caps.dtypes and not caps.graph_capture
    assert mps.apple_family("Apple M4 Pro") == "apple-m4" and mps.apple_family("Intel") == "apple"


def test_vendor_attributes():
    rows = {n: (c.vendor, c.torch_device_type, c.dispatch_key, c.distributed_backend) for n, c in BUILTIN.items()}
    assert rows == {
        "cuda": ("NVIDIA", "cuda", "CUDA", "nccl"),
        "rocm": ("AMD", "cuda", "CUDA", "nccl"),
        "xpu": ("Intel", "xpu", "XPU", "xccl"),
        "mps": ("Apple", "mps", "MPS", "gloo"),
        "cpu": ("CPU", "cpu", "CPU", "gloo"),
    }
    assert BUILTIN["cuda"].visible_devices_env == ("CUDA_VISIBLE_DEVICES",)
    assert "HIP_VISIBLE_DEVICES" in BUILTIN["rocm"].visible_devices_env
    assert BUILTIN["xpu"].visible_devices_env == ("ZE_AFFINITY_MASK",)


def test_probe_reasons_for_missing_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with fake_backend("cuda", device_count=0):
        p = accel.probes()["cuda"]
    assert not p.available and "no device visible (device_count()=0; CUDA_VISIBLE_DEVICES=''" in p.reason


def test_probe_never_raises():
    from unittest import mock

    def boom():
        raise RuntimeError("driver exploded")

    # the inner patch must be undone before fake_backend restores the real function
    with fake_backend("cuda"), mock.patch("torch.cuda.device_count", boom):
        accel.clear_cache()
        p = accel.probes()["cuda"]
    assert not p.available and "probe failed: RuntimeError: driver exploded" in p.reason


def test_fake_backend_rejects_unknown_vendor_and_bad_arch():
    with pytest.raises(ValueError, match="unknown vendor 'tpu'"):
        with fake_backend("tpu"):
            pass
    with pytest.raises(ValueError, match="is not of the form 'sm_<major><minor>'"):
        with fake_backend("cuda", arch="hopper"):
            pass


def test_entry_point_backends_are_loaded(monkeypatch):
    from accel import backends
    from accel.backends import Backend, Capabilities

    class TpuBackend(Backend):
        name, vendor, torch_device_type, dispatch_key, priority = "faketpu", "Fake", "cpu", "CPU", 5

        @classmethod
        def _unavailable_reason(cls):
            return None

        @classmethod
        def _device_count(cls):
            return 2

        def arch(self, index=0, /):
            return "v9"

        def capabilities(self, index=0, /):
            return Capabilities(dtypes=("float32",))

    class EP:
        name, value = "faketpu", "x:TpuBackend"

        def load(self):
            return TpuBackend

    class Broken:
        name, value = "broken", "nowhere:Nothing"

        def load(self):
            raise ImportError("no module named nowhere")

    monkeypatch.setattr(backends, "entry_points", lambda group: [EP(), Broken()])
    accel.clear_cache()
    with pytest.warns(UserWarning, match="'broken'"):
        names = list(accel.probes())
    assert "faketpu" in names and names[-1] == "cpu"
    assert accel.backend("faketpu:1").arch() == "v9"
    monkeypatch.undo()
    accel.clear_cache()
    assert "faketpu" not in accel.probes()


def test_capabilities_as_dict_is_json_ready():
    import json

    with fake_backend("rocm"):
        d = accel.backend().capabilities().as_dict()
    assert json.loads(json.dumps(d))["fp8"] == "fnuz"


def test_module_helpers():
    assert rocm.gfx_arch("gfx942:sramecc+:xnack-") == "gfx942"
    assert xpu.xpu_family("Intel(R) Data Center GPU Max 1100") == "pvc"


@pytest.mark.slow
def test_cpu_flex_attention_flag_means_it_compiles_here():
    """The CPU backend says ``flex_attention=True``: torch.compile(flex_attention) must run on CPU tensors
    and agree with eager scaled_dot_product_attention (about 15 s of Inductor compile)."""
    from accel.backends import registered
    from torch.nn.attention.flex_attention import flex_attention

    assert registered()["cpu"]().capabilities().flex_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 128, 16) for _ in range(3))
    out = torch.compile(flex_attention)(q, k, v)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=2e-5, rtol=2e-5)
