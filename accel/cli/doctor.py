"""``accel doctor``: the facts of ``accel info`` as checks; exit code 0 when all pass, 1 otherwise (2 for a
misspelt device spec, ``--device`` or ``ACCEL_DEVICE``: bad input)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from accel.cli._output import command_error, console, print_json, table
from accel.cli.schemas import stamp

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check that torch, the hardware and the DSL runtimes fit together",
                       description="The facts of 'accel info' as checks, each failing one with a one-line fix.",
                       epilog="Exit status: 0 when every check passes; 1 when one fails (an 'accel doctor: error:' "
                              "line on stderr names each failed check and its fix); 2 when the device spec "
                              "(--device or ACCEL_DEVICE) is misspelt.")
    p.add_argument("--device", default=None, help="device spec to check (default: ACCEL_DEVICE, else best)")
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON schema accel.doctor)")
    p.set_defaults(func=run)


def failure_message(failed: list, sel: dict) -> tuple[str, str]:
    """``(error type, message)`` of ``accel doctor``'s error report, one fact per line.

    A failed selection leads with the selection's own error (its type, its first line, every probe it lists),
    then the other failed checks, then the selection check's fix. Otherwise the type is ``"CheckFailed"``: how
    many checks failed, then each one's detail and fix."""
    def line(c) -> str:
        return f"  {c.name}: {c.detail}" + (f" Fix: {c.fix}" if c.fix else "")

    if "error" in sel:
        first, *rest = sel["error"].splitlines()
        lines = [first] + [r for r in rest if r.startswith(("Every probe:", "  "))]
        others = [c for c in failed if c.name != "selection"]
        if others:
            lines.append(f"{len(others)} other check(s) failed:")
            lines += [line(c) for c in others]
        fix = next((c.fix for c in failed if c.name == "selection"), "")
        return sel["error_type"], "\n".join(lines + ([f"Fix: {fix}"] if fix else []))
    return "CheckFailed", "\n".join([f"{len(failed)} check(s) failed: {', '.join(c.name for c in failed)}."]
                                    + [line(c) for c in failed])


def run(args: argparse.Namespace) -> int:
    from accel.diagnostics import checks, collect

    info = collect(args.device)
    results = checks(info)
    failed = [c for c in results if not c.ok]
    sel = info["selection"]
    # a misspelt ACCEL_DEVICE is bad input (2) like a misspelt --device; other failed checks are facts (1)
    rc = args.exit_code = 2 if sel.get("bad_input") else 1 if failed else 0
    report = {"ok": not failed, "checks": [asdict(c) for c in results]}
    if failed:
        report["error"] = command_error("doctor", *failure_message(failed, sel))
    if args.json:
        print_json(stamp("accel.doctor", report))
    else:
        out = console()
        out.print(table("accel doctor", ["check", "result", "detail", "fix"],
                        [[c.name, "ok" if c.ok else "FAIL", c.detail, c.fix] for c in results]))
        out.print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return rc
