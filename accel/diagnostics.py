"""Facts and health checks behind ``accel info`` and ``accel doctor``.

:func:`collect` gathers facts as a JSON-ready dict; :func:`checks` turns them into
pass/fail checks, each failing one with a one-line fix.

Each DSL runtime is judged twice: its metadata (:func:`dsl_compat`: the version torch pins,
the torch range it declares, CuTeDSL's runtime libraries), then, when that passes, a real
``import`` in a subprocess (:func:`dsl_imports`), since a DSL can declare a torch range it does
not import with (Helion 1.5.1 with torch 2.9.1).

.. note:: Asking for the arch and capabilities initialises the selected device's
   runtime (CUDA/HIP/XPU). Nothing here imports Triton, Helion or CuTeDSL into this
   process: versions come from package metadata, imports are tried in a subprocess
   (cached on disk per Python, the versions of torch, the DSL, its requirements and
   Triton, and the import path: :func:`accel._compat.versions.import_key`).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

import accel
from accel import _compat, _probe
from accel._select import hidden_devices
from accel.errors import AccelError, HiddenDevicesWarning

__all__ = ["DSL_DISTRIBUTIONS", "DSL_MODULES", "Check", "checks", "collect", "dsl_compat", "dsl_imports",
           "dsl_status", "dsl_versions"]

#: DSL runtime -> its distribution name on PyPI.
DSL_DISTRIBUTIONS = {"triton": "triton", "helion": "helion", "cutedsl": "nvidia-cutlass-dsl"}
#: DSL runtime -> the module its kernels import.
DSL_MODULES = {"triton": "triton", "helion": "helion", "cutedsl": "cutlass"}
_ROCM_TRITON = "pytorch-triton-rocm"
_XPU_TRITON = "pytorch-triton-xpu"
_IPEX = "intel-extension-for-pytorch"


@dataclass(frozen=True)
class Check:
    """One doctor check: ``ok`` or not, what was seen, and the one-line fix when not ok."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


#: accel's own environment variables, shown by ``accel info`` (besides ``ACCEL_DEVICE``).
ACCEL_ENV = (
    "ACCEL_KERNELS_REGISTRY",  # kernel registration path: auto / native / accel
    "ACCEL_KERNELS_VERIFY",  # 1: run ATen beside every routed call and compare
    "ACCEL_TUNING_DIR",  # where accel bench --tune writes the user tuning tables
    "ACCEL_TRITON_FAST_LAUNCH",  # 0: launch Triton kernels through Triton's own per-call path
    "ACCEL_CUTEDSL_TVM_FFI",  # 0: launch CuTeDSL kernels through CuTeDSL's Python executor, not TVM-FFI
    "ACCEL_REQUIRE_BACKEND",  # pytest plugin: a skipped test of this backend fails instead
)


def _base_version(v: str) -> Version | None:
    try:
        return Version(Version(v).base_version)
    except InvalidVersion:
        return None


def dsl_versions() -> dict[str, str | None]:
    """Installed DSL runtime versions (``None`` = not installed), read from metadata only."""
    found = {dsl: _compat.module_version(dist) for dsl, dist in DSL_DISTRIBUTIONS.items()}
    if found["triton"] is None:  # ROCm and XPU wheels ship triton under their own distribution names
        found["triton"] = _compat.module_version(_ROCM_TRITON) or _compat.module_version(_XPU_TRITON)
    return found


def _requirement_on(dist: str, target: str) -> Requirement | None:
    try:
        reqs = requires(dist) or []
    except PackageNotFoundError:
        return None
    for line in reqs:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() == target and (req.marker is None or req.marker.evaluate({"extra": ""})):
            return req
    return None


#: CuTeDSL's runtime libraries per CUDA major version (``nvidia-cutlass-dsl`` installs the cu12 ones;
#: ``nvidia-cutlass-dsl[cu13]`` adds the cu13 ones). With neither, every CuTeDSL kernel fails to compile
#: ("No CTK flavor installed": CuTeDSL's own error where only ``nvidia-cutlass-dsl-libs-base`` is installed,
#: as the package's metadata makes the cu12 libraries a dependency and the cu13 ones an extra).
CUTEDSL_LIBS = {"12": "nvidia-cutlass-dsl-libs-cu12", "13": "nvidia-cutlass-dsl-libs-cu13"}


