"""The kernel core: ops, per-key slots, the two install paths, overrides, the registry and ``explain``.

Imports run downward only: :mod:`.op` (an operator, its ATen kernel, its backends' keys) <-
:mod:`.plans` <- :mod:`.state` <- :mod:`.override` (cond, run, fail-safe, verify) <- :mod:`.slot`
(overrides of one op at one key, and the install-path protocol) <- :mod:`.router` / :mod:`.native`
(the two paths) <- :mod:`.autograd` <- :mod:`.registry` (the public API) <- :mod:`.explain` and
:mod:`.spec` (one op family declared once, registered in one call).

A routed call takes one of two install paths (torch's native DSL registry, :mod:`.native`, or accel's router,
:mod:`.router`) and, for accel's own ops called eagerly from Python, the fast path of :mod:`.autograd`
(``decide``/``Answer``, ``eager_autograd``, ``below_autograd``): which runs when and why there are several is
``docs/kernels.md``, "How a call is routed".
"""
