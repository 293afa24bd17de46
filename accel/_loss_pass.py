"""accel.compile's LM-head loss pass: in the graph Dynamo captures, before AOTAutograd, the pattern

    linear(x, W[, b]) -> [.float() / .to(float32)] -> [row slices, flatten/view/reshape of the leading dims]
        -> F.cross_entropy(logits, target[, ignore_index=, reduction=, label_smoothing=])

(or ``nll_loss(log_softmax(logits, dim=-1), target)``) becomes accel's fused loss
(:func:`accel.nn.lm_head.lm_head_loss`: the chunked ``accel::linear_cross_entropy``
op, whose backward is the op's own), the slicing and reshaping moved onto ``x`` (a linear layer is row-wise:
``linear(x)[rows] == linear(x[rows])``). The ``[tokens, vocab]`` logits, their fp32 copy and their gradient are
never stored. Inductor materialises all three (torchtitan's Llama-3 vocabulary of 128256: 4 GiB of fp32 logits
per 8192 tokens).

A match is rewritten only where it is provably the same computation: every intermediate has the loss as its only
user, the weight is a plain tensor (no tensor subclass: a quantised or sharded weight computes something else),
the target holds class indices (integer dtype: soft labels are left), the loss's input is ``[N, C]`` or ``[C]``
fp32 logits (a bf16 loss is left: the fused loss computes in fp32, a different number), and ``cross_entropy`` has
no class ``weight=``. Anything else is left as it is, with the reason (:class:`LossPassReport`). A target outside
``[0, C)`` that is not ``ignore_index`` raises at run time (``torch._assert_async``: a ``RuntimeError``, where eager
``cross_entropy`` raises ``IndexError`` on a CPU), never a NaN.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["LossPassReport", "fused_cross_entropy", "rewrite"]

_LINEAR = {torch._C._nn.linear, F.linear}
_CROSS_ENTROPY = {F.cross_entropy}
_SHAPE_METHODS = {"flatten", "view", "reshape", "contiguous"}
_CE_KWARGS = {"ignore_index", "reduction", "label_smoothing"}
#: ``F.cross_entropy``'s parameters in order (``nn.CrossEntropyLoss`` calls it with all of them positionally)
_CE_PARAMS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
_NLL_PARAMS = _CE_PARAMS[:-1]
_NLL = {F.nll_loss}


def _log_softmax_input(node: Any) -> Any | str:
    """The input of ``node`` where it is a log-softmax over the last dimension read by the loss alone, else why
    not (``F.log_softmax(x, dim=-1)`` or ``x.log_softmax(-1)``, no ``dtype=``)."""
    if not hasattr(node, "op") or len(node.users) != 1:
        return "nll_loss's input is not a log_softmax that only the loss reads"
    if node.op == "call_function" and node.target is F.log_softmax:
        params = dict(zip(("input", "dim", "_stacklevel", "dtype"), node.args)) | dict(node.kwargs)
    elif node.op == "call_method" and node.target == "log_softmax":
        params = dict(zip(("input", "dim", "dtype"), node.args)) | dict(node.kwargs)
    else:
        return "nll_loss's input is not a log_softmax"
    x = _value(params.get("input"))
    if params.get("dtype") is not None or x is None or params.get("dim") not in (-1, x.dim() - 1):
        return "the log_softmax is not over the last dimension, or casts (dtype=)"
    return params["input"]


@dataclass
class LossPassReport:
    """What the loss pass did in the graphs of one compiled object: ``rewritten`` names each loss replaced (the
    graph node's name and the source line Dynamo recorded), ``left`` each ``cross_entropy`` kept, with why."""

    rewritten: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"accel.compile loss pass: {len(self.rewritten)} rewritten, {len(self.left)} left"]
        lines += [f"  rewritten: {w}" for w in self.rewritten]
        lines += [f"  left: {w}: {why}" for w, why in self.left]
        return "\n".join(lines)