def dsl_compat(dsl: str, installed: str | None, torch_version: str,
               cuda_version: str | None = None) -> tuple[bool, str]:
    """Whether an installed DSL runtime fits the running torch, and why.

    Triton: the version torch's own metadata pins (``Requires-Dist: triton==...``),
    when it pins one. Helion: its ``Requires-Dist: torch...`` range. CuTeDSL: runtime libraries of some CUDA
    major version (:data:`CUTEDSL_LIBS`) must be installed; the detail says whether they match the CUDA version
    torch was built with (``cuda_version``; accel's GPU runs used the matching ones: cu13 with torch cu130).
    """
    if installed is None:
        return True, "not installed"
    if dsl == "cutedsl":
        from accel.kernels.dsl.cutedsl_utils import MIN_VERSION

        base = _base_version(installed)
        if base is None or base < MIN_VERSION:
            return False, (f"nvidia-cutlass-dsl {installed} < {MIN_VERSION}, the oldest version accel's CuTeDSL "
                           f"kernels are checked with")
        have = [major for major, dist in CUTEDSL_LIBS.items() if _compat.module_version(dist)]
        if not have:
            return False, (f"nvidia-cutlass-dsl {installed} without runtime libraries (none of "
                           f"{', '.join(CUTEDSL_LIBS.values())}): its kernels fail with 'No CTK flavor installed'")
        libs = ", ".join(f"cu{m}" for m in have)
        major = (cuda_version or "").split(".")[0]
        if not major:
            return True, f"nvidia-cutlass-dsl {installed}, {libs} libraries (this torch build has no CUDA)"
        if major in have:
            return True, f"nvidia-cutlass-dsl {installed}, {libs} libraries; torch's CUDA {cuda_version}"
        return True, (f"nvidia-cutlass-dsl {installed}, {libs} libraries; torch's CUDA is {cuda_version} "
                      f"(pip install 'nvidia-cutlass-dsl[cu{major}]' for the matching ones, which accel's GPU runs used)")
    if dsl == "triton":
        req = _requirement_on("torch", "triton")
        if req is None:
            return True, f"triton {installed} (this torch build pins no triton; interpreter/CPU use only)"
        ok = req.specifier.contains(installed, prereleases=True)
        return ok, f"triton {installed}; torch pins {req}"
    if dsl == "helion":
        req = _requirement_on("helion", "torch")
        base = _base_version(torch_version)
        if req is None or base is None:
            return True, f"helion {installed} (no torch requirement declared)"
        ok = req.specifier.contains(base, prereleases=True)
        return ok, f"helion {installed} needs {req}; running torch {torch_version}"
    return True, f"{dsl} {installed}"


def dsl_imports(dsl: str, version: str | None = None) -> _compat.ImportCheck:
    """Whether DSL runtime ``dsl`` (a key of :data:`DSL_MODULES`) imports with the running torch.

    Args:
        dsl: ``"triton"``, ``"helion"`` or ``"cutedsl"``.
        version: its installed version (default: read from metadata, :func:`dsl_versions`); keys the cache.

    Returns:
        :func:`accel._compat.import_check`'s answer, from a subprocess or the on-disk cache.
    """
    if version is None:
        version = dsl_versions()[dsl]
    return _compat.import_check(DSL_MODULES[dsl], version, dist=DSL_DISTRIBUTIONS[dsl])


