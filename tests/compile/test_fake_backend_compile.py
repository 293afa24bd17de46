"""accel.testing's fakes are invisible to torch: every torch function they replace keeps the attributes torch
reads, so ``torch._dynamo`` imported for the first time inside a fake (torch 2.14 reads
``torch.backends.mps.is_available.__wrapped__`` then) works, and ``accel.compile_plan``, ``accel.compile`` and
``torch.compile`` run inside every fake vendor (issue 24, item 1).
"""

import inspect
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from accel.testing import VENDORS, fake_backend, fake_rng

pytestmark = pytest.mark.cpu

#: Every torch function fake_backend may replace (per vendor some are left alone).
REPLACED = [(torch.cuda, n) for n in ("device_count", "is_available", "get_device_properties", "get_device_capability",
                                      "get_device_name", "get_arch_list", "current_device", "get_rng_state",
                                      "set_rng_state", "is_current_stream_capturing")] + \
           [(torch.xpu, n) for n in ("device_count", "is_available", "get_device_properties", "current_device",
                                     "get_rng_state", "set_rng_state")] + \
           [(torch.backends.mps, n) for n in ("is_built", "is_available")]


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_every_replaced_torch_function_keeps_the_attributes_torch_reads(vendor):
    real = {(m.__name__, n): getattr(m, n) for m, n in REPLACED}
    with fake_backend(vendor):
        replaced = [(m, n) for m, n in REPLACED if getattr(m, n) is not real[m.__name__, n]]
        for module, name in replaced:
            fake, orig = getattr(module, name), real[module.__name__, name]
            where = f"{module.__name__}.{name}"
            assert (fake.__name__, fake.__qualname__, fake.__module__, fake.__doc__) == \
                   (orig.__name__, orig.__qualname__, orig.__module__, orig.__doc__), where
            # torch reads fn.__wrapped__ (an lru_cache wrapper's) and unwraps: both reach what they reach unfaked
            assert fake.__wrapped__ is getattr(orig, "__wrapped__", orig), where
            assert inspect.unwrap(fake) is inspect.unwrap(orig), where
            if hasattr(orig, "cache_clear"):
                assert fake.cache_clear == orig.cache_clear and fake.cache_info == orig.cache_info, where
    assert ("torch.backends.mps", "is_available") in {(m.__name__, n) for m, n in replaced}
    assert all(getattr(m, n) is real[m.__name__, n] for m, n in REPLACED)


def test_fake_rng_functions_keep_the_attributes_too():
    real = torch.cuda.get_rng_state
    with fake_backend("cuda"), fake_rng("cuda") as rng:
        assert torch.cuda.get_rng_state.__wrapped__ is real and torch.cuda.get_rng_state.__name__ == real.__name__
        torch.cuda.get_rng_state()
    assert rng.calls == ["torch.cuda.get_rng_state"]


