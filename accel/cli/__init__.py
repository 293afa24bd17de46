"""The ``accel`` command line: ``info``, ``doctor``, ``demo``, ``kernels``, ``bench``.

Each subcommand lives in its own module of this package exposing
``add_parser(subparsers)`` (which sets ``func``) so adding one touches one file
and the list below.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main"]

#: subcommand modules, in ``--help`` order.
SUBCOMMANDS = ("info", "doctor", "demo", "kernels", "bench")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every subcommand module that exists in this install)."""
    from accel import __version__

    parser = argparse.ArgumentParser(prog="accel", description="One PyTorch script, every accelerator.")
    parser.add_argument("--version", action="version", version=f"accel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"accel.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"accel.cli.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``accel`` console script. Returns the process exit code.

    Exit codes: 0 success; 1 the command ran and reports a failure (its own help says when);
    2 usage or an :class:`~accel.errors.AccelError` (one ``accel CMD: error: ...`` line on stderr
    and, with ``--json``, ``{"error": {"type", "message", "command"}}`` on stdout). A reader that
    closes stdout early (``accel info | head -1``) ends the command quietly: with its own exit code
    when the output was buffered (JSON), else 0 (2 for an error), as if the rest had been read.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from accel.cli._output import print_json, quiet_stdout
    from accel.errors import AccelError

    try:
        try:
            rc = int(args.func(args) or 0)
            try:
                sys.stdout.flush()  # buffered output (JSON) meets a closed pipe here, not at exit
            except BrokenPipeError:
                quiet_stdout()
            return rc
        except AccelError as exc:
            msg = str(exc)
            head = f"accel {args.command}"
            if msg.startswith(head) and ": " in msg:  # the message names its source: "accel bench --tune: ..."
                head, shown = msg.split(": ", 1)
            else:
                shown = msg
            print(f"{head}: error: {shown}", file=sys.stderr)
            if getattr(args, "json", False):  # machines reading stdout get the error as JSON too
                print_json({"error": {"type": type(exc).__name__, "message": shown, "command": args.command}})
            return 2
    except BrokenPipeError:  # `accel info | head -1`: the reader left; not an error of ours
        quiet_stdout()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