def dsl_status(dsl: str, installed: str | None, torch_version: str, cuda_version: str | None = None) -> dict[str, Any]:
    """``accel info``'s row for one DSL runtime: ``{"version", "compatible", "detail", "imports"}``.

    ``compatible`` needs both the metadata check (:func:`dsl_compat`) and a real import with this torch
    (:func:`dsl_imports`, tried only when the metadata check passes). ``imports`` is ``True``/``False``,
    ``None`` when it was not tried (not installed, refused by metadata) or did not finish in time; an
    import that did not finish leaves the metadata verdict standing and says so.
    """
    ok, why = dsl_compat(dsl, installed, torch_version, cuda_version)
    row: dict[str, Any] = {"version": installed, "compatible": ok, "detail": why, "imports": None}
    if installed is None or not ok:
        return row
    check = dsl_imports(dsl, installed)
    row["imports"] = check.ok
    module, dist = DSL_MODULES[dsl], DSL_DISTRIBUTIONS[dsl]
    named = dist if module == dist else f"{dist} (import {module})"
    if check.ok is False:
        row["compatible"] = False
        row["detail"] = f"{named} {installed} installed, does not import with torch {torch_version}: {check.error}"
    elif check.ok is None:
        row["detail"] = f"{why}; whether it imports with torch {torch_version} is unknown: {check.error}"
    else:
        row["detail"] = f"{why}; imports with torch {torch_version}"
    return row


def ipex_status(torch_version: str) -> dict[str, Any]:
    """intel-extension-for-pytorch: installed version and whether its major.minor matches torch's.

    accel never requires IPEX (its last release, 2.8, pairs with torch 2.8); it is only reported.
    """
    v = _compat.module_version(_IPEX)
    if v is None:
        return {"installed": None, "matches_torch": None}
    a, b = _base_version(v), _base_version(torch_version)
    match = bool(a and b and a.release[:2] == b.release[:2])
    return {"installed": v, "matches_torch": match}


def _hardware_seen() -> dict[str, bool]:
    """GPUs the OS shows, independent of torch (driver files only; no runtime init)."""
    return {
        "nvidia": Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir()),
        "amd": Path("/dev/kfd").exists(),
        "apple": sys.platform == "darwin" and platform.machine() == "arm64",
    }


def _device_facts(sel: Any) -> dict[str, Any]:
    b = sel.backend
    index = sel.device.index or 0
    facts: dict[str, Any] = {"backend": b.name, "vendor": b.vendor, "device": str(sel.device)}
    try:
        facts["device_name"] = b.device_name(index)
        facts["arch"] = b.arch(index)
        ok, why = b.arch_supported(index)
        facts["arch_supported"] = {"ok": ok, "reason": why}
        facts["capabilities"] = b.capabilities(index).as_dict()
    except (RuntimeError, AttributeError, OSError) as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"
    return facts


def collect(spec: object = None) -> dict[str, Any]:
    """Every fact ``accel info`` shows, as a JSON-ready dict.

    Args:
        spec: device spec as for :func:`accel.device` (``None``: the usual order).

    Returns:
        ``{"accel", "python", "platform", "torch", "selection", "probes", "device",
        "dsl", "visible_devices", "hidden_devices", "ipex"}``. ``selection`` holds ``error`` (with
        ``error_type`` and ``bad_input``: a misspelt ``ACCEL_DEVICE``, say) instead of a choice when
        selection fails (the message says what to do). ``hidden_devices``: per backend the torch build
        serves but whose every device the visible-devices variables hide, ``{variable: value}``
        (``{}`` when none is hidden). ``dsl`` maps each DSL runtime to
        :func:`dsl_status`'s row.

    .. note:: Initialises the selected device's runtime (to read its arch). Imports each
       installed DSL in a subprocess unless the on-disk cache already has the answer
       (:func:`dsl_imports`).
    """
    build = _probe.torch_build()
    info: dict[str, Any] = {
        "accel": accel.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": build,
        "probes": {n: asdict(p) for n, p in _probe.probes().items()},
    }
    try:
        with warnings.catch_warnings():  # the fallback to CPU is a fact below (hidden_devices), not a warning here
            warnings.simplefilter("ignore", HiddenDevicesWarning)
            sel = accel.selection(spec)
    except AccelError as exc:
        if spec is not None and isinstance(exc, (ValueError, TypeError, LookupError)):
            raise  # a misspelt --device is bad input (the CLI exits 2), not a fact about this machine
        info["selection"] = {"error": str(exc), "error_type": type(exc).__name__,
                             "bad_input": isinstance(exc, (ValueError, TypeError, LookupError)),
                             "requested": None if spec is None else str(spec)}
        info["device"] = None
    else:
        info["selection"] = {"backend": sel.backend.name, "device": str(sel.device), "source": sel.source,
                             "reason": sel.reason}
        info["device"] = _device_facts(sel)
    info["dsl"] = {dsl: dsl_status(dsl, v, build["torch"], build.get("cuda")) for dsl, v in dsl_versions().items()}
    names = sorted({k for b in accel.backends.registered().values() for k in b.visible_devices_env})
    info["visible_devices"] = {k: os.environ.get(k) for k in names}
    info["hidden_devices"] = {b: dict(variables) for b, variables in hidden_devices().items()}
    info["accel_device_env"] = os.environ.get("ACCEL_DEVICE")
    info["accel_env"] = {k: os.environ.get(k) for k in ACCEL_ENV}
    info["ipex"] = ipex_status(build["torch"])
    info["kernel_registry"] = kernel_registry()
    return info


