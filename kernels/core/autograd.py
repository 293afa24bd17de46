"""Autograd guards: ops an override must not take, and forwards whose backward would have no kernel; and the
eager call of an accel op with its autograd formula in a plain ``autograd.Function`` (:func:`eager_autograd`).

Which forward needs which backward comes from the op families (:mod:`.spec` declares each pair
with :func:`declare_backward`); this module knows no op by name.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from accel.errors import KernelRegistrationError, KernelRegistrationWarning
from accel.kernels.tuning import table

from . import plans
from .op import Op
from .slot import SLOTS, Slot, dispatch_key
from .state import STATE

__all__ = ["BACKWARD_OF", "Answer", "below_autograd", "check_training", "decide", "decision_epoch", "declare_backward",
           "direct_apply", "eager_autograd", "graph_grad", "keeps_graph", "orphaned_forwards",
           "refuse_without_autograd"]


def refuse_without_autograd(op: Op) -> None:
    """Raise for an op that is CompositeImplicitAutograd with no Autograd kernel of its own.

    Such an op (``aten::softmax.int``, ``aten::rms_norm``, ``aten::layer_norm``) is differentiated
    through what it decomposes to; a kernel at its backend key would run with no autograd formula
    above it (torch warns "an autograd kernel was not registered", and gradients may be wrong).
    The op it decomposes to is the one to override.
    """
    full = f"{op.namespace}::{op.symbol}"
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(full, "CompositeImplicitAutograd") and not has(full, "Autograd"):
        raise KernelRegistrationError(
            f"accel.kernels.register({op.qualname}): {op.qualname} is CompositeImplicitAutograd: it has no "
            f"autograd formula of its own (autograd differentiates the ops it decomposes to), so a kernel at the "
            f"backend key would run without autograd. Override the op it decomposes to instead, e.g. "
            f"aten::_softmax for softmax, aten::_fused_rms_norm for rms_norm, aten::native_layer_norm for "
            f"layer_norm (torch.ops.{op.namespace}.{op.name}.{op.overload}._schema and a profiler trace show "
            f"which ops run).")


#: Forward op -> the op its autograd formula calls for the gradient (declared by the op families), where
#: ATen may lack a kernel for the second at a key whose forward is only a composite
#: (``aten::_fused_rms_norm`` on CPU).
BACKWARD_OF: dict[str, str] = {}


def declare_backward(forward: str, backward: str) -> None:
    """Record that autograd differentiates ``forward`` (a qualname) with ``backward``; :func:`check_training`
    then warns while an override leaves ``forward`` live at a composite-only key without ``backward``."""
    BACKWARD_OF[forward] = backward


def orphaned_forwards() -> set[tuple[str, str]]:
    """``(forward op, dispatch key)`` pairs whose installed kernel would break training.

    Where ATen has only a composite for a forward op at a key (``aten::_fused_rms_norm`` on CPU), autograd
    differentiates what the composite decomposes to; a live accel override of it at that key makes autograd
    use the op's own formula instead, which calls the backward op (:data:`BACKWARD_OF`). Where that op has
    no kernel at the key either (no ATen kernel, no live accel override there: none registered, or disabled),
    every backward through the forward fails with "Could not run ... with arguments from the 'CPU' backend".
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    out = set()
    for (qualname, key), slot in SLOTS.items():
        backward = BACKWARD_OF.get(qualname)
        if backward is None or not slot.live or not slot.composite_only:
            continue
        if not has("aten::empty.memory_format", key):  # a key this torch build does not serve (CUDA on a CPU
            continue                                   # build): no tensor of it can reach the forward
        bslot = SLOTS.get((backward, key))
        if bslot is not None:
            if bslot.live or bslot.original is not None:
                continue
        elif has(backward, key) or has(backward, "CompositeExplicitAutograd"):
            continue  # an ATen kernel at the key, or a default kernel for every key (a custom op's)
        out.add((qualname, key))
    return out