def test_faked_cuda_keeps_a_generator_state_per_device_without_the_gpu():
    """torch.compile saves and restores the CUDA generator's state around each trace once CUDA "is
    available": without a GPU the faked devices keep a state of their own (a real GPU answers itself)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a real CUDA device: the real generators answer")
    with fake_backend("cuda", device_count=2):
        s0 = torch.cuda.get_rng_state()
        assert s0.dtype == torch.uint8 and s0.device.type == "cpu"
        changed = s0.clone()
        changed[8] = 4  # the offset (a multiple of 4)
        torch.cuda.set_rng_state(changed, "cuda:1")
        assert torch.equal(torch.cuda.get_rng_state(1), changed) and torch.equal(torch.cuda.get_rng_state(), s0)
        with pytest.raises(RuntimeError, match="cuda error: invalid device ordinal 2"):
            torch.cuda.get_rng_state(2)
        assert torch.cuda.current_device() == 0 and torch.cuda.is_current_stream_capturing() is False


#: Run in a fresh process per vendor: torch._dynamo must be imported for the first time inside the fake.
SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    import torch
    vendor = sys.argv[1]
    assert "torch._dynamo" not in sys.modules, "imported before the fake: the check would prove nothing"
    import accel
    from accel.testing import fake_backend

    FAKED_TYPE = {"cuda": "cuda", "rocm": "cuda", "xpu": "xpu", "mps": "mps", "cpu": None}[vendor]
    acc = torch.accelerator.current_accelerator()  # the build's accelerator (not faked)
    report = {"cannot_run": None, "inductor_skipped": None, "runs": {}}
    if (FAKED_TYPE is not None and acc is not None and acc.type == FAKED_TYPE and torch.accelerator.device_count() == 0
            and importlib.util.find_spec("torch._dynamo.variables.streams") is not None):
        report["cannot_run"] = (
            f"torch {torch.__version__}'s torch._dynamo reads the current {FAKED_TYPE} stream from the runtime while "
            f"tracing (torch.accelerator.current_stream) once torch.accelerator.is_available(), which follows the "
            f"faked torch.{FAKED_TYPE}.is_available(); this {acc.type} build has no {FAKED_TYPE} device here")
    backends = ["aot_eager", "inductor"]
    if FAKED_TYPE == "cuda":
        backends = ["aot_eager"]
        report["inductor_skipped"] = ("Inductor prepares CUDA code once torch.cuda.is_available() (pattern tables "
                                      "of CUDA tensors, Triton's CUDA driver): it needs the real GPU")
    x = torch.arange(4.0)
    with fake_backend(vendor):
        report["backend"] = accel.backend().name
        plan = accel.compile_plan("max-autotune")
        report["plan"] = [item.key for item in plan]
        report["dynamo_imported_inside"] = "torch._dynamo" in sys.modules
        fns = {}
        for b in backends:
            fns[f"torch.compile[{b}]"] = torch.compile(lambda t: t * 2 + 1, backend=b)
            fns[f"accel.compile[{b}]"] = accel.compile(lambda t: t.sin(), backend=b)
        report["compiled"] = sorted(fns)
        if report["cannot_run"] is None:
            for name, fn in fns.items():
                report["runs"][name] = fn(x).tolist()
    # after the block: torch's own functions are back and torch.compile works as before
    report["after"] = torch.compile(lambda t: t - 1)(x).tolist()
    report["mps_is_available_wrapped"] = callable(torch.backends.mps.is_available.__wrapped__)
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def compiled_inside():
    cache: dict = {}

    def get(vendor):
        if vendor not in cache:
            proc = subprocess.run([sys.executable, "-c", SCRIPT, vendor], capture_output=True, text=True, timeout=600,
                                  check=False)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
            line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT"))
            cache[vendor] = json.loads(line.removeprefix("REPORT"))
        return cache[vendor]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_compile_plan_and_compile_inside_every_fake_vendor_in_a_fresh_process(compiled_inside, vendor):
    report = compiled_inside(vendor)
    assert report["backend"] == vendor and report["dynamo_imported_inside"]
    assert isinstance(report["plan"], list)
    assert {"torch.compile[aot_eager]", "accel.compile[aot_eager]"} <= set(report["compiled"])
    assert report["after"] == [-1.0, 0.0, 1.0, 2.0] and report["mps_is_available_wrapped"]


@pytest.mark.slow
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_compiled_code_runs_inside_every_fake_vendor(compiled_inside, vendor):
    report = compiled_inside(vendor)
    if report["cannot_run"]:
        pytest.skip(report["cannot_run"])
    x = torch.arange(4.0)
    want = {"torch": (x * 2 + 1).tolist(), "accel": x.sin().tolist()}
    assert set(report["runs"]) == set(report["compiled"])
    for name, got in report["runs"].items():
        assert got == pytest.approx(want[name.split(".")[0]]), name
    if vendor in ("cuda", "rocm"):
        assert report["inductor_skipped"] and "torch.compile[inductor]" not in report["runs"]
    else:
        assert {"torch.compile[inductor]", "accel.compile[inductor]"} <= set(report["runs"])
