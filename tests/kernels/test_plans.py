"""Per-signature memo of cacheable conds and impl plans (accel.kernels.core.plans), on both registry paths.

A cond with ``cacheable = True`` runs once per argument signature; an impl with ``plan``
is planned once per signature and the plan answers the calls; tuning-table changes, the
fail-safe and reset_counters forget the memo. Tested at the CPU key with counting impls.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import accel.kernels as ak
from accel import _compat
from accel.errors import KernelFallbackWarning
from accel.kernels.core import plans as _plans
from accel.kernels.tuning import table as _tuning
from accel.kernels.ops.rms_norm import reference

from _kernel_helpers import Counting, _clean_registry, path  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def _trainable(request):
    """The CPU backward of aten::_fused_rms_norm registered (after the test's registry path is chosen), so that the
    tests' forward overrides leave training working and register without a KernelRegistrationWarning."""
    if "path" not in request.fixturenames:
        return  # a test that chooses its registry path itself registers the backward after choosing it
    request.getfixturevalue("path")
    _register_backward()


def _register_backward():
    ak.register("aten::_fused_rms_norm_backward", impl=reference.fused_rms_norm_backward, backends=["cpu"],
                dsl="eager", name="cpu-backward", fallback=reference.fused_rms_norm_backward)


FWD = "aten::_fused_rms_norm"


def _call(x, w=None, eps=1e-6):
    return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, eps)


def _info(name):
    return next(o for o in ak.overrides() if o.name == name)


class _Cond:
    """A cond that counts its calls and takes rows of at least ``min_n``."""

    cacheable = True

    def __init__(self, min_n: int = 0) -> None:
        self.calls, self.min_n = 0, min_n

    def __call__(self, x, normalized_shape, weight=None, eps=None):
        self.calls += 1
        return x.shape[-1] >= self.min_n


class _Planned:
    """An impl with ``plan``: records each planning and answers through the reference."""

    def __init__(self, fail_plan: bool = False, fail_run: bool = False) -> None:
        self.planned, self.runs, self.direct = [], 0, 0
        self.fail_plan, self.fail_run = fail_plan, fail_run

    def __call__(self, *args):
        self.direct += 1
        return reference.fused_rms_norm(*args)

    def plan(self, x, normalized_shape, weight=None, eps=None):
        if self.fail_plan:
            raise RuntimeError("no config for this shape")
        self.planned.append((tuple(x.shape), eps))

        def run(*args):
            self.runs += 1
            if self.fail_run:
                raise RuntimeError("launch failed")
            return reference.fused_rms_norm(*args)
        return run


def test_a_cacheable_cond_runs_once_per_signature_and_the_plan_answers(path):
    cond, impl = _Cond(), _Planned()
    ak.register(FWD, impl=impl, cond=cond, backends=["cpu"], dsl="eager", name="p")
    x, w = torch.randn(4, 32), torch.randn(32)
    for _ in range(3):
        torch.testing.assert_close(_call(x, w)[0], reference.fused_rms_norm(x, [32], w, 1e-6)[0])
    assert cond.calls == 1 and impl.planned == [((4, 32), 1e-6)] and impl.runs == 3 and impl.direct == 0
    assert _info("p").routed == 3
    _call(torch.randn(8, 32), w)  # another shape: another signature
    _call(x, w, eps=1e-5)  # another eps: another signature (scalars are keyed by value)
    assert cond.calls == 3 and len(impl.planned) == 3 and impl.runs == 5


def test_a_declined_signature_is_remembered_and_still_counted(path):
    cond = _Cond(min_n=64)
    impl = Counting(reference.fused_rms_norm)
    ak.register(FWD, impl=impl, cond=cond, backends=["cpu"], dsl="eager", name="d")
    x = torch.randn(4, 32)
    for _ in range(3):
        _call(x)
    assert cond.calls == 1 and impl.calls == 0 and _info("d").declined == 3


def test_a_cond_without_the_promise_runs_every_call(path):
    calls = []

    def cond(x, normalized_shape, weight=None, eps=None):
        calls.append(1)
        return True

    impl = _Planned()
    ak.register(FWD, impl=impl, cond=cond, backends=["cpu"], dsl="eager", name="n")
    for _ in range(3):
        _call(torch.randn(4, 32))
    assert len(calls) == 3 and impl.direct == 3 and impl.planned == []