def check_training(api: str) -> None:
    """After ``api`` changed what is installed: warn (:class:`~accel.errors.KernelRegistrationWarning`) once per
    forward op and key that has just become unable to train (:func:`orphaned_forwards`); inference still works,
    and the warning says what to register or enable. Called with ``_LOCK`` held."""
    now = orphaned_forwards()
    for qualname, key in sorted(now - STATE.orphans):
        backward = BACKWARD_OF[qualname]
        warnings.warn(KernelRegistrationWarning(
            f"accel.kernels.{api}: {qualname} now has an accel kernel at dispatch key {key!r}, where ATen has "
            f"only a composite of it, so autograd calls {backward}, which has no kernel at {key!r} (no ATen "
            f"kernel, no live accel override): every backward through {qualname} fails "
            f"while this lasts; inference works. Register {backward} at that backend first, with fallback= an "
            f"eager backward, or register the op family's forward and backward together "
            f"(accel.kernels.families()[...].register(dsl, backends)); or keep it enabled."), stacklevel=3)
    STATE.orphans = now



_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: ``autograd.Function.apply`` below its Python wrapper (the C++ classmethod), where this torch has it.
_C_APPLY = torch._C._FunctionBase.__dict__.get("apply")
_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
_transforms = getattr(torch._C, "_are_functorch_transforms_active", None)


def direct_apply(function: type[torch.autograd.Function]) -> Callable:
    """``function.apply`` without its Python wrapper where the wrapper would do nothing: ``function`` has no
    ``setup_context`` (the wrapper binds default arguments for one), no ``torch.func`` transform is active and no
    tensor argument is a functorch wrapper (a tensor that escaped a transform, which the wrapper unwraps); under
    ``torch.compile``, in any other case, and on a torch without these internals, ``function.apply`` itself.

    Why: the wrapper's checks cost about 2 µs per call on this project's CPU host (8.7 against 6.9 µs for a
    twelve-argument node; a patched HF Llama layer applies five nodes per forward:
    ``benchmarks/model_host_cpu.py``).

    Args:
        function: an ``autograd.Function`` subclass with the old-style ``forward(ctx, *args)``.

    Returns:
        A function of ``function``'s positional arguments returning what ``function.apply`` returns.
    """
    apply = function.apply
    if (_C_APPLY is None or _wrapped is None or _transforms is None
            or function.setup_context is not torch.autograd.Function.setup_context):
        return apply
    direct = _C_APPLY.__get__(None, function)
    tensor, wrapped, transforms = torch.Tensor, _wrapped, _transforms

    compiling = torch.compiler.is_compiling

    def run(*args: Any) -> Any:
        if compiling() or transforms():  # (torch.compile traces Function.apply, not the C++ classmethod)
            return apply(*args)
        for a in args:
            if isinstance(a, tensor) and wrapped(a):
                return apply(*args)
        return direct(*args)

    run.__doc__ = f"{function.__name__}.apply (:func:`accel.kernels.core.autograd.direct_apply`)."
    return run