def kernel_registry() -> dict[str, Any]:
    """Which path accel's kernel overrides take in this process's torch, from ``ACCEL_KERNELS_REGISTRY``
    and torch's native DSL registry, without importing :mod:`accel.kernels`.

    Returns:
        ``{"mode", "path", "torch_native", "recognised", "generation", "namespaces", "detail"}``: ``path``
        is ``"native"``, ``"accel"`` or ``None`` (mode ``native`` with no registry to use: registration
        raises); ``torch_native`` whether torch has ``torch._native``; ``recognised`` whether its
        registry has a shape accel uses.
    """
    mode = (os.environ.get("ACCEL_KERNELS_REGISTRY") or "auto").strip().lower() or "auto"
    reg = _compat.native_dsl_registry()
    if mode == "accel":
        path = "accel"
    elif reg is not None:
        path = "native"
    else:
        path = None if mode == "native" else "accel"
    return {"mode": mode, "path": path, "torch_native": _compat.has_native_dsl_registry(),
            "recognised": reg is not None, "generation": getattr(reg, "generation", None),
            "namespaces": sorted(getattr(reg, "namespaces", ())), "detail": _compat.native_dsl_registry_reason()}


def _transformers_check() -> Check | None:
    """Whether the installed transformers (read from its metadata, not imported) is a release the transformers
    integration is tested on (``accel.integrations.transformers.TESTED``); ``None`` where it is not installed.
    An untested release passes: ``patch`` verifies each role by behaviour before it replaces anything."""
    from importlib.metadata import version

    try:
        installed = version("transformers")
    except PackageNotFoundError:
        return None
    from accel.integrations.transformers.families import TESTED

    lo, hi = Version(TESTED[0]).release[:2], Version(TESTED[-1]).release[:2]
    v = _base_version(installed)
    tested = v is not None and lo <= v.release[:2] <= hi
    exact = v is not None and any(v.release[:2] == Version(t).release[:2] for t in TESTED)
    where = ("a tested release" if exact else f"between the tested releases ({', '.join(TESTED)})" if tested
             else f"outside the tested range {TESTED[0]} to {TESTED[-1]}")
    detail = (f"{installed}: {where}" + ("" if exact else "; patch(model) verifies each role on a tiny instance "
                                                          "before it replaces it, and report(model) says what it left"))
    fix = "" if tested else f"pip install 'transformers>={TESTED[0]},<{hi[0]}.{hi[1] + 1}' for a tested release"
    return Check("transformers integration", True, detail, fix)


