"""accel._once.warn_once: the one "said once" helper behind accel.graphs, accel.kernels and the transformers
integration (each keeps its own set of keys; a test resets one by clearing or replacing that set)."""

from __future__ import annotations

import inspect
import warnings

from accel._once import warn_once
from accel.errors import GraphFallbackWarning, KernelRegistrationWarning


def _said(fn):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = fn()
    return result, record


def test_says_each_key_once_per_set_with_its_category():
    said: set = set()
    first, record = _said(lambda: [warn_once(said, "k", "text one", GraphFallbackWarning),
                                   warn_once(said, "k", "text two", GraphFallbackWarning),
                                   warn_once(said, ("other", 1), "text three", GraphFallbackWarning)])
    assert first == [True, False, True]
    assert [(w.category, str(w.message)) for w in record] == [(GraphFallbackWarning, "text one"),
                                                             (GraphFallbackWarning, "text three")]
    assert said == {"k", ("other", 1)}
    said.clear()  # how a test forgets what was said
    again, record = _said(lambda: warn_once(said, "k", "text one", GraphFallbackWarning))
    assert again is True and len(record) == 1


def test_a_warning_instance_keeps_its_class_and_a_text_defaults_to_userwarning():
    said: set = set()
    _, record = _said(lambda: (warn_once(said, "a", KernelRegistrationWarning("instance")),
                               warn_once(said, "b", "plain")))
    assert [(w.category, str(w.message)) for w in record] == [(KernelRegistrationWarning, "instance"),
                                                             (UserWarning, "plain")]


def _wrapper(said: set) -> None:
    warn_once(said, "w", "from the wrapper's caller", stacklevel=2)


def test_stacklevel_counts_from_the_caller_of_warn_once():
    said: set = set()
    line = inspect.currentframe().f_lineno
    _, here = _said(lambda: warn_once(said, "here", "this line"))
    _, wrapped = _said(lambda: _wrapper(said))
    assert (here[0].filename, here[0].lineno) == (__file__, line + 1)
    assert (wrapped[0].filename, wrapped[0].lineno) == (__file__, line + 2)