def eager_autograd(op: Any, setup_context: Callable, backward: Callable) -> Callable:
    """``op(*args)`` with the formula a custom op registered (``register_autograd``'s ``setup_context`` and
    ``backward``), run as one plain ``torch.autograd.Function`` whose forward calls ``op`` below autograd.

    The same kernels answer (the backend key's: accel's router, or the op's default) and the same formula
    differentiates; what is skipped is the custom op's Python autograd layer (argument defaults filled, a
    redispatch), about a fifth of a small routed norm's host time per forward and backward on this project's
    CPU host (44.7 against 35.9 µs: ``benchmarks/eager_autograd_host.py``,
    ``benchmarks/results/cpu/eager_autograd_host_cpu.md``). Used where that holds: eager, no ``torch.func`` transform, every
    tensor argument a plain ``Tensor`` or ``Parameter``; anywhere else (``torch.compile``, transforms, tensor
    subclasses) the call is ``op(*args)`` itself. With grad disabled the op runs below autograd directly.

    Args:
        op: the custom op's overload (``torch.ops.accel.rms_norm_hf.default``), called with every argument.
        setup_context, backward: the functions passed to its ``register_autograd``.

    Returns:
        A function of the op's arguments (all positional) returning what the op returns.
    """

    def forward(ctx, *args):
        answer = _PENDING.answer  # set by answered() just before apply: this call's decided kernel
        if answer is None:
            output = below_autograd(op, *args)  # grad mode is off inside an autograd.Function's forward
        else:
            _PENDING.answer = None
            output = answer(*args)
        setup_context(ctx, args, output)
        return output

    def run_backward(ctx, *grads):
        return backward(ctx, *grads)

    # built with type(): autograd names the graph node after the class (``Eager_accel_rms_norm_hfBackward``)
    _Eager = type(f"Eager_{op.name().replace('::', '_')}", (torch.autograd.Function,),
                  {"forward": staticmethod(forward), "backward": staticmethod(run_backward), "__module__": __name__})

    apply = direct_apply(_Eager)

    def call(*args):
        if (torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None
                or any(isinstance(a, torch.Tensor) and type(a) not in _PLAIN for a in args)):
            return op(*args)
        if not torch.is_grad_enabled():
            return below_autograd(op, *args)
        return apply(*args)

    def answered(answer, *args):
        """``call(*args)`` where ``answer`` is :func:`decide`'s :class:`Answer` for these arguments, decided just
        now: the same node and formula, its forward running ``answer`` instead of routing the call again."""
        if type(answer) is not Answer or not answer.holds(args):
            return call(*args)
        if not torch.is_grad_enabled():
            return answer(*args)
        _PENDING.answer = answer
        try:
            return apply(*args)
        finally:
            _PENDING.answer = None

    call.function = _Eager  # type: ignore[attr-defined]
    call.answered = answered  # type: ignore[attr-defined]
    return call


class _Pending(threading.local):
    answer: Any = None


#: The :class:`Answer` an ``eager_autograd`` call hands its Function's forward (per thread: set just before the
#: Function is applied, taken by its forward).
_PENDING = _Pending()


class Answer:
    """``op(*args)`` decided ahead of the call (:func:`decide`): the override's function for these arguments, run
    as accel's router runs it (inside the slot's guard, booked as routed, ATen's result where it raises), without
    routing the call again. Valid for the arguments it was decided for, at once (nothing in between may change
    them, the registry or the tuning tables)."""

    __slots__ = ("args", "fn", "ov", "slot")

    def __init__(self, slot: Slot, ov: Any, fn: Callable, args: tuple) -> None:
        self.slot, self.ov, self.fn, self.args = slot, ov, fn, args

    def holds(self, args: tuple) -> bool:
        """Whether this answer is for ``args`` (the same objects) and its override is still live at its slot (not
        disabled or unregistered since the decision)."""
        mine = self.args
        return (len(args) == len(mine) and all(a is b for a, b in zip(args, mine))
                and self.ov in self.slot.live)

    def __call__(self, *args: Any) -> Any:
        return self.slot.run_guarded(self.ov, args, {}, self.fn)


def decide(slot: Slot, args: tuple, answer: bool = True) -> Answer | bool:
    """How ``slot``'s live overrides answer ``op(*args)`` when eager code calls it now (not compiling, no
    ``torch.func`` transform: the caller checks both), in the router's order: an :class:`Answer` where an
    override takes the call and the op's call below autograd would reach accel's router directly
    (:func:`below_autograd`'s conditions: no torch dispatch or function mode, no profiler, plain tensors);
    ``True`` where one takes it but the call must go through the dispatcher (and where planning failed or one of
    the slot's impls is running: the routed call then gets ATen's, or the next override's, answer, as the router
    gives it); ``False`` where none takes it
    (each override counts it as declined). The eager call of an op (``eager_autograd``'s ``answered``) then runs
    the answer instead of routing the call a second time: the signature, memo lookup and router, about 3 µs per
    call on this project's CPU host (``benchmarks/model_host_cpu.py``). ``answer=False``: ``True`` in place of an
    ``Answer`` (a decision alone, for arguments that are stand-ins of the call's)."""
    for ov in slot.live:
        fn = ov.take(args, {})
        if fn is not None:
            if (not answer or fn is plans.FALLBACK or slot.direct is None or slot.inside.on
                    or not _direct_ok(args)):
                return True
            return Answer(slot, ov, fn, args)
    return False


