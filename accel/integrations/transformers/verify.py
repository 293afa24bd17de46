"""A role is accepted by behaviour: accel's replacement, run on a tiny instance of the same class, gives the
class's own outputs and gradients.

The instance is a tiny model of the family (2 layers, hidden size 32, vocabulary 64, fp32, on CPU, random
parameters, dropout off), built from the model's own config where it has one (the same kinds: biases, head
dims, rotary variants, layer types; only sizes shrunk), else from :data:`.families.TINY`. With accel's ops
answered by their CPU references (:func:`.guards.forcing`), a copy with the family's verified norms and the
role's class replaced runs beside the unpatched copy:

- a training call with labels and no cache: the loss and every parameter's gradient;
- an evaluation call with left padding and ``use_cache=True``: the logits; then one more token with the cache
  passed back under each name the release accepts (``past_key_values``, and ``cache`` from 5.25 on): the logits.

Each must agree within ``rtol=1e-4, atol=1e-5`` (fp32; the fused ops sum in other orders: the loss in chunks,
the shared projections' input gradient inside one GEMM). The RMSNorm role is checked bit for bit on its own
(:func:`.norm.build`). The one-node attention must also have run in the training call, else it is switched off
for the class (the rest of the attention's replacement stays where it passes alone). A role of
:data:`.families.EXPECTED` that fails is said once (``IntegrationWarning``); :func:`report` lists every reason.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import logging
import threading
import warnings
from typing import Any

import torch
from torch import nn

import accel.kernels as ak
from accel._once import warn_once
from accel.errors import IntegrationWarning

from . import attention, causal_lm, decoder_layer, experts, mlp, norm
from .code import innermost
from .families import OPS, TESTED, TINY, expected, family_of, known, original
from .guards import forcing

__all__ = ["ROLE_MODULES", "quiet", "transformers_version", "verdict"]

ROLE_MODULES = {"rms_norm": norm, "mlp": mlp, "attention": attention, "decoder_layer": decoder_layer,
                "causal_lm": causal_lm, "experts": experts}

LOCK = threading.RLock()
#: (class, config key) -> (accel subclass or None, reason it is None).
_VERDICTS: dict[tuple, tuple[type | None, str | None]] = {}
#: class -> (accel subclass or None, reason), before any verification.
_BUILT: dict[type, tuple[type | None, str | None]] = {}
#: (attention class, config key) -> whether its one-node path was verified.
_ONE_NODE: dict[tuple, bool] = {}
#: config key -> (tiny model, its unpatched results).
_TINY: dict[tuple, tuple[nn.Module, dict[str, torch.Tensor]]] = {}
_SAID: set = set()
_RTOL, _ATOL = 1e-4, 1e-5
_VOCAB = 64


def transformers_version() -> str:
    """The installed transformers' version (``"none"`` where it does not import)."""
    try:
        return importlib.import_module("transformers").__version__
    except ImportError:
        return "none"


