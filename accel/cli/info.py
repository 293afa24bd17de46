"""``accel info``: torch build, chosen backend and why, every probe, arch, capabilities, DSLs."""

from __future__ import annotations

import argparse

from accel.cli._output import command_error, console, print_json, table
from accel.cli.schemas import stamp

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="show torch build, device selection, arch, capabilities and DSL runtimes",
                       epilog="Exit status: 0; 1 when the requested backend is not available, 2 when the device "
                              "spec is misspelt (a misspelt --device prints only the error; an unavailable backend "
                              "or a misspelt ACCEL_DEVICE prints every other fact too).")
    p.add_argument("--device", default=None, help="device spec to inspect (default: ACCEL_DEVICE, else best)")
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON schema accel.info, versioned: "
                                                       "see the docs' JSON page)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the facts; returns 0, or when no device could be selected (a requested backend not available,
    a misspelt ``ACCEL_DEVICE``) 1, or 2 for bad input, after printing every other fact."""
    from accel.diagnostics import collect

    info = collect(args.device)
    sel = info["selection"]
    rc = args.exit_code = 0 if "error" not in sel else 2 if sel["bad_input"] else 1
    if rc:
        info["error"] = command_error("info", sel["error_type"], sel["error"])
    if args.json:
        print_json(stamp("accel.info", info))
        return rc
    out = console()
    t = info["torch"]
    out.print(f"accel {info['accel']} | Python {info['python']} | {info['platform']}")
    out.print(f"torch {t['torch']} (cuda={t['cuda']}, hip={t['hip']}, xpu={t['xpu']})")
    if "error" in sel:
        out.print(f"selected: none - {sel['error'].splitlines()[0]}")
    else:
        device = sel["device"]
        shown = device if sel["backend"] == device.split(":")[0] else f"{sel['backend']} (torch device {device})"
        out.print(f"selected: {shown} - {sel['reason']}")
    for backend, variables in (info.get("hidden_devices") or {}).items():
        out.print(f"hidden: every {backend} device of this torch build, by "
                  + ", ".join(f"{k}={v!r}" for k, v in variables.items()) + " (accel doctor says how to fix it)")
    out.print(table("probes", ["backend", "available", "devices", "reason"],
                    [[n, p["available"], p["device_count"], p["reason"]] for n, p in info["probes"].items()]))
    dev = info["device"] or {}
    if dev:
        rows = [["device name", dev.get("device_name")], ["arch", dev.get("arch")]]
        if "arch_supported" in dev:
            rows.append(["arch in torch build", f"{dev['arch_supported']['ok']} ({dev['arch_supported']['reason']})"])
        for k, v in (dev.get("capabilities") or {}).items():
            rows.append([k, ", ".join(v) if isinstance(v, list) else ("none" if v is None else v)])
        if "error" in dev:
            rows.append(["error", dev["error"]])
        out.print(table(f"device ({dev['backend']}, {dev['vendor']})", ["fact", "value"], rows))
    out.print(table("DSL runtimes", ["dsl", "version", "compatible", "detail"],
                    [[d, v["version"] or "not installed", v["compatible"] if v["version"] else "n/a", v["detail"]]
                     for d, v in info["dsl"].items()]))
    reg = info["kernel_registry"]
    out.print(f"kernel registry: {reg['path'] or 'none (ACCEL_KERNELS_REGISTRY=native cannot be served)'} "
              f"(mode {reg['mode']}) - {reg['detail']}")
    env_rows = [[k, v if v is not None else "(unset)"] for k, v in info["visible_devices"].items()]
    env_rows.append(["ACCEL_DEVICE", info["accel_device_env"] if info["accel_device_env"] is not None else "(unset)"])
    env_rows += [[k, v if v is not None else "(unset)"] for k, v in info["accel_env"].items()]
    out.print(table("environment", ["variable", "value"], env_rows))
    ipex = info["ipex"]
    out.print(f"intel-extension-for-pytorch: {ipex['installed'] or 'not installed'}"
              + (f" (matches torch: {ipex['matches_torch']})" if ipex["installed"] else " (not needed)"))
    return rc