def decision_epoch(slot: Slot) -> tuple | None:
    """What :func:`decide`'s answer for one argument signature depends on besides that signature, as a value to
    compare by ``==``: the slot's live overrides (the tuple itself, replaced whenever one is enabled, disabled,
    registered or removed), the tuning tables' generation, and each live override's failure count (a failure
    denies its shapes and empties its memo). A caller that kept a decision for a signature may reuse it while
    the epoch is unchanged. ``None`` where a live override's ``cond`` is not cacheable (its answer may depend on
    anything): nothing may be kept."""
    live = slot.live
    for ov in live:
        if not ov.cacheable:
            return None
    return (live, table.GENERATION, tuple(ov.failed for ov in live))


def keeps_graph() -> bool:
    """Whether the backward running now keeps its graph (``retain_graph=True``, or ``create_graph=True`` which
    implies it): then a saved tensor may be read by a later backward and must not be written or freed by this
    one. ``True`` outside a backward (torch's own answer), and where this torch lacks
    ``_get_current_graph_task_keep_graph``: the safe answer for a caller deciding whether to reuse a saved
    tensor's memory."""
    keep = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keep is None else bool(keep())


def first_order(what: str, instead: str) -> Callable:
    """Decorator for an ``autograd.Function``'s ``backward`` whose own ops are not recorded: with grad mode on
    (``create_graph=True``: a gradient penalty, a Hessian-vector product) it raises instead of returning
    gradients that would silently lack their own graph; else it runs ``backward`` under ``no_grad``.

    Args:
        what: the function's public name, for the message.
        instead: what to call or pass for a differentiable backward, for the message.

    Raises (from the decorated backward):
        RuntimeError: grad mode is on (``backward(create_graph=True)`` or ``autograd.grad(create_graph=True)``).
    """

    def wrap(backward: Callable) -> Callable:
        @functools.wraps(backward)
        def run(ctx, *grads):
            if torch.is_grad_enabled():
                raise RuntimeError(f"{what}: no double backward (create_graph=True): its backward's matmuls are not "
                                   f"recorded, so the gradients would have no graph of their own. {instead}")
            with torch.no_grad():
                return backward(ctx, *grads)

        return run

    return wrap


_engine_run_backward = getattr(torch.autograd.graph, "_engine_run_backward", None)


def graph_grad(output: torch.Tensor, inputs: tuple[torch.Tensor, ...], grad: torch.Tensor,
               retain_graph: bool) -> tuple[torch.Tensor, ...]:
    """``torch.autograd.grad(output, inputs, grad, retain_graph=retain_graph)`` for a graph the caller built itself
    (``grad`` of ``output``'s shape and dtype; every input reached): the autograd engine's call without
    ``autograd.grad``'s argument handling, which costs about 14 µs per call on this project's CPU host (44 against
    30 µs for one small SDPA's backward); ``autograd.grad`` itself on a torch without that entry point. Not a
    ``__torch_function__`` call: a mode or subclass that intercepts ``autograd.grad`` does not see it (the
    caller's graph is its own node's, made of plain tensors).

    Returns:
        The gradients of ``inputs``, in order.
    """
    if _engine_run_backward is None:
        return torch.autograd.grad(output, inputs, grad, retain_graph=retain_graph)
    return _engine_run_backward((output,), (grad,), retain_graph, False, inputs, False, False)