def verdict(cls: type, role: str, variant: str | None, config: Any = None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)`` for a class whose replacement is verified (module docstring) with ``config``'s
    kinds (``None``: the family's tiny config), else ``(None, reason)``; once per class and config kind."""
    family = family_of(cls)
    key = (cls, _config_key(family, config) if role != "rms_norm" else None)
    with LOCK:
        found = _VERDICTS.get(key)
        if found is None:
            try:
                found = built(cls, role, variant)
                if found[0] is not None and role != "rms_norm":
                    why = _check(cls, role, found[0], family, config)
                    if why is not None:
                        found = (None, why)
            except Exception as exc:  # noqa: BLE001 - a class accel cannot verify is left as it is, with the reason
                found = (None, f"could not be verified ({type(exc).__name__}: {exc})")
            _VERDICTS[key] = found
            if found[0] is None and role in expected(family, int(transformers_version().split(".")[0])):
                warn_once(_SAID, (cls, role),
                          f"accel.integrations.transformers: {cls.__name__} keeps its own code ({role} role, "
                          f"{OPS[role]} not used) on transformers {transformers_version()}: {found[1]}. Tested "
                          f"releases: {', '.join(TESTED)}; report(model) lists every role.",
                          IntegrationWarning, stacklevel=4)
        return found


def built(cls: type, role: str, variant: str | None) -> tuple[type | None, str | None]:
    """The role's accel subclass of ``cls`` (one per class, whatever configs it is verified with: pickle finds
    it by name), or ``(None, reason)`` where the class's code does not have the role's shape."""
    with LOCK:
        found = _BUILT.get(cls)
        if found is None:
            try:
                found = ROLE_MODULES[role].build(cls, variant)
            except Exception as exc:  # noqa: BLE001 - a class accel cannot build for is left as it is, with the reason
                found = (None, f"could not be verified ({type(exc).__name__}: {exc})")
            _BUILT[cls] = found
        return found


class _Keys(threading.local):
    memo: dict | None = None


_KEYS = _Keys()


@contextlib.contextmanager
def config_keys() -> Any:
    """Within the block (one :func:`patch` or :func:`report` call, which reads each config as it is), each
    ``(family, config)``'s kind is worked out once, not once per module (0.6 ms each on this project's CPU host)."""
    outer = _KEYS.memo
    _KEYS.memo = {} if outer is None else outer
    try:
        yield
    finally:
        _KEYS.memo = outer


def _config_key(family: str | None, config: Any) -> tuple:
    memo = _KEYS.memo
    if memo is not None and (family, id(config)) in memo:
        return memo[family, id(config)][1]
    tiny = _tiny_config(family, config)
    key = (family, "default") if tiny is None else (family, repr(sorted(tiny.to_dict().items())))
    if memo is not None:
        memo[family, id(config)] = (config, key)  # (the config kept alive: its id is not reused in the block)
    return key


_DIMS = {"hidden_size": 32, "n_embd": 32, "intermediate_size": 64, "num_hidden_layers": 2, "n_layer": 2,
         "num_attention_heads": 4, "n_head": 4, "vocab_size": _VOCAB, "max_position_embeddings": 64,
         "n_positions": 64, "moe_intermediate_size": 16}
_DROP = ("quantization_config", "architectures", "_name_or_path", "auto_map", "transformers_version")


def _tiny_config(family: str | None, config: Any) -> Any:
    """``config`` with its sizes shrunk (every other field kept), or ``None`` where it is not the family's config
    class or cannot be shrunk (then the family's tiny config of :data:`.families.TINY` stands in)."""
    if family not in TINY or config is None or type(config).__name__ != TINY[family][0]:
        return None
    try:
        d = {k: v for k, v in config.to_dict().items() if k not in _DROP}
        d.update({k: v for k, v in _DIMS.items() if k in d})
        if "num_key_value_heads" in d:
            d["num_key_value_heads"] = 4 if config.num_key_value_heads == config.num_attention_heads else 2
        if d.get("head_dim") is not None:  # 8 where it is hidden / heads (32 / 4), else 16: the same kind
            d["head_dim"] = 8 if config.head_dim * config.num_attention_heads == config.hidden_size else 16
        for k in ("num_experts", "num_local_experts"):  # enough experts for the top-k, some of them idle
            if isinstance(d.get(k), int):
                d[k] = max(4, d.get("num_experts_per_tok") or 2)
        if isinstance(d.get("layer_types"), list):
            kinds = list(dict.fromkeys(d["layer_types"]))
            d["layer_types"] = (kinds * 2)[:2]
        for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if d.get(k) is not None:
                d[k] = d[k] if isinstance(d[k], int) and d[k] < _VOCAB else None
        d.update({k: 0.0 for k, v in d.items() if ("dropout" in k or "pdrop" in k) and isinstance(v, float)})
        d["dtype" if "dtype" in d else "torch_dtype"] = "float32"
        with quiet():
            return type(config).from_dict(d)
    except Exception:  # noqa: BLE001 - a config that cannot be shrunk: the family's tiny one stands in
        return None


def _tiny(family: str, config: Any) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The tiny model of ``family`` with ``config``'s kinds, and what its own code computes (module docstring);
    built once per config kind, without touching the process's random state."""
    key = _config_key(family, config)
    found = _TINY.get(key)
    if found is not None:
        return found
    transformers = importlib.import_module("transformers")
    cfg_name, lm_name, default = TINY[family]
    cfg = _tiny_config(family, config)
    if cfg is None:
        with quiet():  # (the defaults' token ids, e.g. Phi-3's 32000, lie outside the tiny vocabulary)
            cfg = getattr(transformers, cfg_name)(**default)
    # on CPU whatever default device a caller set (patch inside ``with torch.device("meta")``), the random state
    # left as it was, transformers' notices about the shrunk config unsaid
    with torch.random.fork_rng(devices=[]), torch.device("cpu"), quiet():
        torch.manual_seed(0)
        try:
            cfg._attn_implementation = "sdpa"  # the one-node attention's path; every replacement must match it
            model = getattr(transformers, lm_name)(cfg).float()
        except ValueError:  # a family transformers runs with eager attention only (Gemma 2 on 5.25)
            cfg._attn_implementation = "eager"
            model = getattr(transformers, lm_name)(cfg).float()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.2
            p.copy_(noise + 1 if p.dim() == 1 and "norm" in name and not _unit_offset(model, name) else noise)
    found = (model, _run(copy.deepcopy(model)))
    _TINY[key] = found
    return found


def _unit_offset(model: nn.Module, name: str) -> bool:
    owner = model.get_submodule(name.rpartition(".")[0])
    k = known(type(owner))
    return k is not None and k[2] == "gemma"


def _run(model: nn.Module) -> dict[str, torch.Tensor]:
    """The results the module docstring names, by name."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, _VOCAB, (2, 12), generator=gen)
    labels = ids.clone()
    labels[0, :3] = -100
    out: dict[str, torch.Tensor] = {}
    with quiet():
        model.train()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=labels, use_cache=False).loss  # as a training step with accel's loss
        loss.backward()
        out["loss"] = loss.detach()
        out.update({f"grad {n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
        model.eval()
        mask = torch.ones_like(ids)
        mask[1, :4] = 0
        names = [n for n in ("past_key_values", "cache") if n in _params(model)]
        with torch.no_grad():
            for name in names:
                first = model(input_ids=ids, attention_mask=mask, use_cache=True)
                out["logits"] = first.logits
                cache = getattr(first, "past_key_values", None) or getattr(first, "cache", None)
                nxt = torch.randint(1, _VOCAB, (2, 1), generator=gen)
                step = model(input_ids=nxt, attention_mask=torch.cat([mask, mask[:, :1] * 0 + 1], 1), use_cache=True,
                             **{name: cache})
                out[f"next logits ({name}=)"] = step.logits
    return out


@contextlib.contextmanager
def quiet():
    """transformers' deprecation notices (the old cache name) unsaid while a tiny instance runs."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _params(model: nn.Module) -> set[str]:
    return set(inspect.signature(innermost(original(type(model)).forward)).parameters)


def _check(cls: type, role: str, accel_cls: type, family: str | None, config: Any) -> str | None:
    """Why ``accel_cls`` does not compute what ``cls`` does on the tiny instance, or ``None``."""
    if family not in TINY:
        return f"accel has no tiny {family} model to verify it on"
    template, expected = _tiny(family, config)
    instance = next((m for m in template.modules() if type(m) is cls), None)
    if instance is None:
        return f"a tiny {type(template).__name__} has no {cls.__name__} to verify it on"
    why = ROLE_MODULES[role].instance_reason(instance)
    if why is not None:
        return why
    swap = {cls: accel_cls}
    for m in template.modules():  # the family's norms, verified on their own
        k = known(type(m))
        if k is not None and k[1] == "rms_norm" and type(m) not in swap:
            norm_cls, _ = verdict(type(m), "rms_norm", k[2])
            if norm_cls is not None:
                swap[type(m)] = norm_cls
    if role != "attention":
        return _compare(template, swap, expected)
    # the one-node attention: kept for this class and config kind where it ran on the tiny instance and matched
    key = (cls, _config_key(family, config))
    if attention.sdpa_functions() is not None:
        before = attention.STATS.one_node
        if _compare(template, swap, expected, one_node=True) is None and attention.STATS.one_node > before:
            _ONE_NODE[key] = True
            return None
    _ONE_NODE[key] = False  # the rest of the replacement may still hold without it
    return _compare(template, swap, expected)


def one_node(cls: type, config: Any = None) -> bool:
    """Whether the one-node attention was verified for ``cls`` with ``config``'s kind (:func:`verdict` first)."""
    return _ONE_NODE.get((cls, _config_key(family_of(cls), config)), False)


def _references_only() -> contextlib.AbstractContextManager:
    """Accel overrides registered at the CPU key switched off while a tiny instance runs (a test's, or a CPU
    kernel's): the ops' own references answer, and no override's counters see verification's calls."""
    if any("cpu" in o.backends and o.active for o in ak.overrides()):
        return ak.disabled(backend="cpu")
    return contextlib.nullcontext()


def _compare(template: nn.Module, swap: dict[type, type], expected: dict[str, torch.Tensor],
             one_node: bool = False) -> str | None:
    candidate = copy.deepcopy(template)
    for m in candidate.modules():
        if type(m) in swap:
            m.__class__ = swap[type(m)]
            if one_node and m.accel_role == "attention":
                vars(m)["accel_one_node"] = True
    decoder_layer.link_layers(candidate, lambda m: family_of(type(m)) is not None)
    with _references_only(), forcing():
        got = _run(candidate)
    if got.keys() != expected.keys():
        return f"its outputs differ from the class's own on a tiny instance ({sorted(got.keys() ^ expected.keys())})"
    for name, want in expected.items():
        have = got[name]
        if have is None or have.shape != want.shape or not torch.allclose(have, want, rtol=_RTOL, atol=_ATOL,
                                                                          equal_nan=True):
            diff = "shape" if have is None or have.shape != want.shape else f"{(have - want).abs().max().item():.3g}"
            return (f"its {name} differs from the class's own on a tiny instance (max abs difference {diff}; "
                    f"allowed rtol={_RTOL}, atol={_ATOL})")
    return None


def configs(model: nn.Module) -> dict[str, Any]:
    """Family -> the config of ``model``'s first module that holds one of that family's config class (what
    the family's classes in ``model`` are verified with)."""
    found: dict[str, Any] = {}
    for m in model.modules():
        cfg = m.__dict__.get("config")
        family = family_of(type(m)) if cfg is not None else None
        if family in TINY and family not in found and type(cfg).__name__ == TINY[family][0]:
            found[family] = cfg
    return found


def forget() -> None:
    """Forget every verdict and tiny instance: the next :func:`verdict` verifies again (after a class's code was
    changed in this process, by a test or a monkey patch; a model patched before keeps its classes)."""
    with LOCK:
        _VERDICTS.clear()
        _TINY.clear()
        _BUILT.clear()
        _ONE_NODE.clear()
