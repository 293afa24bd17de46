"""The table of families x roles that the installed transformers gets, made by patching a tiny model of each
family (the docs page ``docs/transformers.md`` holds it; a test checks the page against this on every tested
release, so it cannot drift).
"""

from __future__ import annotations

import importlib

import torch

from .families import FAMILIES, FROM_5, OPS, ROLES, TINY
from .patching import patch
from .report import report
from .verify import quiet, verdict

__all__ = ["support", "support_table"]

_ROLE_NAMES = {"rms_norm": "RMSNorm", "mlp": "MLP", "attention": "attention", "decoder_layer": "decoder layer",
               "causal_lm": "LM-head loss", "experts": "MoE experts"}



def support() -> dict[str, dict[str, str]]:
    """Family -> role -> ``"yes"`` (replaced on a tiny model of the family with its default config),
    ``"no"`` (its class is known but left: :func:`report` on a model says why) or ``"-"`` (no such class);
    ``"yes (5.x)"`` for the pairs of :data:`.families.FROM_5`: replaced on 5.x, and so written on a 4.x release too,
    where they are not (the 5.x test envs check the claim)."""
    transformers = importlib.import_module("transformers")
    out: dict[str, dict[str, str]] = {}
    for family, (_, classes) in FAMILIES.items():
        roles = {role: name for name, (role, _) in classes.items()}
        row = {role: "-" if role not in roles else "no" for role in ROLES}
        if family in TINY and roles:
            cfg_name, lm_name, kwargs = TINY[family]
            with torch.random.fork_rng(devices=[]), quiet():
                model = getattr(transformers, lm_name)(getattr(transformers, cfg_name)(**kwargs))
            replaced = report(patch(model)).replaced
            row.update({role: "yes" for role, name in roles.items() if name in replaced})
            v4 = int(transformers.__version__.split(".")[0]) < 5
            row.update({role: "yes (5.x)" for role in roles if (family, role) in FROM_5 and (v4 or row[role] == "yes")})
        elif roles:  # T5: its norm alone, verified without a model
            module = importlib.import_module(FAMILIES[family][0])
            for name, (role, variant) in classes.items():
                row[role] = "yes" if verdict(getattr(module, name), role, variant)[0] is not None else "no"
        out[family] = row
    return out


def support_table() -> str:
    """:func:`support` as a Markdown table (one row per family, one column per role with its op)."""
    ops = {**OPS, "mlp": "accel::swiglu` / `accel::geglu"}  # Gemma's MLP is GeGLU
    head = "| family | " + " | ".join(f"{_ROLE_NAMES[r]} (`{ops[r]}`)" for r in ROLES) + " |"
    rows = [head, "|---|" + "---|" * len(ROLES)]
    rows += [f"| {family} | " + " | ".join(row[r] for r in ROLES) + " |" for family, row in support().items()]
    return "\n".join(rows)
