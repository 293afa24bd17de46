"""The ``accel`` command line: ``info``, ``doctor``, ``demo``, ``kernels``, ``bench``.

Each subcommand lives in its own module of this package exposing
``add_parser(subparsers)`` (which sets ``func``) so adding one touches one file
and the list below.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

__all__ = ["main"]

#: subcommand modules, in ``--help`` order.
SUBCOMMANDS = ("info", "doctor", "demo", "kernels", "bench")


class _UsageError(Exception):
    """A command line argparse refused (raised instead of argparse's print-and-exit, so it is reported
    like every other error: one ``accel CMD: error:`` line, and JSON on stdout with ``--json``)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every subcommand module that exists in this install)."""
    from accel._version import __version__

    parser = _Parser(prog="accel", description="One PyTorch script, every accelerator.")
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

    Exit codes: 0 success; 1 the command ran and reports a failure (its own help says when), or
    this machine cannot do what was asked (an :class:`~accel.errors.AccelError` that is not a
    ``ValueError``/``TypeError``/``LookupError``: no GPU for ``accel bench``, a backend not
    available, scikit-learn missing); 2 bad input (a command line argparse refuses, or an
    :class:`~accel.errors.AccelError` that is a ``ValueError``/``TypeError``/``LookupError``). Errors print
    ``accel CMD: error: ...`` on stderr and, with ``--json``, ``{"error": {"type", "message",
    "command"}}`` on stdout. A reader that closes stdout early (``accel info | head -1``) ends the
    command quietly, with the exit code it would have had had the rest been read: its own when the
    output was buffered (JSON) or when it decided the code before printing (``args.exit_code``),
    the error's code for an error, else 0.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        # argparse (before Python 3.12.8) reads the value '--' of '--opt=--' as the end of options and hands the
        # option an empty list, whatever its type; no accel option takes '--'
        given_dashes = next((a for a in argv if a.startswith("--") and a.endswith("=--")), None)
        if given_dashes is not None:
            raise _UsageError(f"argument {given_dashes.split('=', 1)[0]}: '--' is not a value of it")
        args = parser.parse_args(argv)
    except _UsageError as exc:
        # the command is the first word that is not an option (accel's own options take no value)
        first = next((a for a in argv if not a.startswith("-")), None)
        command = first if first in SUBCOMMANDS else None
        head = f"accel {command}" if command else "accel"
        return _report(_UsageError(f"{exc}. See '{head} --help'."), head, command, _asks_json(argv), 2)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return _report(_UsageError(f"a command is required: one of {', '.join(SUBCOMMANDS)}. See 'accel --help'."),
                       "accel", None, _asks_json(argv), 2)
    if isinstance(getattr(args, "device", None), str) and re.fullmatch(r"-?(?:0|[1-9][0-9]*)", args.device):
        args.device = int(args.device)  # "--device 1": an index, as accel.device(1) takes it (digits as after ':')
    from accel.cli._output import quiet_stdout
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
            # ValueError/TypeError/LookupError kinds say what input was wrong; the others, what this
            # machine cannot do (no GPU, a backend not available, a missing optional dependency)
            code = 2 if isinstance(exc, (ValueError, TypeError, LookupError)) else 1
            return _report(exc, f"accel {args.command}", args.command, getattr(args, "json", False), code)
    except BrokenPipeError:  # `accel info | head -1`: the reader left; not an error of ours
        quiet_stdout()
        return getattr(args, "exit_code", 0)  # a command that already knew its failure (set before printing)


def _asks_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON: ``--json``, ``--json=...`` or an abbreviation argparse
    would accept (``--js``)."""
    return any(len(a) >= 3 and "--json".startswith(a.split("=", 1)[0]) for a in argv)


#: A message that names its own source ("accel bench --tune: ..."): the command and its options only.
_SOURCE = re.compile(r"accel [a-z]+( --?[a-z][\w-]*)*")


def _report(exc: Exception, head: str, command: str | None, as_json: bool, code: int) -> int:
    """Report ``exc`` through :func:`accel.cli._output.report_error` (``head: error: message`` on stderr, every
    probe for a detection error; the JSON error object on stdout with ``--json``); return ``code``."""
    from accel.cli._output import print_json, report_error
    from accel.cli.schemas import stamp

    msg = str(exc)
    source, sep, rest = msg.partition(": ")
    if sep and source.startswith(head) and _SOURCE.fullmatch(source):
        head, msg = source, rest
    error = report_error(head, command, type(exc).__name__.lstrip("_"), msg)
    if as_json:  # machines reading stdout get the error as JSON too
        print_json(stamp("accel.error", {"error": error}))
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
