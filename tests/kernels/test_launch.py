"""accel.kernels._triton_utils.triton_launch: direct launches of compiled Triton kernels, keyed like Triton's cache.

The key logic runs here with a fake ``@triton.jit`` function (it records whether a
call went through Triton or straight to the compiled launcher); the real launches run
in the ``cuda`` tests (tests/kernels/test_cuda.py) on the GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from accel.testing.pytest_plugin import importorskip_dsl

importorskip_dsl("triton")  # a skip naming the error also when triton is installed but does not import

from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils  # noqa: E402


class _FakeCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA (the launcher only reads is_cuda, dtype and data_ptr)."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def _cuda(t: torch.Tensor) -> torch.Tensor:
    return torch.Tensor._make_subclass(_FakeCuda, t)


class _Compiled:
    function = "fn-handle"
    packed_metadata = ("meta",)

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def run(self, *a):
        self.calls.append(("direct", a))


class _Param:
    def __init__(self, name: str) -> None:
        self.name, self.is_constexpr = name, name.isupper() and len(name) > 1


class _FakeJit:
    arg_names = ["X", "Y", "M", "N", "eps", "BLOCK_N", "ROWS"]
    params = [_Param(n) for n in arg_names]  # BLOCK_N and ROWS are constexprs

    def __init__(self) -> None:
        self.calls: list = []
        self.compiled = _Compiled(self.calls)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append(("triton", grid, args, kwargs))
            return self.compiled
        return launch


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(_triton_utils, "fast_launch_supported", lambda: (True, "test"))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    monkeypatch.setattr(_triton_utils, "_FAST", {})
    return _FakeJit()


def _kinds(fn) -> list[str]:
    return [c[0] for c in fn.calls]


def test_first_call_compiles_through_triton_then_launches_directly(fast):
    x, y = _cuda(torch.zeros(64, 128, dtype=torch.bfloat16)), _cuda(torch.zeros(64, 128, dtype=torch.bfloat16))
    for _ in range(3):
        _triton_utils.triton_launch(fast, (32,), x, y, 64, 128, 1e-5, BLOCK_N=128, ROWS=2, num_warps=4)
    assert _kinds(fast) == ["triton", "direct", "direct"]
    assert fast.calls[0] == ("triton", (32,), (x, y, 64, 128, 1e-5), {"BLOCK_N": 128, "ROWS": 2, "num_warps": 4})
    # Triton's launcher convention: grid x/y/z, raw stream, function, metadata, launch metadata,
    # enter/exit hooks, then every argument in signature order (constexprs last).
    assert fast.calls[1][1] == (32, 1, 1, 1234, "fn-handle", ("meta",), None, None, None, x, y, 64, 128, 1e-5, 128, 2)


@pytest.mark.parametrize("change", ["m_is_1", "m_not_div16", "m_int64", "misaligned", "dtype", "constexpr", "warps"])
def test_anything_triton_specializes_on_gives_a_new_compile(fast, change):
    base = torch.zeros(65, 128, dtype=torch.bfloat16)
    x, y = _cuda(base[:64]), _cuda(torch.zeros(64, 128, dtype=torch.bfloat16))
    args, kw = [x, y, 64, 128, 1e-5], {"BLOCK_N": 128, "ROWS": 2, "num_warps": 4}
    _triton_utils.triton_launch(fast, (32,), *args, **kw)
    if change == "m_is_1":
        args[2] = 1
    elif change == "m_not_div16":
        args[2] = 65
    elif change == "m_int64":
        args[2] = 1 << 32
    elif change == "misaligned":
        args[0] = _cuda(base.view(-1)[1:8193].view(64, 128))  # 2-byte offset: not 16-byte aligned
    elif change == "dtype":
        args[0] = _cuda(torch.zeros(64, 128, dtype=torch.float16))
    elif change == "constexpr":
        kw["ROWS"] = 4
    elif change == "warps":
        kw["num_warps"] = 8
    _triton_utils.triton_launch(fast, (32,), *args, **kw)
    assert _kinds(fast) == ["triton", "triton"]
    _triton_utils.triton_launch(fast, (32,), *args, **kw)
    assert _kinds(fast) == ["triton", "triton", "direct"]


def test_a_launch_hook_sends_every_call_through_triton(fast, monkeypatch):
    from triton import knobs

    x = _cuda(torch.zeros(16, 16))
    _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    hook = knobs.runtime.launch_enter_hook
    if hook is None:  # triton <= 3.6: a callable or None
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    else:  # triton 3.7+: a HookChain
        monkeypatch.setattr(hook, "calls", [lambda *a: None])
    _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    assert _kinds(fast) == ["triton", "triton"]


def test_cpu_tensors_and_unsupported_triton_use_triton_every_time(fast, monkeypatch):
    x = torch.zeros(16, 16)  # not CUDA: interpreter runs
    for _ in range(2):
        _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    monkeypatch.setattr(_triton_utils, "fast_launch_supported", lambda: (False, "no"))
    xc = _cuda(torch.zeros(16, 16))
    for _ in range(2):
        _triton_utils.triton_launch(fast, (1,), xc, xc, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    assert _kinds(fast) == ["triton"] * 4


def test_fast_launch_supported_says_why_not(monkeypatch):
    _triton_utils.fast_launch_supported.cache_clear()
    try:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        ok, why = _triton_utils.fast_launch_supported()
        assert not ok and "TRITON_INTERPRET" in why
        _triton_utils.fast_launch_supported.cache_clear()
        monkeypatch.delenv("TRITON_INTERPRET")
        monkeypatch.setenv("ACCEL_TRITON_FAST_LAUNCH", "0")
        assert _triton_utils.fast_launch_supported() == (False, "ACCEL_TRITON_FAST_LAUNCH=0")
        _triton_utils.fast_launch_supported.cache_clear()
        monkeypatch.delenv("ACCEL_TRITON_FAST_LAUNCH")
        ok, why = _triton_utils.fast_launch_supported()  # the installed triton's JITFunction.run still matches
        assert ok, why
    finally:
        _triton_utils.fast_launch_supported.cache_clear()


@pytest.mark.parametrize("call", ["grid_fn", "default_constexpr", "extra_option"])
def test_what_the_key_cannot_describe_goes_through_triton(fast, call):
    x = _cuda(torch.zeros(16, 16))
    for _ in range(2):
        if call == "grid_fn":
            _triton_utils.triton_launch(fast, lambda meta: (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
        elif call == "default_constexpr":  # ROWS left to a default the kernel would have
            _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16)
        else:
            _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1, maxnreg=128)
    assert _kinds(fast) == ["triton", "triton"]


def test_non_tensor_first_argument_and_wide_ints(fast):
    x = _cuda(torch.zeros(16, 16))
    _triton_utils.triton_launch(fast, (1,), x, x, 1 << 40, 16, 1e-5, BLOCK_N=16, ROWS=1)
    _triton_utils.triton_launch(fast, (1,), x, x, 1 << 63, 16, 1e-5, BLOCK_N=16, ROWS=1)  # u64, not i64
    _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=True)  # True == 1, another type
    _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    _triton_utils.triton_launch(fast, (1,), None, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)  # no crash: Triton's path
    assert _kinds(fast) == ["triton"] * 5


def test_positional_constexprs_are_keyed_by_value(fast):
    """Helion's generated code passes constexprs positionally: a new value is a new compile, the
    launcher gets every argument once, in order."""
    x = _cuda(torch.zeros(16, 16))
    for rows in (1, 1, 2, 2):
        _triton_utils.triton_launch(fast, (1,), x, x, 16, 16, 1e-5, 16, rows)
    assert _kinds(fast) == ["triton", "direct", "triton", "direct"]
    assert fast.calls[3][1][9:] == (x, x, 16, 16, 1e-5, 16, 2)


def test_a_function_without_parameter_facts_goes_through_triton(fast):
    class Bare(_FakeJit):
        params = None

    fn = Bare()
    x = _cuda(torch.zeros(16, 16))
    for _ in range(2):
        _triton_utils.triton_launch(fn, (1,), x, x, 16, 16, 1e-5, BLOCK_N=16, ROWS=1)
    assert _kinds(fn) == ["triton", "triton"]


def test_row_and_shape_helpers_view_only_when_needed():
    x = torch.zeros(4, 8)
    assert _launch.rows_view(x, 8) is x
    assert _launch.rows_view(x, 32).shape == (1, 32)  # normalized over both dims: one row
    x3 = torch.zeros(2, 3, 8)
    rows = _launch.rows_view(x3, 8)
    assert rows.shape == (6, 8) and rows.data_ptr() == x3.data_ptr()
    assert _launch.shaped_like(rows, x3).shape == (2, 3, 8)
    assert _launch.shaped_like(x, x) is x
    assert _launch.shaped_like(_launch.rows_view(x, 32), x).shape == (4, 8)  # same rank, other shape
    w = torch.zeros(8)
    assert _launch.vector(w, 8) is w and _launch.vector(torch.zeros(2, 4), 8).shape == (8,)


def test_tuple_arguments_are_keyed_by_their_elements(fast):
    y = _cuda(torch.zeros(8))
    for t in (torch.zeros(8, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.bfloat16), torch.zeros(8)):
        _triton_utils.triton_launch(fast, (1,), y, (t,), 8, 16, 1e-5, BLOCK_N=8, ROWS=1)
    assert _kinds(fast) == ["triton", "direct", "triton"]  # a tuple of another dtype: a new compile


def test_a_launch_plan_captures_the_compiled_kernel_on_its_second_call(fast):
    """LaunchPlan: compile through Triton, then triton_launch's direct call, then its own direct call with
    the same launcher arguments (scalars, then constexprs in signature order)."""
    x, y = _cuda(torch.zeros(64, 128, dtype=torch.bfloat16)), _cuda(torch.zeros(64, 128, dtype=torch.bfloat16))
    plan = _triton_utils.LaunchPlan(fast, (32,), (64, 128, 1e-5), num_warps=4, BLOCK_N=128, ROWS=2)
    for _ in range(4):
        plan(x, y)
    assert _kinds(fast) == ["triton", "direct", "direct", "direct"]
    assert plan.kernel is fast.compiled
    assert fast.calls[2][1] == fast.calls[1][1] == fast.calls[3][1] \
        == (32, 1, 1, 1234, "fn-handle", ("meta",), None, None, None, x, y, 64, 128, 1e-5, 128, 2)


def test_a_launch_plan_used_once_captures_nothing(fast):
    x = _cuda(torch.zeros(16, 16))
    plan = _triton_utils.LaunchPlan(fast, (1,), (16, 16, 1e-5), BLOCK_N=16, ROWS=1)
    plan(x, x)
    assert plan.kernel is None and _kinds(fast) == ["triton"]


def test_a_launch_plan_goes_through_triton_under_a_hook_or_on_another_device(fast, monkeypatch):
    from triton import knobs

    x = _cuda(torch.zeros(16, 16))
    plan = _triton_utils.LaunchPlan(fast, (1,), (16, 16, 1e-5), BLOCK_N=16, ROWS=1)
    plan(x, x)
    plan(x, x)
    assert plan.kernel is not None
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 1, raising=False)  # another current device
    plan(x, x)
    assert _kinds(fast) == ["triton", "direct", "triton"], "device 1 has its own compile through Triton"
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    hook = knobs.runtime.launch_enter_hook
    if hook is None:
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    else:
        monkeypatch.setattr(hook, "calls", [lambda *a: None])
    plan(x, x)
    assert _kinds(fast)[-1] == "triton"


def test_a_launch_plan_on_cpu_tensors_runs_through_triton_every_time(fast):
    x = torch.zeros(16, 16)  # the interpreter's case: nothing compiled to capture
    plan = _triton_utils.LaunchPlan(fast, (1,), (16, 16, 1e-5), BLOCK_N=16, ROWS=1)
    for _ in range(3):
        plan(x, x)
    assert plan.kernel is None and _kinds(fast) == ["triton"] * 3