def shared_input_backward(rows: Sequence[torch.Tensor | None], weights: Sequence[torch.Tensor],
                          need_weight: Sequence[bool], need_bias: Sequence[bool], need_input: bool,
                          make_input: Callable[[], torch.Tensor]) -> tuple:
    """The gradients of linears that read one input ``x`` (``F.linear(x, weights[i], bias_i)``), from each output's
    gradient as ``[tokens, out_i]`` rows (``None``: that output got none, and costs no GEMM).

    Per linear, ``rows[i].t() @ x`` and ``rows[i].sum(0)``, the ops autograd runs for ``F.linear`` (the same
    bits); ``x``'s gradient is ``rows[0] @ weights[0]`` with each further term added inside its GEMM
    (``addmm_``, beta 1): no ``[tokens, in]`` temporary and no add kernel, one rounding of the sum where
    autograd rounds each term and adds. ``make_input()`` gives ``x`` (kept or recomputed, called under
    ``no_grad``) only where a weight gradient is wanted; it is released before ``x``'s gradient is computed.

    Returns:
        ``(grad_x rows or None, [grad_weight_i or None], [grad_bias_i or None])``; ``need_bias[i]`` is to be
        false for a linear without a bias.
    """
    count = len(weights)
    grad_w: list = [None] * count
    grad_b: list = [None] * count
    if any(need_weight[i] and rows[i] is not None for i in range(count)):
        with torch.no_grad():
            x = make_input()
        x_rows = x.reshape(-1, x.shape[-1])
        del x
        for i in range(count):
            if need_weight[i] and rows[i] is not None:
                grad_w[i] = rows[i].t().mm(x_rows)
        del x_rows
    for i in range(count):
        if need_bias[i] and rows[i] is not None:
            grad_b[i] = rows[i].sum(0)
    grad_x = None
    if need_input:
        for r, w in zip(rows, weights):
            if r is not None:
                grad_x = r.mm(w) if grad_x is None else grad_x.addmm_(r, w)
    return grad_x, grad_w, grad_b


def below_autograd(op: Any, *args: Any) -> Any:
    """``op(*args)`` below autograd where no graph is being recorded (a backward formula's own op call without
    ``create_graph``): the backend kernel directly, without the custom op's autograd layer; with grad mode on
    (``create_graph=True``), the op's full call as it was.

    The backend kernel is accel's router where one is installed for the op at the first argument's dispatch key
    (an accel op with a live override there, :attr:`~accel.kernels.core.slot.Slot.direct`), called from Python
    with the key's key set: the same decision and kernel as through the dispatcher, without its hop (about
    5.5 µs of host time per call on this project's CPU host, where the whole routed call of a small norm is
    12.4 µs). Only where the dispatcher could do nothing else: eager, no torch dispatch or function mode, no
    profiler recording, no ``torch.func`` transform, no JIT trace, every tensor argument a plain ``Tensor`` or
    ``Parameter``."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return op(*args)
    slot = _direct_slot(op, args)
    if slot is not None:
        return slot.direct(slot.keyset, *args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


#: op overload -> its qualname (``OpOverload.name()`` builds the string per call)
_NAMES: dict[Any, str] = {}


def _direct_slot(op: Any, args: tuple) -> Any:
    """The slot whose router answers ``op(*args)`` at the first argument's dispatch key, to call without the
    dispatcher (:func:`below_autograd`), or ``None`` where the dispatcher must run: a torch dispatch or function
    mode, the profiler (which records the op's call there), a ``torch.func`` transform, a JIT trace, a tensor
    subclass, or no accel router at that key. Called with grad mode off and not compiling."""
    if not _direct_ok(args):
        return None
    name = _NAMES.get(op)
    if name is None:
        name = _NAMES.setdefault(op, op.name())
    key = dispatch_key(args[0].device.type)
    slot = SLOTS.get((name, key)) if key is not None else None
    return slot if slot is not None and slot.direct is not None else None


def _direct_ok(args: tuple) -> bool:
    """Whether the dispatcher would do nothing but call the backend kernel for ``args`` (:func:`_direct_slot`)."""
    if (torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
            or torch._C._autograd._profiler_enabled() or torch._C._functorch.peek_interpreter_stack() is not None
            or torch._C._get_tracing_state() is not None or not args or type(args[0]) not in _PLAIN):
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and type(a) not in _PLAIN:
            return False
    return True
