"""``audit``: show, verify, checkpoint and summarise the tamper-evident audit trail."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from medhelm_local.audit.report import filter_records, parse_time, render_text, summarize
from medhelm_local.audit.trail import AuditTrail, AuditWriteError, audit_event
from medhelm_local.audit.verify import ExportedCheckpoint, verify_file
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key
from medhelm_local.home.layout import atomic_write

NAME = "audit"
HELP = "Review, verify and summarise the audit trail (compliance)."
app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(
    ctx: typer.Context,
    since: str | None = typer.Option(None, "--since", help="Only records at or after this ISO date/time (UTC)."),
    until: str | None = typer.Option(None, "--until", help="Only records before this ISO date/time (UTC)."),
    action: str | None = typer.Option(None, "--action", help="Only records whose action starts with this."),
    actor: str | None = typer.Option(None, "--actor-filter", help="Only records by this actor."),
    checkpoints: bool = typer.Option(False, "--checkpoints", help="Include the signed checkpoint records."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List audit records (ids and hashes only), oldest first."""
    records = AuditTrail(app_context(ctx).home.audit_path).records()
    records = filter_records(
        records, since=parse_time(since, "--since") if since else None,
        until=parse_time(until, "--until") if until else None, actor=actor, action=action, checkpoints=checkpoints,
    )
    if as_json:
        emit_json(records)
        return
    emit_table("audit trail", ["seq", "time (UTC)", "actor", "role", "action", "outcome", "objects"],
               [[r.get("seq"), r.get("ts"), r.get("actor"), r.get("role"), r.get("action"), r.get("outcome"),
                 json.dumps(r.get("objects"), sort_keys=True, separators=(",", ":"))[:160]] for r in records])


@app.command("verify")
def verify(
    ctx: typer.Context,
    public_key: Path | None = typer.Option(None, "--public-key", help="The appliance's Ed25519 public key (PEM) "
                                           "[default: the home's keys/signing-ed25519.pub.pem]."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="A checkpoint exported earlier with "
                                           "`audit checkpoint --out`: detects a truncated tail."),
    trail: Path | None = typer.Option(None, "--trail", help="Verify this copy of an audit trail instead of the "
                                      "home's (needs --public-key; nothing is written)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Recompute the hash chain and Merkle roots and check every signature. Exit 0 only when intact."""
    app_ctx = app_context(ctx)
    if trail is None:
        path = app_ctx.home.audit_path
    else:
        if public_key is None:
            raise BadInputError("--trail needs --public-key (the key you trust, not one shipped with the copy)")
        path = trail
    key = load_public_key(public_key or app_ctx.home.keys_dir / PUBLIC_KEY_FILE)
    external = ExportedCheckpoint.load(checkpoint) if checkpoint else None
    report = verify_file(path, key, external=external)
    recorded = False
    if trail is None:
        # Verification is itself audited, but a read-only copy or a home without its private key can still
        # be verified: then the record is not written, and the output says so.
        try:
            audit_event(app_ctx.home, app_ctx.actor, "audit.verify", outcome="intact" if report.intact else "failed",
                        role="compliance", records=report.records, first_bad_seq=report.first_bad_seq,
                        external_checkpoint=external.tree_size if external else None)
            recorded = True
        except AuditWriteError:
            recorded = False
    if as_json:
        emit_json({**report.model_dump(), "recorded": recorded})
    else:
        verdict = "INTACT" if report.intact else f"NOT INTACT: first bad record seq {report.first_bad_seq}"
        sys.stdout.write(f"{report.trail}: {report.records} records, {report.checkpoints} signed checkpoints, "
                         f"key {report.key_id[:16]}: {verdict}\n")
        for problem in report.problems[:50]:
            sys.stdout.write(f"  seq {problem.seq}: {problem.kind}: {problem.detail}\n")
        if len(report.problems) > 50:
            sys.stdout.write(f"  ... and {len(report.problems) - 50} more\n")
        if external:
            sys.stdout.write(f"  checked against exported checkpoint of {external.tree_size} records\n")
        if trail is None and not recorded:
            info("note: this verification could not be recorded in the trail (read-only copy, missing private "
                 "key, or a damaged trail)")
    if not report.intact:
        raise typer.Exit(1)


@app.command("checkpoint")
def checkpoint(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Where to write the signed checkpoint (keep it off the appliance)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Sign a fresh checkpoint and export it, so a later truncation of the trail can be detected."""
    app_ctx = app_context(ctx)
    if out.exists() and out.is_dir():
        raise BadInputError(f"--out: {out} is a directory; give a file name")
    trail = AuditTrail(app_ctx.home.audit_path, app_ctx.home.keys_dir)
    trail.append(actor=app_ctx.actor, action="audit.checkpoint_export", outcome="success", role="compliance",
                 objects={"destination": out.name})
    assert trail.last_checkpoint is not None
    exported = {"checkpoint": trail.last_checkpoint, "appliance": app_ctx.home.config.appliance_name,
                "trail": str(app_ctx.home.audit_path)}
    atomic_write(out, (json.dumps(exported, indent=2) + "\n").encode(), mode=0o644)
    if as_json:
        emit_json({"out": str(out), **trail.last_checkpoint})
    else:
        info(f"checkpoint of {trail.last_checkpoint['tree_size']} records, root {trail.last_checkpoint['root'][:16]}"
             f"…, written to {out}")


@app.command("report")
def report(
    ctx: typer.Context,
    since: str | None = typer.Option(None, "--since", help="Only records at or after this ISO date (UTC)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Who ran which benchmarks on which datasets and models; what was exported and who approved it."""
    start = parse_time(since, "--since") if since else None
    records = filter_records(AuditTrail(app_context(ctx).home.audit_path).records(), since=start)
    summary = summarize(records, start)
    if as_json:
        emit_json(summary.model_dump())
    else:
        sys.stdout.write(render_text(summary))
