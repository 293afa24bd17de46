"""Every public path of :mod:`accel.nn` takes the ``LinearCrossEntropyOptions`` that ``accel.nn`` hands out.

On torch 2.13+ builds ``accel.nn.LinearCrossEntropyOptions`` is torch's class, another class than accel's
(:mod:`accel.nn.options`) with the same fields. accel's function, its fp32 variant and its module read
torch's options field by field (:func:`accel.nn.options.as_options`) and run the chunked path they ask for;
what accel's chunked path cannot do (torch's ``acc_policy="balanced"``, a field accel's class lacks) is
refused with a typed error, never dropped.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import accel.nn
from accel._compat import nn as compat_nn
from accel.errors import LossInputError
from accel.nn import linear_cross_entropy as own
from accel.nn import options as opts
from accel.nn.options import as_options

from _kernel_helpers import OpLog

pytestmark = pytest.mark.cpu

TORCH_OPTIONS = None if compat_nn.torch_linear_cross_entropy() is None else torch.nn.LinearCrossEntropyOptions
needs_torch_options = pytest.mark.skipif(TORCH_OPTIONS is None, reason="this torch has no LinearCrossEntropyOptions "
                                                                       "of its own: accel.nn hands out accel's")


def _inputs(n=12, d=8, c=40):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).requires_grad_()
    w = (torch.randn(c, d, generator=g) / 3).requires_grad_()
    t = torch.randint(0, c, (n,), generator=g)
    t[::4] = -100
    return x, w, t


def _run(fn, x, w):
    """``fn()``'s loss, its gradients and whether accel's chunked op ran."""
    with OpLog() as log:
        loss = fn()
    grads = torch.autograd.grad(loss.sum(), (x, w))
    return loss.detach(), grads, any(op.startswith("accel.linear_cross_entropy.") for op in log.ops)


@needs_torch_options
def test_the_name_accel_nn_hands_out_is_torchs_class_on_this_torch():
    assert accel.nn.LinearCrossEntropyOptions is TORCH_OPTIONS
    assert accel.nn.LinearCrossEntropyOptions is not own.LinearCrossEntropyOptions


@needs_torch_options
@pytest.mark.parametrize("path", ["function", "fp32 function", "module"])
def test_accels_paths_take_accel_nn_options_and_run_the_chunked_path_they_ask_for(path):
    x, w, t = _inputs()
    theirs = accel.nn.LinearCrossEntropyOptions(batch_chunk_size=5, chunking_method=None, acc_policy="accurate")
    ours = own.LinearCrossEntropyOptions(batch_chunk_size=5, chunking_method=None, acc_policy="accurate")

    def call(options):
        if path == "function":
            return own.linear_cross_entropy(x, w, t, reduction="none", options=options)
        if path == "fp32 function":
            return own.linear_cross_entropy_fp32(x, w, t, options=options)
        head = own.LinearCrossEntropyLoss(8, 40, options=options)
        with torch.no_grad():
            head.linear.weight.copy_(w)
        return head(x, t) + 0 * w.sum()  # the head's own weight copy; w joins the graph for the gradient

    got, got_grads, chunked = _run(lambda: call(theirs), x, w)
    want, want_grads, _ = _run(lambda: call(ours), x, w)
    ref, _, ref_chunked = _run(lambda: call(None), x, w)
    assert chunked and not ref_chunked  # torch's options reached the chunked op; None did not
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_grads, want_grads, rtol=0, atol=0)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


@needs_torch_options
def test_torchs_function_and_module_take_the_same_object():
    """The other public paths (torch's own objects on this torch) take it too, and agree with accel's."""
    x, w, t = _inputs()
    options = accel.nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method=None)
    theirs = accel.nn.functional.linear_cross_entropy(x, w, t, options=options)
    torch.testing.assert_close(theirs, own.linear_cross_entropy(x, w, t, options=options), rtol=1e-5, atol=1e-6)
    head = accel.nn.LinearCrossEntropyLoss(8, 40, options=options)
    assert head(x, t).shape == torch.Size([])


@needs_torch_options
def test_as_options_reads_every_field_of_torchs_class():
    values = dict(allow_retain_graph=True, batch_chunk_size=64, chunking_method=None, acc_policy="compact",
                  acc_dtype=torch.float32)
    ours = as_options(TORCH_OPTIONS(**values))
    assert type(ours) is own.LinearCrossEntropyOptions
    assert dataclasses.asdict(ours) == values
    same = own.LinearCrossEntropyOptions(**values)
    assert as_options(same) is same and as_options(None) is None


def test_compiled_accel_function_takes_accel_nn_options():
    """Under ``torch.compile(fullgraph=True)`` too (the conversion is traced with the call)."""
    torch._dynamo.reset()
    x, w, t = _inputs()
    options = accel.nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method=None)
    fn = torch.compile(lambda x, w, t: own.linear_cross_entropy(x, w, t, options=options), fullgraph=True,
                       backend="aot_eager")
    torch.testing.assert_close(fn(x, w, t), own.linear_cross_entropy(x, w, t), rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


@needs_torch_options
def test_a_torch_option_accels_chunked_path_does_not_do_is_refused_with_what_to_do():
    x, w, t = _inputs()
    try:
        balanced = TORCH_OPTIONS(acc_policy="balanced")
    except ValueError as exc:  # torch 2.14's class has no 'balanced' policy: nothing for accel to refuse there
        pytest.skip(f"this torch's LinearCrossEntropyOptions refuses acc_policy='balanced' itself ({exc})")
    with pytest.raises(LossInputError) as info:
        own.linear_cross_entropy(x, w, t, options=balanced)
    assert str(info.value) == (
        f"accel.nn.functional.linear_cross_entropy: options {balanced!r} (torch's class) cannot be read as accel's "
        f"LinearCrossEntropyOptions: LinearCrossEntropyOptions: acc_policy='balanced'. It must be one of 'auto', "
        f"'accurate', 'compact'. Pass a value accel's chunked path takes (for acc_policy='balanced': 'accurate' "
        f"is at least as precise, 'compact' uses less memory), or call torch's own "
        f"torch.nn.functional.linear_cross_entropy.")


def test_a_torch_field_accel_lacks_is_refused_when_set_and_ignored_at_its_default(monkeypatch):
    """A later torch's class with a field accel's does not have (a stand-in class here): set, it is refused;
    at torch's default, the options read as the fields both have."""

    @dataclasses.dataclass(frozen=True)
    class LaterOptions:
        allow_retain_graph: bool = False
        batch_chunk_size: int | None = None
        chunking_method: str | None = "auto"
        acc_policy: str = "auto"
        acc_dtype: torch.dtype | None = None
        overlap_chunks: bool = False

    monkeypatch.setattr(opts, "_TORCH", opts._foreign(LaterOptions))
    assert as_options(LaterOptions(batch_chunk_size=8)) == own.LinearCrossEntropyOptions(batch_chunk_size=8)
    with pytest.raises(LossInputError, match=r"sets overlap_chunks=True, which accel's LinearCrossEntropyOptions "
                                             r"does not have. accel's chunked path takes allow_retain_graph, "
                                             r"batch_chunk_size, chunking_method, acc_policy, acc_dtype. Leave the "
                                             r"others at their defaults"):
        as_options(LaterOptions(overlap_chunks=True), "here")


def test_another_type_is_refused_naming_what_is_accepted():
    x, w, t = _inputs()
    with pytest.raises(LossInputError, match=r"^accel.nn.functional.linear_cross_entropy: options is dict. It must "
                                             r"be accel.nn.LinearCrossEntropyOptions( .*)?, or None. Pass one of those.$"):
        own.linear_cross_entropy(x, w, t, options={"batch_chunk_size": 4})


def test_the_api_page_documents_the_functions_users_call():
    """docs/api.md renders, besides accel.nn.functional (torch's function on this torch), accel's function, its
    fp32 variant, module and options (accel.nn.linear_cross_entropy's ``__all__``) and the converter."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    for directive in (".. automodule:: accel.nn.functional\n", ".. automodule:: accel.nn.linear_cross_entropy\n",
                      ".. autofunction:: accel.nn.options.as_options\n"):
        assert directive in page, directive
    assert {"linear_cross_entropy", "linear_cross_entropy_fp32", "LinearCrossEntropyLoss",
            "LinearCrossEntropyOptions"} <= set(own.__all__)