def _tuning_tables_check() -> Check:
    """Every user tuning table (``accel bench --tune``'s files) reads as a table: one that does not is ignored
    as a whole at run time, with one warning only."""
    from accel.kernels.tuning import table

    name = "user tuning tables"
    folder = table.user_table_path("sm_90").parent
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    bad = []
    for f in files:
        try:
            table.check_file(f)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is this check's finding
            bad.append(f"{f.name}: {str(exc).splitlines()[0][:200]}")
    if bad:
        return Check(name, False, f"{len(bad)} of {len(files)} in {folder} unreadable (ignored as a whole): "
                                  + "; ".join(bad),
                     "fix the named key or value in the file, or delete it and re-run `accel bench --tune`")
    return Check(name, True, f"{len(files)} in {folder}, all readable" if files else f"none in {folder}")


def _registry_check(reg: dict[str, Any]) -> Check:
    name = "kernel registry path"
    if reg["recognised"] or reg["mode"] == "accel":
        told = f"{reg['path']} (mode {reg['mode']}): {reg['detail']}"
        return Check(name, True, told)
    if not reg["torch_native"]:
        if reg["mode"] == "native":
            return Check(name, False, f"ACCEL_KERNELS_REGISTRY=native: {reg['detail']}",
                         "unset ACCEL_KERNELS_REGISTRY (or set it to accel): this torch has no native registry")
        return Check(name, True, f"accel's router: {reg['detail']}")
    return Check(name, False, f"{reg['detail']}; accel's kernels use accel's router, so torch.backends.python_native "
                              f"does not switch them",
                 "use a torch release whose registry accel recognises (2.13 to 2.15) or a newer accel; "
                 "ACCEL_KERNELS_REGISTRY=accel takes accel's router knowingly")


#: accel's variables with a fixed set of values (as the code reading them parses them: stripped;
#: the registry path case-insensitive); a value outside the set is ignored or refused at first use.
_ENV_VALUES = {"ACCEL_KERNELS_REGISTRY": ("auto", "native", "accel"), "ACCEL_KERNELS_VERIFY": ("0", "1"),
               "ACCEL_TRITON_FAST_LAUNCH": ("0", "1"), "ACCEL_CUTEDSL_TVM_FFI": ("0", "1")}


def _env_check(env: dict[str, str | None]) -> Check:
    bad = {}
    for var, valid in _ENV_VALUES.items():
        value = env.get(var)
        if value is None or not value.strip():
            continue
        seen = value.strip().lower() if var == "ACCEL_KERNELS_REGISTRY" else value.strip()
        if seen not in valid:
            bad[var] = f"{var}={value!r} (valid: {', '.join(valid)})"
    if not bad:
        set_ = [var for var in _ENV_VALUES if (env.get(var) or "").strip()]
        told = f"{', '.join(set_)}: valid" if set_ else f"none of {', '.join(_ENV_VALUES)} set"
        # ACCEL_DEVICE has no fixed set of values: the "selection" check parses and resolves it
        return Check("accel environment variables", True, f"{told} (ACCEL_DEVICE: see the selection check)")
    return Check("accel environment variables", False, "; ".join(bad.values()),
                 "set each to one of its valid values, or unset it: " + ", ".join(bad))


def _hidden_check(hidden: dict[str, dict[str, str]], sel: dict[str, Any]) -> Check:
    """Fails when the visible-devices variables hide every device of an accelerator build and the selection
    fell back silently (not when ``ACCEL_DEVICE`` / ``--device`` chose a backend on purpose)."""
    name = "visible devices"
    if not hidden:
        return Check(name, True, "no accelerator of this torch build is hidden by a visible-devices variable")
    said = "; ".join(f"{b}: " + ", ".join(f"{k}={v!r}" for k, v in variables.items()) + " hides every device"
                     for b, variables in hidden.items())
    names = sorted({k for variables in hidden.values() for k in variables})
    if sel.get("source") in ("argument", "ACCEL_DEVICE"):
        return Check(name, True, f"{said} (the selection is explicit: {sel.get('reason')})")
    fallback = sel.get("backend", "none")
    return Check(name, False, f"{said}: the default selection fell back to {fallback}",
                 f"unset {', '.join(names)} (or set it to the device indices to use, e.g. {names[0]}=0); "
                 f"or set ACCEL_DEVICE={fallback if fallback != 'none' else 'cpu'} to choose it on purpose")


