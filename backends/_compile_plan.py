"""Compile plans: what ``torch.compile`` is additionally told on a vendor, arch and torch, and why.

:class:`CompilePlan` is the list of Inductor settings (:class:`PlanItem`) with the decisions not taken;
:class:`GemmTemplate` is a GEMM template family as vendor data. :func:`build` is the shared logic of
:meth:`accel.backends.Backend.compile_plan`: the caller's ``mode`` and ``options`` are checked against the
running torch, each template family the vendor lists is added where torch, arch and packages serve it, and
the vendor's own hook decides the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch


def _check_mode(mode: object) -> None:
    """``mode`` is ``None`` or a ``torch.compile`` mode of the running torch; else CompileOptionError."""
    from accel import _compat
    from accel._options import did_you_mean
    from accel.errors import CompileOptionError

    if mode is None:
        return
    modes = _compat.inductor_modes()
    if not isinstance(mode, str) or mode not in modes:
        raise CompileOptionError(
            f"compile plan: unknown torch.compile mode {mode!r} (torch {torch.__version__})."
            f"{did_you_mean(mode, modes)} Valid: {', '.join(repr(m) for m in modes)}, or None."
        )


def _check_options(options: Mapping[str, Any]) -> None:
    """Every key of ``options`` is an Inductor option of the running torch and its value of the declared type;
    else one CompileOptionError naming each bad key and its closest valid ones."""
    from accel import _compat
    from accel._options import closest
    from accel.errors import CompileOptionError

    if not options:
        return
    known = _compat.inductor_options()
    problems = []
    for key, value in options.items():
        why = _compat.inductor_option_problem(key, value, known)
        if why == "unknown":
            near = closest(key.replace("-", "_"), known)
            problems.append(f"{key!r} is not an Inductor option" + (
                f" (closest: {', '.join(repr(n) for n in near)})" if near else ""))
        elif why is not None:
            problems.append(why)
    if problems:
        raise CompileOptionError(
            f"compile plan: options: {'; '.join(problems)}. torch.compile(options=...) takes the names and types "
            f"of torch._inductor.config (torch {torch.__version__} has {len(known)}; "
            f"accel._compat.inductor_options() lists them). Fix or drop those keys."
        )


class PlanItem(NamedTuple):
    """One Inductor setting: ``key`` (dotted, as in ``torch._inductor.config``), ``value``, ``reason``."""

    key: str
    value: Any
    reason: str


class CompilePlan(list):
    """The :class:`PlanItem` s to set (the list itself) plus :attr:`skipped` decisions with reasons.

    Attributes:
        skipped: items considered but not set (``value`` is what would have been set).
        given: one item per option the caller passed (``options=``), saying what happens to it: passed to
            ``torch.compile`` as given, and whether it overrides what the mode or accel would set. No key
            given is dropped silently.
        passes: accel's graph passes :func:`accel.compile` runs (``key`` the pass, ``value`` on/off), not Inductor
            options.
    """

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[PlanItem] = []
        self.given: list[PlanItem] = []
        self.passes: list[PlanItem] = []

    def account(self, options: Mapping[str, Any], mode: str | None, mode_opts: Mapping[str, Any]) -> None:
        """Fill :attr:`given`: what happens to each of the caller's ``options``."""
        for key, value in options.items():
            name = key.replace("-", "_")
            notes = [f"{s.value!r} ({s.reason.split('; ')[-1]})" for s in self.skipped
                     if s.key == key and s.reason.startswith("you set")]
            said = ["yours: passed to torch.compile as given"]
            if name in mode_opts and mode_opts[name] != value:
                said.append(f"overrides mode={mode!r}'s {mode_opts[name]!r}")
            if notes:
                said.append("overrides accel's " + "; ".join(notes))
            self.given.append(PlanItem(key, value, ", ".join(said)))

    @property
    def options(self) -> dict[str, Any]:
        """The items as a ``{key: value}`` dict for ``torch.compile(options=...)``."""
        return {item.key: item.value for item in self}

    def propose(self, key: str, value: Any, reason: str, user_options: dict[str, Any]) -> None:
        """Plan ``key = value`` unless the running torch lacks the key or the user set it."""
        from accel import _compat

        if not _compat.inductor_config_has(key):
            self.skip(key, value, f"the running torch has no Inductor config key {key!r} ({reason})")
        elif key in user_options:
            self.skip(key, value, f"you set {key}={user_options[key]!r}; yours wins (accel would: {reason})")
        else:
            self.append(PlanItem(key, value, reason))

    def skip(self, key: str, value: Any, reason: str) -> None:
        """Record a decision not taken."""
        self.skipped.append(PlanItem(key, value, reason))


