"""Output helpers shared by the subcommands: JSON for machines, rich tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["console", "print_json", "quiet_stdout", "table", "command_error"]


def console() -> Console:
    """A rich console on stdout (no colour codes when stdout is not a terminal).

    Not a terminal (a pipe, a CI log): 200 columns unless ``COLUMNS`` says otherwise, so
    table cells (install commands, reasons) are not cut at rich's default of 80.
    """
    import os

    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return _Console(soft_wrap=True, width=200 if wide else None)


class _Console(Console):
    """rich's console, but a reader that left (``accel info | head -1``) raises ``BrokenPipeError`` for
    :func:`accel.cli.main` to handle, instead of rich's ``SystemExit(1)`` (read as a failed command)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError("stdout closed by its reader")


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout; a reader that left (``| head -1``) is not an error: the
    command goes on to its own exit code."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so later writes and the interpreter's final flush do not fail on a
    closed pipe (the recipe of Python's ``signal`` documentation, "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (pytest capture): nothing to flush there
        pass


def cell(v: Any) -> str:
    """A table cell: ``None`` as ``"-"``, and rich markup escaped (``pip install 'x[triton]'`` stays intact)."""
    return "-" if v is None else escape(str(v))


def table(title: str, columns: list[str], rows: list[list[Any]], *, show_header: bool = True) -> Table:
    """A rich table with these columns and rows (cells through :func:`cell`)."""
    t = Table(title=escape(title), title_justify="left", show_header=show_header)
    for c in columns:
        t.add_column(escape(c))
    for r in rows:
        t.add_row(*(cell(v) for v in r))
    return t


def command_error(command: str, error_type: str, message: str) -> dict:
    """Report a failure a command found itself (it still prints its report): the ``accel CMD: error:`` line
    on stderr (the message's first line), and the ``{"type", "message", "command"}`` object its JSON
    report carries under ``"error"`` - the same form as the errors :func:`accel.cli.main` reports."""
    print(f"accel {command}: error: {message.splitlines()[0]}", file=sys.stderr)
    return {"type": error_type, "message": message, "command": command}
