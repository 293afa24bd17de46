"""``torch.compile`` told what serves this vendor, arch and torch: one call, every vendor.

:func:`compile` is ``torch.compile`` plus the Inductor settings the active backend
plans (:meth:`accel.backends.Backend.compile_plan`): NVGEMM (and CuTeDSL on
Blackwell) among the GEMM autotuning candidates on NVIDIA, Composable Kernel on
AMD Instinct, each only where the running torch has the config key, the package
is installed and the arch is served. :func:`compile_plan` says what would be set
and why (``accel info`` shows it). A user's explicit options always win.

:func:`compile` also runs accel's LM-head loss pass (:mod:`accel._loss_pass`) on each graph Dynamo captures,
before AOTAutograd: ``cross_entropy(linear(x, W), target)`` becomes accel's fused loss, whose ``[tokens, vocab]``
logits are never stored; :func:`loss_pass_report` says what it rewrote and what it left, and why.

:func:`flex_attention_kernel_options` gives ``kernel_options`` for
``torch.nn.attention.flex_attention.flex_attention`` (RDNA3 block sizes by sequence
length; ``{}`` elsewhere).

Importing this module imports neither ``torch._inductor`` nor a DSL, and
initialises no device.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import torch

from accel._select import backend as _active_backend
from accel.backends._base import CompilePlan, PlanItem

__all__ = ["CompilePlan", "PlanItem", "compile", "compile_plan", "flex_attention_kernel_options", "loss_pass_report"]

#: What :func:`compile_plan` lists for the loss pass.
_LOSS_PASS_REASON = ("accel's graph pass: cross_entropy(linear(x, W), target) -> accel's fused LM-head loss, before "
                     "AOTAutograd (no [tokens, vocab] logits stored); loss_pass=False turns it off")


def compile_plan(mode: str | None = None, *, options: dict[str, Any] | None = None) -> CompilePlan:
    """What :func:`compile` would add to ``torch.compile`` on the active backend, and why.

    Args:
        mode: a ``torch.compile`` mode (``None`` = ``"default"``, ``"reduce-overhead"``,
            ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``).
        options: the Inductor options you would pass yourself; yours win.

    Returns:
        A :class:`~accel.backends.CompilePlan`: a list of ``(key, value, reason)``
        items that would be set, ``.skipped``: the decisions not taken, each with
        its reason (package missing, arch not served, key absent in this torch, ...), and
        ``.given``: what happens to each of your ``options`` (none is dropped).

    Raises:
        CompileOptionError: (a ``ValueError``) ``mode`` is not a mode of the running torch, or a key
            of ``options`` is not an Inductor option (the message names the closest ones) or its value
            is not of the option's type; checked before anything is compiled.

    .. note:: Imports ``torch._inductor`` and reads the device arch (initialises the
       device runtime on a GPU).

    Example:
        >>> import accel
        >>> from accel.testing import fake_backend
        >>> with fake_backend("cpu"):
        ...     plan = accel.compile_plan("max-autotune")
        >>> list(plan), plan.options
        ([], {})
    """
    plan = _active_backend().compile_plan(mode=mode, options=options)
    plan.passes.append(PlanItem("loss_pass", True, _LOSS_PASS_REASON))
    return plan


class _LossPassBackend:
    """A ``torch.compile`` backend: the loss pass on each captured graph, then Inductor (``inner``)."""

    def __init__(self, inner: Any) -> None:
        from accel._loss_pass import LossPassReport

        self.inner, self.report = inner, LossPassReport()

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        from accel._loss_pass import rewrite

        rewrite(gm, self.report)
        return self.inner(gm, example_inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:  # get_compiler_config, reset, compiler_name: Inductor's
        inner = self.__dict__.get("inner")
        if inner is None:  # (an object being copied or unpickled has no attributes yet)
            raise AttributeError(name)
        return getattr(inner, name)


def loss_pass_report(compiled: Any) -> Any:
    """What :func:`compile`'s loss pass did in ``compiled``'s graphs so far (graphs are captured at the first
    calls: ask after one): an :class:`accel._loss_pass.LossPassReport` with ``rewritten`` (each loss replaced by
    accel's fused loss: the graph node and its source line) and ``left`` (each ``cross_entropy`` kept, and why:
    logits read elsewhere, a class ``weight=``, soft labels, a weight that is a tensor subclass, ...).

    Raises:
        TypeError: ``compiled`` was not made by :func:`accel.compile` with the loss pass on (``backend="inductor"``,
            ``loss_pass=True``).
    """
    backend = vars(compiled).get("_accel_loss_pass") if hasattr(compiled, "__dict__") else None
    if backend is None:
        raise TypeError(f"accel.loss_pass_report: {type(compiled).__name__} was not made by accel.compile with "
                        "loss_pass=True and backend='inductor'; compile it that way to get a report.")
    return backend.report


def compile(model: Callable[..., Any] | None = None, /, *, mode: str | None = None,  # noqa: A001 - mirrors torch.compile
            options: dict[str, Any] | None = None, backend: str | Callable[..., Any] = "inductor",
            loss_pass: bool = True, **kwargs: Any) -> Any:
    """``torch.compile`` with the Inductor settings that serve the active vendor.

    The final Inductor options are, later ones winning: what ``mode`` means
    (``torch._inductor.list_mode_options(mode)``), then accel's plan
    (:func:`compile_plan`), then your ``options``. With nothing to add, the call
    is exactly ``torch.compile(model, mode=mode, options=options, ...)``.
    Backends other than ``"inductor"`` get the call unchanged.

    Args:
        model: module or function to compile; ``None`` returns a decorator, as in torch.
        mode: a ``torch.compile`` mode; may be combined with ``options`` here
            (``torch.compile`` refuses both at once; accel merges them).
        options: Inductor options; yours always win over accel's.
        backend: the ``torch.compile`` backend.
        loss_pass: with ``backend="inductor"``, run accel's LM-head loss pass on each captured graph (module
            docstring; :func:`loss_pass_report` says what it did). ``False``: the graph is Dynamo's as captured.
        **kwargs: passed to ``torch.compile`` (``fullgraph``, ``dynamic``, ...).

    Returns:
        What ``torch.compile`` returns.

    Raises:
        CompileOptionError: (a ``ValueError``) ``mode`` is not a mode of the running torch, a key of
            ``options`` is not an Inductor option or has a value of the wrong type, a keyword of
            ``**kwargs`` is not a ``torch.compile`` parameter, ``backend`` names no ``torch.compile``
            backend, or (other backends) both ``mode`` and ``options`` are given. Checked before
            ``torch.compile`` is called; the message names the closest valid names.

    Example:
        >>> import torch, accel
        >>> f = accel.compile(lambda x: x * 2, backend="eager")
        >>> f(torch.ones(2)).tolist()
        [2.0, 2.0]
    """
    _check_compile_arguments(backend, kwargs)
    if model is None:  # a decorator, as torch.compile(None, ...) is
        return lambda fn: compile(fn, mode=mode, options=options, backend=backend, loss_pass=loss_pass, **kwargs)
    if backend != "inductor":
        if mode is not None and options is not None:
            from accel.errors import CompileOptionError

            raise CompileOptionError(
                f"accel.compile: mode={mode!r} and options together for backend {backend!r}. torch.compile takes "
                "one of them (accel merges both only for 'inductor', whose mode options it knows). Pass one."
            )
        return torch.compile(model, mode=mode, options=options, backend=backend, **kwargs)
    from accel import _compat

    plan = compile_plan(mode, options=options)
    merge = bool(plan) or (mode is not None and options is not None)
    if merge:
        merged = _compat.inductor_mode_options(mode)
        merged.update(plan.options)
        merged.update(options or {})
        mode, options = None, merged
    if not loss_pass:
        if merge:
            return torch.compile(model, options=options, backend=backend, **kwargs)
        return torch.compile(model, mode=mode, options=options, backend=backend, **kwargs)

    wrapper = _LossPassBackend(_compat.inductor_backend(mode, options, kwargs.get("dynamic")))
    compiled = torch.compile(model, backend=wrapper, **kwargs)
    try:  # on the compiled object itself (OptimizedModule's setattr would put it on the user's module)
        object.__setattr__(compiled, "_accel_loss_pass", wrapper)
    except (AttributeError, TypeError):  # an object that takes no attribute: no report for it
        pass
    return compiled


_TORCH_COMPILE = torch.compile


def _check_compile_arguments(backend: object, kwargs: dict[str, Any]) -> None:
    """``**kwargs`` are ``torch.compile`` parameters and a str ``backend`` is a registered one; else CompileOptionError."""
    import inspect

    from accel._options import check_keys, did_you_mean
    from accel.errors import CompileOptionError

    own = {"model", "mode", "options", "backend"}
    try:  # the running torch's own torch.compile (as imported), also while a test stands in for it
        signature = inspect.signature(_TORCH_COMPILE).parameters.values()
    except (TypeError, ValueError):  # no signature to check against: torch checks the call itself
        signature = ()
    params = [p.name for p in signature if p.name not in own]
    if signature and not any(p.kind is p.VAR_KEYWORD for p in signature):
        check_keys(kwargs, params,
                   what=f"accel.compile: keyword argument(s) for torch {torch.__version__}'s torch.compile",
                   error=CompileOptionError, fix="mode=, options= and backend= are accel.compile's own.")
    if isinstance(backend, str) and backend != "inductor":
        import torch._dynamo as dynamo

        try:
            dynamo.lookup_backend(backend)
        except Exception as exc:  # noqa: BLE001 - torch's InvalidBackend (its own class varies across versions)
            names = sorted(dynamo.list_backends(exclude_tags=()))
            raise CompileOptionError(
                f"accel.compile: backend={backend!r} is not a torch.compile backend ({type(exc).__name__})."
                f"{did_you_mean(backend, names)} Registered: {', '.join(names)} (or pass a callable)."
            ) from None
    elif not isinstance(backend, str) and not callable(backend):
        raise CompileOptionError(
            f"accel.compile: backend={backend!r} ({type(backend).__name__}) is neither a backend name nor a "
            "callable. Pass 'inductor' (the default), another name torch._dynamo.list_backends() shows, or a callable."
        )


def flex_attention_kernel_options(seq_len: int, *, head_dim: int, dtype: torch.dtype) -> dict[str, int]:
    """``kernel_options`` for ``flex_attention`` on the active device at this shape.

    On AMD RDNA3 (gfx11xx) with bf16/fp16 and ``head_dim`` 256: forward block sizes
    by sequence length (``seq_len < 128``: 16x16; ``< 512``: 32x16; else 64x16; all
    ``num_warps=4``, ``waves_per_eu=2``), the tiers AMD profiled on gfx1151 and
    torch 2.14 picks itself. ``{}`` everywhere else, including on a torch that
    already applies those tiers (an explicit value would pin them and stop
    max-autotune from searching).

    Args:
        seq_len: query sequence length (tokens).
        head_dim: per-head embedding size.
        dtype: the query dtype.

    Returns:
        A dict for ``flex_attention(..., kernel_options=...)`` (maybe empty).

    Raises:
        CompileOptionError: (a ``ValueError``) ``seq_len`` or ``head_dim`` is not a positive int.

    Example:
        >>> import torch, accel
        >>> from accel.testing import fake_backend
        >>> with fake_backend("cuda", arch="sm_90"):  # not RDNA3: Inductor decides
        ...     accel.flex_attention_kernel_options(4096, head_dim=128, dtype=torch.bfloat16)
        {}
    """
    for name, value in (("seq_len", seq_len), ("head_dim", head_dim)):
        if isinstance(value, builtins.bool) or not isinstance(value, int) or value <= 0:
            from accel.errors import CompileOptionError

            raise CompileOptionError(
                f"flex_attention_kernel_options: {name}={value!r}. It must be a positive int. "
                f"Pass the query's {name} as an int."
            )
    return _active_backend().flex_attention_kernel_options(seq_len, head_dim=head_dim, dtype=dtype)
