"""Output helpers shared by the subcommands: JSON for machines, rich tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["console", "print_json", "table"]


def console() -> Console:
    """A rich console on stdout (no colour codes when stdout is not a terminal)."""
    return Console(soft_wrap=True)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table with these columns and rows (cells converted with ``str``)."""
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    return t