@dataclass(frozen=True)
class GemmTemplate:
    """A GEMM template family Inductor adds under max-autotune (vendor facts as data).

    Attributes:
        token: its name in ``max_autotune_gemm_backends`` (``"NVGEMM"``, ``"CK"``).
        description: one line saying what it is.
        config_key: an Inductor config key that exists exactly when the running torch
            has this backend (``"nvgemm_max_profiling_configs"``).
        package: what provides it (for the reason text), e.g. ``"nvidia-cutlass-dsl"``.
        install: how to install it (``"pip install nvidia-cutlass-dsl"``).
        available: name of the :mod:`accel._compat` function that says whether torch finds it.
        arch_ok: ``arch -> (ok, reason)``.
    """

    token: str
    description: str
    config_key: str
    package: str
    install: str
    available: str
    arch_ok: Callable[[str], tuple[bool, str]]


def build(backend: Any, *, mode: str | None, options: dict[str, Any] | None, index: int) -> CompilePlan:
    """The :class:`CompilePlan` of ``backend`` (see :meth:`accel.backends.Backend.compile_plan`)."""
    from accel import _compat
    from accel.errors import CompileOptionError

    if options is not None and not isinstance(options, Mapping):
        raise CompileOptionError(
            f"compile plan: options is {type(options).__name__} {options!r:.60}, not a dict. options maps "
            f"Inductor option names to values, as torch.compile(options=...) takes. Pass a dict or None."
        )
    bad_key = next((k for k in options or {} if not isinstance(k, str)), None)
    if bad_key is not None:
        raise CompileOptionError(
            f"compile plan: options has key {bad_key!r} ({type(bad_key).__name__}); Inductor option names are "
            f"str (torch._inductor.config attributes). Pass e.g. {{'max_autotune': True}}."
        )
    options = dict(options or {})
    _check_mode(mode)
    _check_options(options)
    mode_opts = _compat.inductor_mode_options(mode)
    plan = CompilePlan()
    autotune = bool(options.get("max_autotune", mode_opts.get("max_autotune", False))
                    or options.get("max_autotune_gemm", False))
    if backend.gemm_templates:
        arch = backend.arch(index)
        tokens = [t.token for t in backend.gemm_templates if backend._template_ok(t, arch, autotune, mode, plan)]
        if tokens:
            key = "max_autotune_gemm_backends"
            base = str(options.get(key, _compat.inductor_config_get(key)))
            have = [x.strip().upper() for x in base.split(",") if x.strip()]
            added = [t for t in tokens if t not in have]
            value = ",".join(have + added)
            why = f"add {', '.join(added)} to the GEMM autotuning candidates on {arch} (" + "; ".join(
                t.description for t in backend.gemm_templates if t.token in added) + ")"
            if added:
                plan.propose(key, value, why, options)
    backend._vendor_plan(plan, mode_opts=mode_opts, options=options, autotune=autotune, index=index)
    plan.account(options, mode, mode_opts)
    return plan


def template_ok(t: GemmTemplate, arch: str, autotune: bool, mode: str | None, plan: CompilePlan) -> bool:
    """Whether template family ``t`` joins the GEMM autotuning candidates on ``arch``; where not, the reason is
    recorded in ``plan.skipped``."""
    from accel import _compat

    def skip(reason: str) -> bool:
        plan.skip("max_autotune_gemm_backends", t.token, reason)
        return False

    if not autotune:
        return skip(f"{t.token} is only used while autotuning GEMMs (mode={mode!r} does not autotune; "
                    "use mode='max-autotune' or 'max-autotune-no-cudagraphs')")
    if not _compat.inductor_config_has(t.config_key):
        return skip(f"the running torch has no {t.token} GEMM backend (no Inductor config key {t.config_key!r})")
    ok, why = t.arch_ok(arch)
    if not ok:
        return skip(f"{t.token} does not serve {arch}: {why}")
    if not getattr(_compat, t.available)():
        return skip(f"{t.token} needs {t.package}, which the running torch cannot find: {t.install}")
    return True