def checks(info: dict[str, Any]) -> list[Check]:
    """Doctor checks over :func:`collect`'s facts; each failing check carries a one-line fix."""
    out: list[Check] = []
    build = info["torch"]
    sel = info["selection"]
    if "error" in sel:
        if sel.get("requested"):
            fix = f"pass an available backend instead of --device {sel['requested']}, e.g. --device cpu"
        elif sel.get("error_type") == "LocalRankError" or (sel.get("error_type") == "DeviceIndexError"
                                                          and "LOCAL_RANK" in sel["error"]):
            fix = ("LOCAL_RANK names this process's device: launch with torchrun --nproc-per-node at most the "
                   "device count, unset LOCAL_RANK outside a launcher, or set ACCEL_DEVICE=<backend>:<index>")
        elif os.environ.get("ACCEL_DEVICE"):
            fix = "unset ACCEL_DEVICE or set it to an available backend, e.g. ACCEL_DEVICE=cpu"
        else:
            fix = "no backend is usable: see the probes above for why each was skipped"
        out.append(Check("selection", False, sel["error"].splitlines()[0], fix))
    else:
        out.append(Check("selection", True, sel["reason"]))
    out.append(_hidden_check(info.get("hidden_devices") or {}, sel))
    hw = _hardware_seen()
    probes = info["probes"]
    wanted = {"nvidia": "cuda", "amd": "rocm", "apple": "mps"}
    for vendor, backend in wanted.items():
        if hw[vendor] and not probes.get(backend, {}).get("available"):
            out.append(Check(f"torch build for {vendor} GPU", False,
                             f"the OS shows a {vendor} GPU but torch {build['torch']} cannot use it: "
                             f"{probes.get(backend, {}).get('reason')}",
                             f"install the {backend} build of torch (https://pytorch.org/get-started/locally/)"))
    if not any(c.name.startswith("torch build for") for c in out):
        out.append(Check("torch build matches hardware", True,
                         f"torch {build['torch']} (cuda={build['cuda']}, hip={build['hip']}, xpu={build['xpu']})"))
    dev = info.get("device") or {}
    if "arch_supported" in dev and dev["backend"] != "cpu":
        ok, why = dev["arch_supported"]["ok"], dev["arch_supported"]["reason"]
        out.append(Check("GPU arch covered by torch build", ok, f"{dev['arch']}: {why}",
                         "" if ok else "install a torch build whose arch list includes this GPU"))
    elif "error" in dev:
        out.append(Check("device facts", False, dev["error"], "check the driver with the vendor's SMI tool"))
    for dsl, d in info["dsl"].items():
        if d["compatible"]:
            fix = ""
        elif dsl == "cutedsl":
            from accel.kernels.dsl.cutedsl_utils import DISTRIBUTION, MIN_VERSION

            major = str(build.get("cuda") or "12").split(".")[0]
            fix = f"pip install -U '{DISTRIBUTION}[cu{major}]>={MIN_VERSION}'"
        elif d.get("imports") is False:
            fix = (f"pip install a {DSL_DISTRIBUTIONS[dsl]} version that imports with torch {build['torch']} "
                   f"(or pip uninstall {DSL_DISTRIBUTIONS[dsl]}: accel's kernels then use the other DSLs)")
        else:
            fix = f"pip install the {dsl} version that matches torch {build['torch']}"
        out.append(Check(f"{dsl} version", d["compatible"], d["detail"], fix))
    tf = _transformers_check()
    if tf is not None:
        out.append(tf)
    out.append(_env_check(info.get("accel_env") or {}))
    out.append(_tuning_tables_check())
    if "kernel_registry" in info:
        out.append(_registry_check(info["kernel_registry"]))
    ipex = info["ipex"]
    if ipex["installed"] is not None:
        out.append(Check("intel-extension-for-pytorch", bool(ipex["matches_torch"]),
                         f"{ipex['installed']} with torch {build['torch']} (accel never needs it)",
                         "" if ipex["matches_torch"] else "pip uninstall intel-extension-for-pytorch "
                         "(torch's native XPU support replaces it)"))
    return out