def fused_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                        ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                        out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """What the pass puts in place of ``cross_entropy(linear(hidden, weight, bias), target, ...)``: the fused loss
    (fp32), cast to the replaced loss's dtype (``out_dtype``)."""
    from accel.nn.lm_head import lm_head_loss
    from accel.nn.options import LinearCrossEntropyOptions, model_chunk_rows

    options = None
    if not all(isinstance(s, int) for s in hidden.shape):  # dynamic shapes: chunks sized as for a large batch
        rows = model_chunk_rows(1 << 20, weight.shape[1], weight.shape[0], hidden.dtype, hidden.device)
        options = LinearCrossEntropyOptions(batch_chunk_size=rows, chunking_method=None)
    # the range check without a host read (lm_head_loss's reads one; a traced graph cannot): an error, as eager
    # cross_entropy raises, never the NaN an out-of-range index gives the kernel
    bad = (target != ignore_index) & ((target < 0) | (target >= weight.shape[0]))
    torch._assert_async(~bad.any(), "accel.compile loss pass: a target is outside [0, num_classes) and is not "
                                    "ignore_index (cross_entropy raises IndexError for it)")
    loss = lm_head_loss(hidden, weight, target, bias=bias, ignore_index=ignore_index, reduction=reduction,
                        label_smoothing=label_smoothing, options=options, check_target_range=False)
    return loss if out_dtype is None or loss.dtype == out_dtype else loss.to(out_dtype)


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if hasattr(node, "meta") else None


def _where(node: Any) -> str:
    """``node``'s name with the user's source line Dynamo recorded: ``name (file.py:12 in forward: code)``; the
    code where the trace holds it (torch 2.9's traces end at the ``File`` line)."""
    import re

    lines = (node.meta.get("stack_trace") or "").strip().splitlines()
    at = max((i for i, ln in enumerate(lines) if ln.strip().startswith('File "')), default=None)
    if at is None:
        return node.name
    m = re.match(r'\s*File "(?:.*/)?([^"/]+)", line (\d+), in (\S+)', lines[at])
    where = f"{m.group(1)}:{m.group(2)} in {m.group(3)}" if m else lines[at].strip()
    code = lines[at + 1].strip() if at + 1 < len(lines) else ""
    return f"{node.name} ({where}: {code})" if code else f"{node.name} ({where})"


def _plain(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter, FakeTensor)


def _step(node: Any, ndim: int, vocab: int) -> tuple[str, Any] | str:
    """``(kind, data)`` for one row-wise step between the logits and the loss, else the reason it is not one."""
    if node.op == "call_method" and node.target == "float" and len(node.args) == 1 and not node.kwargs:
        return "cast", None
    if node.op == "call_method" and node.target == "to":
        if node.args[1:] == (torch.float32,) and not node.kwargs or (
                not node.args[1:] and node.kwargs == {"dtype": torch.float32}):
            return "cast", None
        return f"{node.name}: .to({node.args[1:]}, {node.kwargs}) is not a cast to float32"
    if node.op == "call_method" and node.target in _SHAPE_METHODS:
        if node.target == "contiguous":
            return "method", (node.target, (), {})
        if node.target == "flatten":
            start, end = (list(node.args[1:]) + [0, -1])[:2] if len(node.args) > 1 else (0, -1)
            start, end = node.kwargs.get("start_dim", start), node.kwargs.get("end_dim", end)
            if not isinstance(end, int) or end % ndim == ndim - 1:
                return f"{node.name}: flatten reaches the vocabulary dimension"
            return "method", ("flatten", (start, end), {})
        sizes = node.args[1:]
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if node.kwargs or not sizes or not isinstance(sizes[-1], int):
            return f"{node.name}: {node.target} whose last size is not a constant"
        if sizes[-1] != vocab:
            return f"{node.name}: {node.target} to a last size of {sizes[-1]}, not the vocabulary's {vocab}"
        return "resize", (node.target, tuple(sizes))
    if node.op == "call_function" and node.target is operator.getitem:
        index = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
        if not all(isinstance(i, slice) for i in index):
            return f"{node.name}: an index other than slices"
        if len(index) >= ndim and index[ndim - 1] != slice(None):
            return f"{node.name}: a slice of the vocabulary dimension"
        return "index", index
    return f"{node.name}: {node.op} {getattr(node.target, '__name__', node.target)} between the head and the loss"