@pytest.mark.parametrize("change", ["table reload", "MIN_NUMEL.popitem"])
def test_a_tuning_table_or_policy_change_forgets_the_memo(path, change):
    """A new table or miss policy may route this signature elsewhere: the cond runs again."""
    cond = _Cond()
    ak.register(FWD, impl=_Planned(), cond=cond, backends=["cpu"], dsl="eager", name="t")
    x = torch.randn(4, 32)
    _call(x)
    _call(x)
    saved = dict(_tuning.MIN_NUMEL)
    try:
        _tuning.reload() if change == "table reload" else _tuning.MIN_NUMEL.popitem()
        _call(x)
    finally:
        _tuning.MIN_NUMEL.update(saved)
    assert cond.calls == 2


def test_a_plan_that_raises_falls_back_once_and_denies_the_shape(path):
    cond, impl = _Cond(), _Planned(fail_plan=True)
    ak.register(FWD, impl=impl, cond=cond, backends=["cpu"], dsl="eager", name="fp")
    x = torch.randn(4, 32)
    with pytest.warns(KernelFallbackWarning, match="while planning: no config for this shape"):
        y = _call(x)[0]
    torch.testing.assert_close(y, reference.fused_rms_norm(x, [32], None, 1e-6)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        _call(x)  # denied: ATen, no second warning
    info = _info("fp")
    assert info.failed == 1 and info.denied_shapes == 1 and info.routed == 0 and impl.direct == 0


def test_a_plan_run_that_raises_forgets_the_memo_and_denies_the_shape(path):
    cond, impl = _Cond(), _Planned(fail_run=True)
    ak.register(FWD, impl=impl, cond=cond, backends=["cpu"], dsl="eager", name="fr")
    x = torch.randn(4, 32)
    with pytest.warns(KernelFallbackWarning, match="launch failed"):
        _call(x)
    _call(x)
    assert impl.runs == 1, "the denied shape must not reach the memoised plan again"
    ak.reset_counters("fr")  # forgets the failed shapes: the kernel gets its chance again
    with pytest.warns(KernelFallbackWarning, match="launch failed"):
        _call(x)
    assert impl.runs == 2


def test_two_cacheable_overrides_share_one_signature_per_call(path):
    """The first declines (memoised), the second answers through its plan; both counted per call."""
    first, second = _Cond(min_n=64), _Cond()
    impl = _Planned()
    ak.register(FWD, impl=Counting(reference.fused_rms_norm), cond=first, backends=["cpu"], dsl="a", name="a")
    ak.register(FWD, impl=impl, cond=second, backends=["cpu"], dsl="b", name="b")
    x = torch.randn(4, 32)
    for _ in range(4):
        _call(x)
    assert (first.calls, second.calls, impl.runs) == (1, 1, 4)
    assert _info("a").declined == 4 and _info("b").routed == 4


def test_signature_keys_what_a_cond_may_read():
    base = torch.zeros(65, 32, dtype=torch.bfloat16)
    x = base[:64]
    sig = _plans.signature((x, [32], None, 1e-6))
    assert sig == _plans.signature((torch.zeros(64, 32, dtype=torch.bfloat16), [32], None, 1e-6))
    different = [
        (base.view(-1)[1:2049].view(64, 32), [32], None, 1e-6),  # 2-byte offset: alignment differs
        (x.float(), [32], None, 1e-6),  # dtype
        (torch.zeros(32, 64, dtype=torch.bfloat16).t(), [32], None, 1e-6),  # same shape, other strides
        (x, [32], None, 1e-5),  # a scalar's value
        (x, [32], x[0], 1e-6),  # a weight
    ]
    for args in different:
        assert _plans.signature(args) != sig
    assert _plans.signature((x, [x, x])) is None, "a list of tensors would be keyed by identity"
    assert _plans.signature((x, (1, 2.5, None, True))) == _plans.signature((x, [1, 2.5, None, True]))


def test_the_memo_is_bounded(path, monkeypatch):
    monkeypatch.setattr(_plans, "MAX_ENTRIES", 4)
    cond = _Cond()
    ak.register(FWD, impl=_Planned(), cond=cond, backends=["cpu"], dsl="eager", name="m")
    from accel.kernels.core.override import OVERRIDES as _OVERRIDES

    for i in range(10):
        _call(torch.randn(2, 16), eps=1e-6 * (i + 1))
    assert len(_OVERRIDES["m"].plans) <= 4 and cond.calls == 10


def test_builtin_conds_promise_cacheable():
    from accel.kernels.ops.layer_norm.conditions import make_conds as ln
    from accel.kernels.ops.rms_norm.conditions import Limits, make_conds as rms
    from accel.kernels.ops.softmax.conditions import make_conds as sm

    limits = Limits(1024, 1024)
    for conds in (rms("triton", ["cuda"], limits), ln("triton", ["cuda"], limits), sm("triton", ["cuda"], limits)):
        assert all(c.cacheable is True for c in conds)


def test_an_answer_computed_against_an_older_table_is_not_memoised(path):
    """The tuning tables change while the cond runs (another thread's table write): its answer is used
    once but not kept, so the next call asks the cond again against the new table."""
    class Racing(_Cond):
        def __call__(self, *args):
            if self.calls == 0:
                _tuning.reload()  # the table changes under the first call
            return super().__call__(*args)

    cond = Racing()
    ak.register(FWD, impl=_Planned(), cond=cond, backends=["cpu"], dsl="eager", name="race")
    x = torch.randn(4, 32)
    _call(x)
    _call(x)
    _call(x)
    assert cond.calls == 2, "asked again after the change, then memoised"


def test_a_plan_that_is_not_a_function_is_a_failure_not_a_silent_decline(path):
    class NoneImpl(_Planned):
        def plan(self, *args):
            return None  # a forgotten return

    ak.register(FWD, impl=NoneImpl(), cond=_Cond(), backends=["cpu"], dsl="eager", name="none")
    with pytest.warns(KernelFallbackWarning, match="planned None, not a function"):
        _call(torch.randn(4, 32))
    assert _info("none").failed == 1


@pytest.mark.skipif(_compat.address_reader(torch.Tensor) is torch.Tensor.data_ptr,
                    reason=f"torch {torch.__version__}'s Python binding has no Tensor.const_data_ptr: every read of a "
                           f"tensor's address (data_ptr, its storage's data_ptr) materialises a copy-on-write tensor")
def test_signature_leaves_copy_on_write_inputs_shared():
    x = torch._lazy_clone(torch.randn(4, 32))
    _plans.signature((x, [32], None, 1e-6))
    assert torch._C._is_cow_tensor(x)


def test_every_change_of_the_miss_policy_forgets_the_memo():
    generation = _tuning.GENERATION
    saved = dict(_tuning.MIN_NUMEL)
    try:
        _tuning.MIN_NUMEL.popitem()
        assert _tuning.GENERATION > generation
    finally:
        _tuning.MIN_NUMEL.update(saved)


def test_signature_never_raises_and_reads_addresses_on_every_torch(monkeypatch):
    """torch 2.11 (the H200's image) has no Tensor.const_data_ptr: the reader falls back to data_ptr;
    and an argument whose facts cannot be read gives no memo instead of an exception in the user's call."""
    from accel import _compat

    class Torch211Tensor:  # the binding of torch 2.11: data_ptr only
        data_ptr = torch.Tensor.data_ptr

    monkeypatch.setattr(_plans, "_address", _compat.address_reader(Torch211Tensor))
    assert _plans._address is torch.Tensor.data_ptr
    x = torch.randn(4, 32)
    assert _plans.signature((x, [32]))[0][-1] == x.data_ptr() & 15

    class Unreadable(torch.Tensor):
        @property
        def shape(self):
            raise RuntimeError("no shape here")

    assert _plans.signature((torch.Tensor._make_subclass(Unreadable, x),)) is None


def test_accel_router_computes_the_signature_once_per_call(monkeypatch):
    from accel.kernels.core import router as _router

    ak.use_registry("accel")
    _register_backward()
    counted = []
    real = _plans.signature
    monkeypatch.setattr(_plans, "signature", lambda args: (counted.append(1), real(args))[1])
    ak.register(FWD, impl=Counting(reference.fused_rms_norm), cond=_Cond(min_n=64), backends=["cpu"], dsl="a",
                name="a")
    ak.register(FWD, impl=_Planned(), cond=_Cond(), backends=["cpu"], dsl="b", name="b")
    assert _router.plans.signature is not real
    _call(torch.randn(4, 32))
    assert counted == [1], "one signature for both overrides' memos"
