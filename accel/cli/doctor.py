"""``accel doctor``: the facts of ``accel info`` as checks; exit code 0 when all pass, 1 otherwise (2 for a
misspelt device spec, ``--device`` or ``ACCEL_DEVICE``: bad input)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from accel.cli._output import command_error, console, print_json, table

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check that torch, the hardware and the DSL runtimes fit together")
    p.add_argument("--device", default=None, help="device spec to check (default: ACCEL_DEVICE, else best)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from accel.diagnostics import checks, collect

    info = collect(args.device)
    results = checks(info)
    failed = [c for c in results if not c.ok]
    sel = info["selection"]
    # a misspelt ACCEL_DEVICE is bad input (2) like a misspelt --device; other failed checks are facts (1)
    rc = args.exit_code = 2 if sel.get("bad_input") else 1 if failed else 0
    report = {"ok": not failed, "checks": [asdict(c) for c in results]}
    if rc == 2:
        report["error"] = command_error("doctor", sel["error_type"], sel["error"])
    if args.json:
        print_json(report)
    else:
        out = console()
        out.print(table("accel doctor", ["check", "result", "detail", "fix"],
                        [[c.name, "ok" if c.ok else "FAIL", c.detail, c.fix] for c in results]))
        out.print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return rc
