"""What :func:`.patch` replaced in a model, what reaches accel without a patch, what it left and why."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from . import experts
from .families import FAMILIES, OPS, ROUTES, family_of, known, original
from .causal_lm import head_reason
from .guards import device_type, instance_forward, live
from .verify import ROLE_MODULES, config_keys, configs, verdict

__all__ = ["PatchReport", "check_module", "report"]

#: The registry op behind a report label that names a public function (the causal LM's loss).
OP_OF = {"accel.nn.functional.linear_cross_entropy": "accel::linear_cross_entropy"}


@dataclasses.dataclass
class PatchReport:
    """What :func:`patch` replaced in a model, what reaches accel without a patch, what it left and why.

    Attributes:
        model: the model's class name (its original class for a patched one).
        families: the model families found (``["llama"]``); empty for a model accel does not know.
        replaced: original class name -> ``{"op": accel op, "count": modules}``.
        routes: class name -> ``{"op": ATen op, "count": modules}`` for modules that already reach accel's
            kernels through ATen (``nn.LayerNorm``: GPT-2, BERT).
        left: class name -> ``{"count": modules, "reason": why it is not replaced}`` for modules of a
            known family that are not (or are not yet: ``"not patched"``), and replaced modules whose class
            never runs (a ``forward`` set on the instance since: the ``kernels`` package's ``kernelize``).
        idle: where no accel kernel of a replaced module's op is registered for the model's device (a CPU, or
            before ``accel.kernels.install()``), the sentence saying so: those modules run the model's own code.
            ``None`` where every replaced op has a kernel there (each call's size and dtype still decide).
    """

    model: str
    families: list[str]
    replaced: dict[str, dict[str, Any]]
    routes: dict[str, dict[str, Any]]
    left: dict[str, dict[str, Any]]
    idle: str | None = None

    @property
    def known(self) -> bool:
        """Whether the model has a module of a family accel knows (else :func:`patch` leaves it as it is)."""
        return bool(self.families)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``json.dumps(report.as_dict())``)."""
        return {"model": self.model, "known": self.known, "families": list(self.families),
                "replaced": self.replaced, "routes": self.routes, "left": self.left, "idle": self.idle}

    def __str__(self) -> str:
        if not self.known:
            return (f"{self.model}: no module of a model family accel knows ({', '.join(FAMILIES)}); left as it "
                    f"is")
        lines = [f"{self.model} ({', '.join(self.families)}):"]
        lines += [f"  {name} x{e['count']} -> {e['op']}" for name, e in self.replaced.items()]
        lines += [f"  {name} x{e['count']} routes through {e['op']} already" for name, e in self.routes.items()]
        lines += [f"  {name} x{e['count']} left: {e['reason']}" for name, e in self.left.items()]
        if self.idle:
            lines.append(f"  note: {self.idle}")
        return "\n".join(lines)


def check_module(model: Any, fn: str) -> None:
    """Raise ``TypeError`` where ``model`` is not an ``nn.Module`` (``fn``: the public function's name)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"accel.integrations.transformers.{fn}: model is {type(model).__name__}, not an nn.Module. "
                        f"Pass the model object (e.g. transformers.AutoModelForCausalLM.from_config(config)).")


def report(model: nn.Module) -> PatchReport:
    """What :func:`patch` did (or would do) to ``model``, read from the model itself.

    Args:
        model: any ``nn.Module``; a Hugging Face model or not.

    Returns:
        A :class:`PatchReport` (``.as_dict()`` for JSON). Modules of known families that are not replaced are
        listed under ``left`` with the reason (``"not patched"`` where :func:`patch` would replace them).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.

    .. note:: Verifies each known class not verified yet (a tiny instance on CPU: :mod:`.verify`).
    """
    check_module(model, "report")
    families: list[str] = []
    replaced: dict[str, dict[str, Any]] = {}
    routes: dict[str, dict[str, Any]] = {}
    left: dict[str, dict[str, Any]] = {}
    cfgs = configs(model)
    with config_keys():
        for module in model.modules():
            cls = type(module)
            orig = original(cls)
            family = family_of(orig)
            if family is not None and family not in families:
                families.append(family)
            if orig is not cls:
                why = instance_forward(module)
                head = module._modules.get("lm_head") if cls.accel_role == "causal_lm" else None
                aside = head_reason(head) if why is None and head is not None else None
                if aside is not None:
                    why = f"its fused loss steps aside at each call: {aside}"
                if why is None:
                    entry = replaced.setdefault(orig.__name__, {"op": cls.accel_op, "count": 0})
                else:
                    entry = left.setdefault(orig.__name__, {"count": 0, "reason": f"replaced, but {why}"})
                entry["count"] += 1
                continue
            route = next((op for base, op in ROUTES.items() if isinstance(module, base)), None)
            if route is not None:
                entry = routes.setdefault(cls.__name__, {"op": route, "count": 0})
                entry["count"] += 1
                continue
            k = known(cls)
            if k is None:
                continue
            _, role, variant = k
            accel_cls, why = verdict(cls, role, variant, cfgs.get(family))
            if accel_cls is not None:
                why = ROLE_MODULES[role].instance_reason(module) or "not patched"
            entry = left.setdefault(cls.__name__, {"count": 0, "reason": why})
            entry["count"] += 1
    return PatchReport(original(type(model)).__name__, families, replaced, routes, left, _idle(model, replaced))


def _idle(model: nn.Module, replaced: dict[str, dict[str, Any]]) -> str | None:
    """The :attr:`PatchReport.idle` sentence: the replaced modules' ops with no live accel kernel at the device
    of the model's first parameter."""
    param = next(model.parameters(), None)
    if param is None or not replaced:
        return None
    device = device_type(param)
    ops = sorted({e["op"] for e in replaced.values()})
    idle = [op for op in ops if not (experts.serves(device, param.dtype) if op == OPS["experts"]
                                     else live(OP_OF.get(op, op), device) is not None)]
    if not idle:
        return None
    which = "any replaced module's op" if len(idle) == len(ops) else ", ".join(idle)
    return (f"no accel kernel serves {which} on {device} here, so those modules run the model's own code "
            f"(accel.kernels.install() registers accel's kernels on a GPU; `accel kernels` lists them)")
