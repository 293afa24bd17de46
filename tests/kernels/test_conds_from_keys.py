"""The conds every op family builds from its two reason-key functions (:func:`accel.kernels.ops.conds.conds_from_keys`).

The ops' own cond tests (``test_swiglu_rope_rms_norm_hf.py``, ``test_rms_norm.py``, ``test_softmax_layer_norm.py``,
``test_linear_cross_entropy_triton.py``) judge the sentences; these judge what the helper adds: the signatures,
arguments passed by keyword, the subject a sentence names, and the error for a subject that is no parameter.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from accel.errors import KernelRegistrationError
from accel.kernels.ops.conds import DEVICE_REASONS, conds_from_keys, device_types_for
from accel.kernels.tuning import table


def _keys():
    def key_fwd(input, weight, eps=1e-5):
        return None if input.dim() == 2 else "shape"

    def key_bwd(grad_out, input, weight, rstd, unit_offset=False):
        return None if grad_out.dtype == input.dtype else "grad_out"

    return key_fwd, key_bwd


REASONS = {**DEVICE_REASONS, "shape": "input is {dtype}, not 2-d", "grad_out": "grad_out differs (subject {dtype})"}


def test_the_conds_have_the_keys_signatures_and_take_keywords():
    key_fwd, key_bwd = _keys()
    fwd, bwd = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]), REASONS, key_fwd, key_bwd)
    assert inspect.signature(fwd) == inspect.signature(key_fwd) == inspect.signature(fwd.why_not)
    assert inspect.signature(bwd) == inspect.signature(key_bwd) == inspect.signature(bwd.why_not)
    x, w = torch.empty(4, 8), torch.empty(8)
    assert fwd(x, w) is True and fwd(input=x, weight=w, eps=1e-6) is True and fwd.why_not(x, weight=w) is None
    assert fwd(x[0], w) is False
    assert fwd.why_not(weight=w, input=x[0].half()) == "input is torch.float16, not 2-d"
    assert fwd.floor() == table.floor("rms_norm_fwd", "triton") and bwd.floor() == table.floor("rms_norm_bwd", "triton")
    assert fwd.cacheable is True and bwd.cacheable is True
    with pytest.raises(TypeError):  # a call the op's signature refuses is refused as before (the cond fails safe)
        fwd(x)


def test_the_sentence_names_the_subject_and_a_callable_gets_every_subject():
    key_fwd, key_bwd = _keys()
    x, w, rstd = torch.empty(4, 8), torch.empty(8), torch.empty(4, 1)
    g = x.half()
    _, bwd = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]), REASONS, key_fwd, key_bwd,
                             subject_bwd="grad_out")
    assert bwd(g, x, w, rstd) is False and bwd.why_not(g, x, w, rstd) == "grad_out differs (subject torch.float16)"
    _, bwd = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]), REASONS, key_fwd, key_bwd)
    assert bwd.why_not(g, x, w, rstd=rstd) == "grad_out differs (subject torch.float32)"  # "input", the default
    seen = []
    _, bwd = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]),
                             lambda key, op, *subjects: seen.append((key, op, subjects)) or "said",
                             key_fwd, key_bwd, subject_bwd=("input", "rstd"))
    assert bwd.why_not(g, x, w, rstd) == "said" and bwd.why_not(x, x, w, rstd) is None
    assert seen == [("grad_out", "rms_norm_bwd", (x, rstd))]  # the callable never sees a None key


def test_a_subject_that_is_no_parameter_is_refused_when_the_conds_are_made():
    key_fwd, key_bwd = _keys()
    with pytest.raises(KernelRegistrationError, match=r"accel.kernels conds of rms_norm: subject 'q' is no "
                                                      r"parameter of .*key_bwd\(grad_out, input, weight, rstd, "
                                                      r"unit_offset=False\)\. Name the parameters"):
        conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]), REASONS, key_fwd, key_bwd, subject_bwd="q")


def test_a_subject_the_call_leaves_to_its_default_is_the_default():
    def key_fwd(input, weight=None):
        return "shape"

    fwd, _ = conds_from_keys("rms_norm", "triton", device_types_for(["cpu"]),
                             lambda key, op, *subjects: f"{key} {subjects[1]!r}", key_fwd, key_fwd,
                             subject_fwd=("input", "weight"))
    assert fwd.why_not(torch.empty(2)) == "shape None"  # a KeyError (explain: 'why_not raised') before
