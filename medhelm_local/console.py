"""Output for people and for scripts: rich tables on a terminal, plain lines otherwise, JSON on request.

rich (its console, markup and tables: about 25 ms of imports) is imported at the first output that needs it, so a
command that prints only JSON or plain lines (``run --json``, a piped table) never pays for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@cache
def _console(*, to_stderr: bool) -> Console:
    from rich.console import Console

    return Console(stderr=to_stderr, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    return _console(to_stderr=False)


def stderr_console() -> Console:
    return _console(to_stderr=True)


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
        from rich.table import Table

        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_fmt(v) for v in row))
        stdout_console().print(table)
    else:
        sys.stdout.write(f"# {title}\n" + "\t".join(columns) + "\n")
        for row in rows:
            sys.stdout.write("\t".join(_fmt(v) for v in row) + "\n")
        sys.stdout.flush()


def info(message: str) -> None:
    stderr_console().print(message, markup=False)


def error(message: str) -> None:
    from rich.markup import escape

    stderr_console().print(f"[bold red]error:[/] {escape(message)}", markup=True)
