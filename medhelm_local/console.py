"""Output for people and for scripts: rich tables on a terminal, plain lines otherwise, JSON on request."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def is_tty() -> bool:
    return sys.stdout.isatty()


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def emit_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on a terminal; tab-separated lines with a header when piped."""
    if is_tty():
        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_fmt(v) for v in row))
        stdout.print(table)
    else:
        sys.stdout.write(f"# {title}\n" + "\t".join(columns) + "\n")
        for row in rows:
            sys.stdout.write("\t".join(_fmt(v) for v in row) + "\n")
        sys.stdout.flush()


def info(message: str) -> None:
    stderr.print(message, markup=False)


def error(message: str) -> None:
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True)