def _match(ce: Any) -> tuple | str:
    """``(linear node, the row-wise steps from it to the loss's input in order, target node, the call's arguments
    by name, the nodes from the loss's input back to the linear)``, or why not."""
    nll = ce.target in _NLL
    names = _NLL_PARAMS if nll else _CE_PARAMS
    if len(ce.args) > len(names) or set(ce.kwargs) - set(names):
        return "a loss call with arguments it does not have"
    call = {**dict(zip(names, ce.args)), **ce.kwargs}
    chain = []
    if nll:  # log_softmax + nll_loss: cross_entropy of the log_softmax's input
        inner = _log_softmax_input(call.get("input"))
        if isinstance(inner, str):
            return inner
        chain.append(call["input"])
        call["input"] = inner
    for name in ("weight", "size_average", "reduce"):
        if call.get(name) is not None:
            return f"cross_entropy with {name}= (a class weight, or the old size_average/reduce)"
    inp, target = call.get("input"), call.get("target")
    t, x = _value(target), _value(inp)
    if t is None or t.dtype.is_floating_point or t.dtype == torch.bool:
        return "its target is not integer class indices (soft labels, probabilities)"
    if x is None or x.dim() not in (1, 2):
        return "its input is not [N, C] or [C] (a K-dimensional loss reads classes from dim 1, not the last)"
    if x.dtype != torch.float32:
        return (f"the loss is computed on {x.dtype} logits; the fused loss computes in fp32, a different number "
                f"(cast the logits with .float() to opt in)")
    steps, node = [], inp
    while True:
        if not hasattr(node, "op"):
            return "its input is not a graph value"
        if node.op == "call_function" and node.target in _LINEAR:
            break
        if node.op == "placeholder":
            return "the logits come from outside this graph (a graph break between the head and the loss)"
        if len(node.users) != 1:
            return f"{node.name} has other users than the loss"
        v = _value(node.args[0]) if node.args else None
        if v is None:
            return f"{node.name}: no example value to check"
        chain.append(node)
        step = _step(node, v.dim(), v.shape[-1])
        if isinstance(step, str):
            return step
        steps.append(step)
        node = node.args[0]
    if len(node.users) != 1:
        return "the logits have other users than the loss (they are returned or read elsewhere)"
    weight = node.args[1] if len(node.args) > 1 else node.kwargs.get("weight")
    if not _plain(_value(weight)):
        return f"the head's weight is a {type(_value(weight)).__name__}, not a plain tensor"
    return node, steps[::-1], target, call, chain + [node]


def rewrite(gm: torch.fx.GraphModule, report: LossPassReport | None = None) -> LossPassReport:
    """Rewrite every matching LM-head loss of ``gm`` in place (module docstring); returns ``report`` (or a new
    one) with what was rewritten and what was left and why. Never raises for a graph it cannot rewrite."""
    report = report if report is not None else LossPassReport()
    graph = gm.graph
    changed = False
    for ce in [n for n in graph.nodes if n.op == "call_function" and n.target in _CROSS_ENTROPY | _NLL]:
        found = _match(ce)
        if isinstance(found, str):
            _add(report.left, (_where(ce), found))
            continue
        linear, steps, target, call, chain = found
        hidden = linear.args[0]
        bias = linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")
        width = _value(hidden).shape[-1]
        with graph.inserting_before(ce):
            x = hidden
            for kind, data in steps:
                if kind == "index":
                    x = graph.call_function(operator.getitem, (x, data))
                elif kind == "method":
                    x = graph.call_method(data[0], (x, *data[1]), data[2])
                elif kind == "resize":
                    x = graph.call_method(data[0], (x, *data[1][:-1], width))
            kw = {k: call[k] for k in _CE_KWARGS if k in call}
            out = _value(ce)
            fused = graph.call_function(fused_cross_entropy, (x, linear.args[1], bias, target),
                                        {**kw, "out_dtype": out.dtype if out is not None else None})
        fused.meta.update({k: v for k, v in ce.meta.items() if k != "example_value"})
        ce.replace_all_uses_with(fused)
        graph.erase_node(ce)
        for node in chain:  # the old logits and their steps, now unread (nothing else: a global dead-code pass
            if not node.users:  # would drop in-place updates whose results are unused, buffers' add_)
                graph.erase_node(node)
        _add(report.rewritten, _where(fused))
        changed = True
    if changed:
        gm.recompile()
    return report


def _add(entries: list, entry: Any) -> None:
    """Append ``entry`` once (a recompile of the same code, for a new shape or grad mode, finds it again)."""
    if entry not in entries:
        entries.append(entry)
