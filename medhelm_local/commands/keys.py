"""``keys``: key management."""

from __future__ import annotations

import typer

from medhelm_local.commands import NotBuiltYet

NAME = "keys"
HELP = "Manage the appliance's keys (rotation re-encrypts the store)."
app = typer.Typer(no_args_is_help=True)


@app.command("rotate")
def rotate() -> None:
    """Rotate the store's data key, re-encrypting the store."""
    raise NotBuiltYet("`keys rotate`", 6)
