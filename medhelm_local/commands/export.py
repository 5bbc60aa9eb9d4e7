"""``export``: aggregate-only report bundles, released after compliance sign-off."""

from __future__ import annotations

import typer

from medhelm_local.commands import NotBuiltYet

NAME = "export"
HELP = "Request, approve and verify aggregate-only export bundles (compliance)."
app = typer.Typer(no_args_is_help=True)


@app.command("request")
def request() -> None:
    """Build a candidate export bundle under the disclosure policy."""
    raise NotBuiltYet("`export request` (disclosure policy and signed bundles)", 6)


@app.command("approve")
def approve() -> None:
    """Approve and sign a requested export bundle."""
    raise NotBuiltYet("`export approve`", 6)


@app.command("verify")
def verify() -> None:
    """Verify a signed export bundle."""
    raise NotBuiltYet("`export verify`", 6)
