"""Output helpers shared by the subcommands: JSON for machines, rich tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["console", "print_json", "quiet_stdout", "table", "command_error", "error_text", "probe_lines", "report_error"]


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


#: Errors about what this machine lacks (not bad input): their report lists every probe, one per line, unless
#: the message already does (``BackendUnavailableError`` from :func:`accel.device` carries "Every probe:").
DETECTION_ERRORS = ("BackendUnavailableError", "KernelUnavailableError", "FeatureUnavailableError",
                    "UnsupportedOperationError", "GraphCaptureUnsupported")


def probe_lines() -> str:
    """``Every probe:`` and one ``  name: available|unavailable - reason`` line per registered backend (read
    without initialising any runtime)."""
    from accel import _probe

    return "Every probe:\n" + "\n".join(f"  {name}: {'available' if p.available else 'unavailable'} - {p.reason}"
                                        for name, p in _probe.probes().items())


def error_text(error_type: str, message: str) -> str:
    """The full text of an error report after ``accel CMD: error: ``: the message, and for a detection error
    (:data:`DETECTION_ERRORS`) followed by every probe, one per line, when the message does not list them
    already."""
    if error_type in DETECTION_ERRORS and "Every probe:" not in message:
        message = f"{message.rstrip()}\n{probe_lines()}"
    return message


def report_error(head: str, command: str | None, error_type: str, message: str) -> dict:
    """The one way every ``accel`` command reports an error, whether raised (:func:`accel.cli.main`) or found by
    the command itself while it still prints its report (``accel doctor``'s failed checks): ``HEAD: error: ``
    and the message's first line on stderr, then its other lines (every probe for a detection error, the fix)
    each on its own line. Returns the ``{"type", "message", "command"}`` object a JSON report carries under
    ``"error"`` (``message``: the full text, probes included).

    Args:
        head: ``"accel CMD"`` (or ``"accel"`` before a command is known; ``"accel bench --tune"`` when a message
            names its own source).
        command: the subcommand, or ``None``.
        error_type: the error's class name (``"BackendUnavailableError"``).
        message: what failed, the observed values and what to do (may span lines).
    """
    text = error_text(error_type, message)
    print(f"{head}: error: {text}", file=sys.stderr)
    return {"type": error_type, "message": text, "command": command}


def command_error(command: str, error_type: str, message: str) -> dict:
    """Report a failure a command found itself (it still prints its report): :func:`report_error` with the head
    ``accel COMMAND``."""
    return report_error(f"accel {command}", command, error_type, message)
