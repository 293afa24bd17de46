"""``benchmarks/step_trace.summarise`` on a hand-built Chrome trace: the device's idle gaps, what the host was
doing during each (a sync is flagged), the op that launched the kernel after, and each kernel's launching op."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "step_trace.py"
needs = pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not in this checkout")


def _module():
    spec = importlib.util.spec_from_file_location("step_trace_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _op(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid}


def _launch(corr, ts, tid=1):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2, "tid": tid,
            "args": {"correlation": corr}}


def _kernel(name, corr, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": 7, "args": {"correlation": corr}}


@needs
def test_gaps_are_attributed_to_the_host_op_during_them_and_the_op_launching_the_next_kernel():
    events = [
        _op("step.forward", 0, 100), _op("aten::mm", 1, 5), _launch(1, 2),
        _op("aten::item", 10, 60),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 11, "dur": 58, "tid": 1},
        _op("aten::add", 75, 5), _launch(2, 76),
        _op("step.backward", 200, 100),
        _op("autograd::engine::evaluate_function: MmBackward0", 201, 50), _op("aten::mm", 202, 10), _launch(3, 203),
        _kernel("gemm_a", 1, 5, 20),       # ends at 25
        _kernel("add_kernel", 2, 80, 10),  # 55 us idle before it, the host in a sync
        _kernel("gemm_b", 3, 95, 40),      # 5 us idle
    ]
    s = _module().summarise(events)
    assert s["idle_ms"] == pytest.approx(0.060)
    assert s["device_span_ms"] == pytest.approx(0.130)
    first = s["gaps"][0]
    assert first["ms"] == pytest.approx(0.055)
    assert first["sync"] is True and first["host_during"] == "cudaStreamSynchronize"
    assert first["next_op"] == "aten::add" and first["next_top"] == "step.forward: aten::add"
    assert s["gaps"][1]["next_top"] == "step.backward: MmBackward0"
    assert s["gaps"][1]["sync"] is False
    assert s["idle_by_next_op"] == {"step.forward: aten::add": 0.055, "step.backward: MmBackward0": 0.005}
    by_kernel = {row[0]: row[1:] for row in s["kernels_by_op"]}
    assert by_kernel["gemm_b"] == ["aten::mm", "step.backward: MmBackward0", 0.04]
    assert by_kernel["gemm_a"] == ["aten::mm", "step.forward: aten::mm", 0.02]


@needs
def test_a_long_open_op_names_the_phase_of_a_launch_hundreds_of_ops_later():
    events = [_op("step.optimizer", 0, 5000)]
    events += [_op("aten::view", 1 + i, 1) for i in range(450)]
    events += [_op("aten::_fused_adamw_", 900, 50), _launch(1, 910), _kernel("adam", 1, 920, 30),
               _op("aten::mul", 1000, 5), _launch(2, 1001), _kernel("mul", 2, 1010, 5)]
    s = _module().summarise(events)
    assert s["kernels_by_op"][0] == ["adam", "aten::_fused_adamw_", "step.optimizer: aten::_fused_adamw_", 0.03]
    assert s["gaps"][0]["next_top"] == "step.optimizer: aten::mul"


@needs
def test_backward_kernels_launched_from_the_engines_thread_get_the_callers_phase_and_memcpy_is_a_sync():
    events = [_op("step.backward", 0, 1000, tid=1),
              _op("autograd::engine::evaluate_function: MmBackward0", 10, 50, tid=9), _op("aten::mm", 12, 10, tid=9),
              _launch(1, 14, tid=9), _kernel("gemm", 1, 20, 10),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "ts": 25, "dur": 260, "tid": 1},
              _op("aten::add", 300, 5, tid=1), _launch(2, 301, tid=1), _kernel("add", 2, 310, 5)]
    s = _module().summarise(events)
    assert s["kernels_by_op"][0][2] == "step.backward: MmBackward0"
    assert s["gaps"][0]["sync"] is True and s["gaps"][0]["host_during"] == "cudaMemcpy"


@needs
def test_the_lead_is_the_host_time_before_the_first_launch_with_the_ops_run_by_then():
    """``lead_ms``: from the step's first CPU op to its first kernel's launch; ``lead_ops``: the ops finished by
    then (a nested op counted in its own name and its parent's), not the ones after."""
    events = [
        _op("loss", 0, 200), _op("aten::eq", 3, 20), _op("aten::where", 30, 40), _op("aten::fill_", 32, 10),
        _op("aten::mm", 90, 10), _launch(1, 95), _op("aten::add", 150, 5), _launch(2, 151),
        _kernel("gemm", 1, 100, 30), _kernel("add_kernel", 2, 160, 5),
    ]
    s = _module().summarise(events)
    assert s["lead_ms"] == pytest.approx(0.095)
    assert s["lead_ops"] == {"aten::where": 0.04, "aten::eq": 0.02, "aten::fill_": 0.01}
