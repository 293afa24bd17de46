"""The JSON schemas of ``accel info --json``, ``doctor --json``, ``demo --json``, ``kernels --json`` and
``bench --json``.

Each report carries ``"schema"`` (its name, e.g. ``"accel.info"``) and ``"schema_version"`` (an int). The
version goes up when a field is removed, renamed or changes type; adding a field keeps it (readers must
ignore fields they do not know: every schema below allows more properties). An error report of any
command (``{"error": {...}}`` alone: a command line argparse refused, a device that could not be used) is
``accel.error``. The schemas are JSON Schema draft 2020-12 documents, published on the docs site
(``docs/json.md``) and checked against real output by ``tests/cli/test_json_schemas.py``.

Example:
    >>> from accel.cli.schemas import SCHEMAS, stamp
    >>> sorted(SCHEMAS)
    ['accel.bench', 'accel.demo', 'accel.doctor', 'accel.error', 'accel.info', 'accel.kernels']
    >>> stamp("accel.doctor", {"ok": True, "checks": []})["schema_version"]
    1
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMAS", "VERSIONS", "stamp"]

#: Schema name -> its current version.
VERSIONS = {"accel.info": 1, "accel.doctor": 1, "accel.demo": 1, "accel.kernels": 1, "accel.bench": 1,
            "accel.error": 1}

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_BOOL = {"type": "boolean"}
_NUM = {"type": "number"}
_NNUM = {"type": ["number", "null"]}
_INT = {"type": "integer"}

ERROR = {
    "type": "object",
    "description": "What failed: the error's class name, the full message (every probe for a detection error, "
                   "and the fix) and the command (null before a command was recognised).",
    "required": ["type", "message", "command"],
    "properties": {"type": _STR, "message": _STR, "command": _NSTR},
}


def _head(name: str, required: list[str], properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{name}/{VERSIONS[name]}",
        "title": name,
        "description": description,
        "type": "object",
        "required": ["schema", "schema_version", *required],
        "properties": {"schema": {"const": name}, "schema_version": {"const": VERSIONS[name]}, **properties,
                       "error": ERROR},
    }


_PROBE = {"type": "object", "required": ["backend", "available", "reason", "device_count"],
          "properties": {"backend": _STR, "available": _BOOL, "reason": _STR, "device_count": _INT,
                         "hidden_by": {"type": "array"}}}
_DSL = {"type": "object", "required": ["version", "compatible", "detail", "imports"],
        "properties": {"version": _NSTR, "compatible": _BOOL, "detail": _STR, "imports": {"type": ["boolean", "null"]}}}
_SELECTED = {"type": "object", "required": ["backend", "device", "source", "reason"],
             "properties": {"backend": _STR, "device": _STR, "source": _STR, "reason": _STR}}
_NOT_SELECTED = {"type": "object", "required": ["error", "error_type", "bad_input", "requested"],
                 "properties": {"error": _STR, "error_type": _STR, "bad_input": _BOOL, "requested": _NSTR}}

INFO = _head("accel.info", [
    "accel", "python", "platform", "torch", "probes", "selection", "device", "dsl", "visible_devices",
    "hidden_devices", "accel_device_env", "accel_env", "ipex", "kernel_registry"], {
    "accel": _STR, "python": _STR, "platform": _STR,
    "torch": {"type": "object", "required": ["torch", "cuda", "hip", "xpu"],
              "properties": {"torch": _STR, "cuda": _NSTR, "hip": _NSTR, "xpu": _NSTR}},
    "probes": {"type": "object", "additionalProperties": _PROBE},
    "selection": {"oneOf": [_SELECTED, _NOT_SELECTED]},
    "device": {"type": ["object", "null"], "required": ["backend", "vendor", "device"],
               "properties": {"backend": _STR, "vendor": _STR, "device": _STR, "device_name": _NSTR, "arch": _NSTR,
                              "capabilities": {"type": "object"}, "error": _STR}},
    "dsl": {"type": "object", "required": ["triton", "helion", "cutedsl"], "additionalProperties": _DSL},
    "visible_devices": {"type": "object", "additionalProperties": _NSTR},
    "hidden_devices": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": _STR}},
    "accel_device_env": _NSTR,
    "accel_env": {"type": "object", "additionalProperties": _NSTR},
    "ipex": {"type": "object", "required": ["installed", "matches_torch"],
             "properties": {"installed": _NSTR, "matches_torch": {"type": ["boolean", "null"]}}},
    "kernel_registry": {"type": "object", "required": ["mode", "path", "torch_native", "recognised", "detail"],
                        "properties": {"mode": _STR, "path": _NSTR, "torch_native": _BOOL, "recognised": _BOOL,
                                       "detail": _STR}},
}, "accel info --json: the torch build, every probe, the selection (or why none), the device's arch and "
   "capabilities, the DSL runtimes, accel's environment variables and the kernel registry path.")

DOCTOR = _head("accel.doctor", ["ok", "checks"], {
    "ok": _BOOL,
    "checks": {"type": "array", "items": {"type": "object", "required": ["name", "ok", "detail", "fix"],
                                          "properties": {"name": _STR, "ok": _BOOL, "detail": _STR, "fix": _STR}}},
}, "accel doctor --json: each check, whether it passed, what was seen and the fix (\"\" when it passed); "
   "'error' names the failed checks (exit code 1) or the misspelt device (2).")

_COUNTS = {"type": "object", "additionalProperties": {
    "type": "object", "required": ["routed", "declined", "failed"],
    "properties": {"routed": _INT, "declined": _INT, "failed": _INT}}}
DEMO = _head("accel.demo", [
    "device", "backend", "vendor", "arch", "accuracy", "epochs", "steps", "step_ms", "threads", "batch", "kernels",
    "graphs", "final_loss", "resume", "seconds", "accuracy_target", "failures", "ok"], {
    "device": _STR, "backend": _STR, "vendor": _STR, "arch": _NSTR, "accuracy": _NUM, "epochs": _INT, "steps": _INT,
    "step_ms": _NUM, "threads": _INT, "batch": _INT,
    "kernels": {"type": "object", "required": ["installed", "counts", "step_ms_on", "step_ms_off", "wide", "why_none"],
                "properties": {"installed": {"type": "array", "items": _STR}, "counts": _COUNTS,
                               "step_ms_on": _NNUM, "step_ms_off": _NNUM, "wide": {"type": ["object", "null"]},
                               "why_none": _NSTR}},
    "graphs": {"type": ["object", "null"], "required": ["captured", "eager_ms", "graphed_ms", "speedup", "reason"],
               "properties": {"captured": _BOOL, "eager_ms": _NUM, "graphed_ms": _NUM, "speedup": _NNUM,
                              "reason": _STR}},
    "final_loss": _NUM,
    "resume": {"type": "object", "required": ["equal", "compared", "max_abs_diff", "checkpoint_epoch"],
               "properties": {"equal": _BOOL, "compared": _INT, "max_abs_diff": _NUM, "checkpoint_epoch": _INT}},
    "seconds": _NUM, "accuracy_target": _NUM, "failures": {"type": "array", "items": _STR}, "ok": _BOOL,
}, "accel demo --json: the device, held-out accuracy against its target, the median step time, the resume "
   "check (resumed losses equal to the uninterrupted run's bit for bit), the kernels that ran and the graph "
   "capture comparison; 'failures' says what failed when 'ok' is false (exit code 1).")

_OVERRIDE = {"type": "object", "required": ["name", "op", "dsl", "backends", "active", "routed", "fallbacks", "failed"],
             "properties": {"name": _STR, "op": _STR, "dsl": _STR, "backends": {"type": "array", "items": _STR},
                            "active": _BOOL, "routed": _INT, "fallbacks": _INT, "failed": _INT}}
_BUILTIN = {"type": "object", "required": ["kernel", "dsl", "backends", "available", "installed", "reason"],
            "properties": {"kernel": _STR, "dsl": _STR, "backends": {"type": "array", "items": _STR},
                           "available": _BOOL, "installed": _BOOL, "reason": _STR, "tuning": _NSTR}}
KERNELS = _head("accel.kernels", ["registry_path", "native_registry", "arch", "backend", "overrides", "builtin",
                                  "installed"], {
    "registry_path": _NSTR, "native_registry": _STR, "arch": _NSTR, "backend": _STR,
    "overrides": {"type": "array", "items": _OVERRIDE},
    "builtin": {"type": "array", "items": _BUILTIN},
    "installed": {"type": ["array", "null"], "items": _STR},
}, "accel kernels --json: this process's kernel overrides with their counters, every built-in kernel and "
   "whether it can be installed here (and why not); 'installed' is what --install registered (null without it).")

_IMPL = {"type": "object", "required": ["us", "gbs", "pct_ceiling", "vs_aten"],
         "properties": {"us": _NUM, "gbs": _NUM, "pct_ceiling": _NUM, "vs_aten": _NUM, "vs_best_peer": _NNUM}}
ROW = {"type": "object", "required": ["op", "dtype", "shape", "direction", "bytes", "routed_to", "errors", "impls"],
       "properties": {"op": _STR, "dtype": _STR, "shape": {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2},
                      "direction": {"enum": ["fwd", "bwd"]}, "bytes": _INT, "routed_to": _STR,
                      "errors": {"type": "object", "additionalProperties": _STR},
                      "impls": {"type": "object", "additionalProperties": _IMPL}}}
BENCH = _head("accel.bench", ["device", "arch", "backend", "torch", "copy_ceiling_gbs", "rows", "skipped"], {
    "device": _STR, "arch": _NSTR, "backend": _STR, "torch": _STR, "versions": {"type": "object"},
    "copy_ceiling_gbs": _NUM, "installed": {"type": "array", "items": _STR}, "rounds": _INT,
    "peers": {"type": "object"}, "rows": {"type": "array", "items": ROW}, "aten_faster": {"type": "array"},
    "skipped": {"type": "array", "items": _STR}, "router_overhead": {"type": "object"},
    "routed_counts": {"type": "object"}, "elapsed_s": _NUM,
}, "accel bench --json: per op family, dtype, shape [M, N] and direction, each implementation's time (us), "
   "GB/s, % of the copy ceiling measured in the same run and speed-up over ATen; 'impls' keys: aten, each "
   "DSL (triton, helion, cutedsl), routed (the call through accel's router), and the peers (liger, quack).")

ERROR_REPORT = _head("accel.error", ["error"], {},
                     "Any command's report when it could not produce its own (a command line argparse refused, "
                     "an error raised before the report): the error alone.")
ERROR_REPORT["properties"]["error"] = ERROR

#: Schema name -> JSON Schema document.
SCHEMAS = {"accel.info": INFO, "accel.doctor": DOCTOR, "accel.demo": DEMO, "accel.kernels": KERNELS,
           "accel.bench": BENCH, "accel.error": ERROR_REPORT}


def stamp(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with ``schema`` and ``schema_version`` first (a new dict; ``report`` is not changed).

    Raises:
        KeyError: ``name`` is not one of :data:`SCHEMAS`.
    """
    return {"schema": name, "schema_version": VERSIONS[name], **report}
