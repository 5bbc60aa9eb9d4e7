"""``audit``: read the audit trail."""

from __future__ import annotations

import typer

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.commands import NotBuiltYet
from medhelm_local.console import emit_json, emit_table
from medhelm_local.context import app_context

NAME = "audit"
HELP = "Review the audit trail (compliance)."
app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(
    ctx: typer.Context,
    action: str | None = typer.Option(None, "--action", help="Only records whose action starts with this."),
    actor: str | None = typer.Option(None, "--actor-filter", help="Only records by this actor."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List audit records."""
    records = AuditTrail(app_context(ctx).home.audit_path).records()
    records = [r for r in records if (not action or r["action"].startswith(action))
               and (not actor or r["actor"] == actor)]
    if as_json:
        emit_json(records)
        return
    emit_table("audit trail", ["seq", "time (UTC)", "actor", "action", "outcome"],
               [[r["seq"], r["ts"], r["actor"], r["action"], r["outcome"]] for r in records])


@app.command("verify")
def verify() -> None:
    """Verify the audit trail's hash chain and signatures."""
    raise NotBuiltYet("`audit verify` (hash chain and signed checkpoints)", 6)
