"""The causal-LM role: the loss of ``*ForCausalLM`` (and GPT-2's LM head model) from accel's chunked linear
cross-entropy on the last hidden states, the ``[tokens, vocab]`` logits never stored.

The class's own ``forward`` keeps its decorator chain (``can_return_tuple``, ``deprecate_kwarg``, ...:
:func:`.code.rewrap`); only its centre is accel's. The fused loss runs where the call is what Hugging Face's
``ForCausalLMLoss`` computes on ``lm_head``'s own output: labels given, ``logits_to_keep=0``, the model's
``loss_function`` transformers' own, and ``lm_head`` a plain ``nn.Linear`` whose call
is its ``forward`` alone (no hook, adapter, replaced ``forward`` or tensor-subclass weight: the fused loss reads
the weight, so anything calling the module would add is skipped). A ``config.final_logit_softcapping`` (Gemma 2)
is the op's ``softcap`` (``cap * tanh(z / cap)`` inside the loss kernel, :func:`accel.nn.lm_head.lm_head_loss`'s
option). Elsewhere the model's own code runs, and a step-aside a user can change is said once
(``IntegrationWarning``).
"""

from __future__ import annotations

import inspect
import math
import sys
import typing
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accel._once import warn_once
from accel.errors import IntegrationWarning

from .code import RewrapError, innermost, rewrap, subclass
from .guards import PLAIN_TENSORS, accel_takes, global_hooks, hooked, instance_forward, is_sharded, live

__all__ = ["OP", "as_options", "build", "head_reason", "instance_reason"]

OP = "accel::linear_cross_entropy"
_ARGS = ("labels", "logits_to_keep", "kwargs")
#: Keys of the step-asides already said.
_SAID: set = set()


def instance_reason(module: nn.Module) -> str | None:
    """Why this causal LM is not replaced although its class is verified, or ``None``."""
    head = getattr(module, "lm_head", None)
    if not isinstance(head, nn.Linear):
        return "lm_head is not an nn.Linear"
    cap = _softcap(getattr(module, "config", None))
    if isinstance(cap, str):
        return cap
    return instance_forward(module)


def _softcap(config: Any) -> float | str:
    """The config's final-logit cap as the op's ``softcap`` (0.0 for none), or why it is not one."""
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is None:
        return 0.0
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap <= 0:
        return f"config.final_logit_softcapping={cap!r} is not a finite cap > 0"
    return float(cap)


def head_reason(head: Any) -> str | None:
    """Why the fused loss may not read ``head``'s parameters in place of calling it, or ``None``: it is not an
    ``nn.Linear`` itself (a subclass's ``forward`` may add an adapter: loralib, or a quantised layer), its call
    runs hooks or a replaced ``forward`` (accelerate's), or its weight or bias is a tensor subclass (fake
    quantisation, float8 training, ``DTensor``), whose ``F.linear`` differs from its raw values."""
    if type(head) is not nn.Linear:
        return (f"lm_head is a {type(head).__name__}, not an nn.Linear itself (a subclass's forward may add to "
                f"F.linear, an adapter say)")
    if hooked(head) or global_hooks():
        return "lm_head's call runs hooks or a replaced forward, which the fused loss would skip"
    params = head.__dict__["_parameters"]
    for name in ("weight", "bias"):
        p = params.get(name)
        if p is not None and type(p) not in PLAIN_TENSORS:
            return f"lm_head.{name} is a {type(p).__name__}, whose F.linear may differ from its raw values"
    return None


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)``, or ``(None, reason)`` where the class's forward lacks the causal LM's
    arguments (``labels``, ``logits_to_keep``, ``**kwargs``) or its return annotation is not a ``ModelOutput``
    with ``loss`` and ``logits``."""
    outer = cls.forward
    inner = innermost(outer)
    try:
        sig = inspect.signature(inner)
    except (TypeError, ValueError) as exc:
        return None, f"its forward has no signature ({exc})"
    params = list(sig.parameters)
    if not all(a in params for a in _ARGS):
        return None, "its forward lacks labels, logits_to_keep or **kwargs"
    out_cls = _output_class(sig.return_annotation, inner)
    fields = getattr(out_cls, "__dataclass_fields__", {})
    if out_cls is None or "loss" not in fields or "logits" not in fields:
        return None, "its forward's return annotation is not a ModelOutput with loss and logits"
    try:
        from accel.nn import linear_cross_entropy as lce
    except ImportError as exc:
        return None, f"accel.nn.functional.linear_cross_entropy is not available here ({exc})"
    try:  # the loss accel computes: transformers' own function object (a wrapped or custom one is the model's)
        from transformers.loss.loss_utils import ForCausalLMLoss as own_loss
    except ImportError as exc:
        return None, f"transformers.loss.loss_utils.ForCausalLMLoss does not import here ({exc})"
    rest = [f for f in fields if f not in ("loss", "logits")]
    cache_names = [n for n in ("past_key_values", "cache") if n in params]
    labels_at = params.index("labels") - 1  # positional arguments after self that reach labels: more than this
    # transformers 4.x builds an explicit causal mask where no cache is passed (its SDPA then takes a mask, and
    # accel's one-node attention steps aside): there the cache a training step drops costs less than its absence
    cache_param = "use_cache" in params and bool(cache_names) and _major(cls) >= 5

    def centre(self, *args, **kwargs):
        # under no_grad (evaluation: Trainer.evaluate's compute_metrics reads the logits) the model's own code runs
        return_logits = kwargs.pop("return_logits", False)
        # without grad, only where patch(eval_loss=True) said the caller reads the loss alone
        fuse = torch.is_grad_enabled() or self.__dict__.get("accel_eval_loss", False)
        if not fuse or (kwargs.get("labels") is None and len(args) <= labels_at):
            return inner(self, *args, **kwargs)  # no loss to fuse: a generation or evaluation step, unbound
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:
            return inner(self, *args, **kwargs)  # the class's own code says what is wrong with the call
        a = bound.arguments
        extra = dict(a.get("kwargs", {}))
        labels = a.get("labels")
        head = self.lm_head
        keep = a.get("logits_to_keep", 0)
        cap = _softcap(self.config)
        if (labels is None or isinstance(cap, str) or not isinstance(keep, int)
                or keep != 0 or self.loss_function is not own_loss or _steps_aside(head)):
            return inner(self, *args, **kwargs)  # the class's own forward, unchanged (logits as always)
        base_args = {k: v for k, v in a.items() if k not in ("self", "return_dict", *_ARGS)}
        # a forward that takes return_dict itself (transformers 4.x GPT-2; can_return_tuple pops it before)
        return_dict = extra.pop("return_dict", a.get("return_dict"))
        if return_dict is None:  # (config.return_dict: use_return_dict is deprecated from 5.x and warns)
            return_dict = getattr(self.config, "return_dict", True)
        if (cache_param and self.training and a.get("use_cache") is None
                and all(a.get(n) is None and extra.get(n) is None for n in ("past_key_values", "cache"))
                and not (a.get("position_ids") is not None and a.get("attention_mask") is None)
                and live(OP, head.weight.device.type)):
            # a training step's cache is dropped with the output: not built, unless use_cache=True is passed
            base_args["use_cache"] = False
        outputs = _base_model(self)(**base_args, **extra, return_dict=True)
        hidden = outputs.last_hidden_state
        loss = _loss(hidden, head, labels, extra, lce, getattr(self, "accel_loss_options", None), cap)
        if loss is None:  # no accel kernel takes the loss here: the model's own code (logits, loss_function)
            logits = _capped(head(hidden), cap)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **extra)
        else:
            logits = _capped(head(hidden), cap) if return_logits else None
        out = out_cls(loss=loss, logits=logits, **{f: getattr(outputs, f, None) for f in rest})
        return out if return_dict else out.to_tuple()

    # transformers reads the forward's parameters (generate's position_ids and logits_to_keep, Trainer's
    # dataset columns): inspect.signature stops at __signature__, so the class's own parameters show through
    centre.__signature__ = sig
    try:
        forward_accel = rewrap(outer, centre)
    except RewrapError as exc:
        return None, f"its forward's decorators cannot be kept around accel's loss ({exc})"
    forward_accel.__doc__ = (f"{cls.__name__}.forward, with the loss from accel's chunked linear cross-entropy "
                             f"when labels are given with grad on (or under no_grad after patch(eval_loss=True)) "
                             f"and an accel kernel takes it: logits are then None unless return_logits=True. "
                             f"Elsewhere the model's own logits and loss_function. In "
                             f"training mode with labels and no cache passed, no KV cache is built (nor "
                             f"returned) unless use_cache=True is passed.")
    return subclass(cls, "causal_lm", {"forward": forward_accel}), None


def _capped(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """The logits as the causal LMs with a final-logit cap compute them (Gemma 2: divide, ``tanh``, multiply)."""
    return logits if not cap else torch.tanh(logits / cap) * cap


def _major(cls: type) -> int:
    """The major version of the transformers that defines ``cls``."""
    package = sys.modules.get(cls.__module__.partition(".")[0])
    try:
        return int(str(getattr(package, "__version__", "0")).split(".")[0])
    except ValueError:
        return 0


def _output_class(annotation: Any, fn: Any) -> type | None:
    """The ``ModelOutput`` class of a forward's return annotation: itself, the one in a ``Union`` with ``tuple``
    (transformers 4.x: ``Union[tuple, CausalLMOutputWithCrossAttentions]``), or a string naming either."""
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, fn.__globals__)  # noqa: S307 - the modeling module's own annotation
        except Exception:  # noqa: BLE001 - an annotation that does not evaluate names no output class
            return None
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and "logits" in getattr(candidate, "__dataclass_fields__", {}):
            return candidate
    return None


def _base_model(model: nn.Module) -> nn.Module:
    """The decoder the causal LM runs before its head: its ``base_model_prefix`` submodule (``model``,
    ``transformer``; Gemma 3's text model names ``language_model`` but holds ``model`` on transformers 4.57)."""
    mods = model._modules
    for name in (model.base_model_prefix, "model", "transformer"):
        if name in mods:
            return mods[name]
    return getattr(model, model.base_model_prefix)


def _steps_aside(head: nn.Module) -> bool:
    """Whether ``head``'s own call must compute the logits (:func:`head_reason`); said once per reason."""
    if is_sharded(getattr(head, "weight", None)):
        return False  # an FSDP2 group of lm_head's own: _loss says that case and runs the model's code
    why = head_reason(head)
    if why is None:
        return False
    warn_once(_SAID, why, f"accel.integrations.transformers: the model's own logits and loss run, not accel's fused "
                          f"loss: {why}. To get the fused loss, merge the adapter (peft's merge_and_unload) or "
                          f"remove the hook; report(model) lists the other roles.", IntegrationWarning, stacklevel=4)
    return True


def as_options(lce: Any, options: Any) -> Any:
    """``options`` as accel's ``LinearCrossEntropyOptions`` (torch's own class read field by field:
    :func:`accel.nn.options.as_options`, the one converter every loss path uses).

    Raises:
        TypeError: ``options`` cannot be read as one (another type, or a value accel's chunked path does not take).
    """
    from accel.errors import LossInputError
    from accel.nn.options import as_options as convert

    try:
        return convert(options, "accel.integrations.transformers.patch(loss_options=...)")
    except LossInputError as exc:
        raise TypeError(f"accel.integrations.transformers: loss_options {options!r} cannot be read as "
                        f"LinearCrossEntropyOptions ({exc}). Pass accel.nn.LinearCrossEntropyOptions(...).") from exc


def _options(lce: Any, options: Any, n: int, d: int, c: int, dtype: torch.dtype, device: torch.device) -> Any:
    """accel's ``LinearCrossEntropyOptions`` for one loss call: ``options`` as given, or, for ``None``, chunks of
    :func:`accel.nn.linear_cross_entropy.model_chunk_rows` rows (not the aspect-ratio rule's: 64-row chunks
    for Qwen3's vocabulary)."""
    if options is None:
        return lce.LinearCrossEntropyOptions(batch_chunk_size=lce.model_chunk_rows(n, d, c, dtype, device),
                                             chunking_method=None)
    return as_options(lce, options)


def _loss(hidden: torch.Tensor, head: nn.Linear, labels: torch.Tensor, extra: dict[str, Any],
          lce: Any, options: Any, softcap: float = 0.0) -> torch.Tensor | None:
    """``ForCausalLMLoss`` (transformers' default) on the last hidden states, without the logits: the labels
    shifted by one (or ``shift_labels``), mean over non-ignored tokens or sum / ``num_items_in_batch``, the
    logits capped by ``softcap`` (0: none) inside the op. The loss is fp32, as HF's
    (:func:`accel.nn.lm_head.lm_head_loss`). ``None`` where no accel kernel takes the call
    (:func:`.guards.accel_takes`): the caller runs the model's own loss."""
    if not live(OP, hidden.device.type) or type(hidden) is not torch.Tensor:  # before any op: the model's own
        return None  # loss runs exactly as without accel (a DTensor activation: its own dispatch serves it)
    ignore_index = extra.get("ignore_index", -100)
    num_items = extra.get("num_items_in_batch")
    shift_labels = extra.get("shift_labels")
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    x = hidden.reshape(-1, hidden.shape[-1])
    w, b = head.weight, head.bias
    if not torch.compiler.is_compiling() and is_sharded(w):
        warn_once(_SAID, "lm_head-dtensor",
                  "accel.integrations.transformers: lm_head.weight is a sharded DTensor when the loss reads it (an "
                  "FSDP2 group of its own gathers it only when lm_head's forward runs, which the fused loss never "
                  "calls), so the model's own logits and loss run: keep lm_head in the root module's group "
                  "(fully_shard(model) after the decoder layers, not fully_shard(model.lm_head)) to get accel's loss",
                  IntegrationWarning, stacklevel=2)
        return None
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):  # as F.linear would run under autocast: low precision operands
        dtype = torch.get_autocast_dtype(device_type)
        x, w, b = x.to(dtype), w.to(dtype), (None if b is None else b.to(dtype))
    elif w.dtype != x.dtype:
        w, b = w.to(x.dtype), (None if b is None else b.to(x.dtype))
    target = shift_labels.reshape(-1).to(x.device)
    reduction = "sum" if num_items is not None else "mean"
    opts = _options(lce, options, x.shape[0], x.shape[1], w.shape[0], x.dtype, x.device)
    r = opts.resolve(x.shape[0], x.shape[1], w.shape[0], x.dtype, x.device)
    grad = torch.is_grad_enabled()
    if not accel_takes(OP, x, w, target, b, None, reduction, ignore_index, 0.0, r.batch_chunk_size,
                       r.acc_policy, r.acc_dtype, r.allow_retain_graph, x.requires_grad and grad,
                       w.requires_grad and grad, b is not None and b.requires_grad and grad, softcap, 0.0):
        return None
    # no host-side range check (a device-to-host read per step: a stall); a label outside the vocabulary gives a
    # NaN loss (HF's eager cross_entropy asserts on the device)
    from accel.nn.lm_head import lm_head_loss

    loss = lm_head_loss(x, w, target, bias=b, softcap=softcap or None, reduction=reduction, ignore_index=ignore_index,
                        options=opts, check_target_range=False)
    if reduction == "sum":
        n = torch.as_tensor(num_items, device=loss.device)
        # HF's sum / num_items, NaN for 0 / 0 as theirs; the gradient goes through a divisor of 1 where
        # num_items is 0: every token is ignored then and each gradient is 0 (as cross_entropy's backward gives),
        # where 1 / 0 through the fused backward would make it NaN
        total = loss.detach()
        safe = torch.where((n == 0) & (total == 0), torch.ones_like(n), n)
        loss = loss / safe + (total / n - total / safe)
    return loss
