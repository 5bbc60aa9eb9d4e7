"""``audit``: show, verify, checkpoint and summarise the tamper-evident audit trail."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import typer

from medhelm_local.audit.anchor import (
    FINGERPRINT_ENV,
    PUBKEY_FILE_ENV,
    AnchorError,
    fingerprint,
    option_anchor,
    pinned_anchor,
)
from medhelm_local.audit.repair import repair_trail
from medhelm_local.audit.report import (
    check_window,
    filter_records,
    parse_time,
    render_text,
    summarize,
    trail_integrity,
)
from medhelm_local.audit.trail import AuditTrail, AuditWriteError, audit_event, read_state, state_path_for
from medhelm_local.audit.verify import ExportedCheckpoint, verify_file
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, VERIFIER_KEY_NAME, load_public_key, load_signing_key
from medhelm_local.home.layout import atomic_write
from medhelm_local.store.runlock import run_in_progress

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
    start = parse_time(since, "--since") if since else None
    end = parse_time(until, "--until") if until else None
    check_window(start, end, "--since", "--until")
    records = AuditTrail(app_context(ctx).home.audit_path).records()
    records = filter_records(records, since=start, until=end, actor=actor, action=action, checkpoints=checkpoints)
    if as_json:
        emit_json(records)
        return
    emit_table("audit trail", ["seq", "time (UTC)", "actor", "role", "action", "outcome", "objects"],
               [[r.get("seq"), r.get("ts"), r.get("actor"), r.get("role"), r.get("action"), r.get("outcome"),
                 json.dumps(r.get("objects"), sort_keys=True, separators=(",", ":"))[:160]] for r in records])


@app.command("verify")
def verify(
    ctx: typer.Context,
    public_key: Path | None = typer.Option(None, "--public-key", "--pubkey",
                                           help="The appliance's Ed25519 public key you trust (PEM or OpenSSH; "
                                           f"`keys export-public --out {VERIFIER_KEY_NAME}` wrote it) "
                                           f"[default: ${PUBKEY_FILE_ENV}, else the home's key checked against "
                                           f"${FINGERPRINT_ENV}]."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="A checkpoint exported earlier with "
                                           "`audit checkpoint --export`: detects a truncated or rewritten tail."),
    trail: Path | None = typer.Option(None, "--trail", help="Verify this copy of an audit trail instead of the "
                                      "home's (needs --public-key or a pinned key file; nothing is written)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Recompute the hash chain and Merkle roots, check every signature against the pinned key, and the record
    count the state file recorded. Exit 0 only when intact."""
    app_ctx = app_context(ctx)
    pinned = pinned_anchor()
    anchor = option_anchor(public_key) if public_key is not None else pinned
    if trail is None:
        path = app_ctx.home.audit_path
    else:
        if anchor is None or anchor.public_key is None:
            raise BadInputError("--trail needs --public-key (the key you trust, not one shipped with the copy) or "
                                f"{PUBKEY_FILE_ENV}")
        path = trail
    if anchor is not None and anchor.public_key is not None:
        key = anchor.public_key
    else:
        key = load_public_key(app_ctx.home.keys_dir / PUBLIC_KEY_FILE)
    external = ExportedCheckpoint.load(checkpoint) if checkpoint else None
    report = verify_file(path, key, external=external, state=read_state(state_path_for(path)), anchor=anchor)
    recorded = False
    if trail is None:
        # Verification is itself audited, but a read-only copy or a home without its private key can still
        # be verified: then the record is not written, and the output says so.
        try:
            audit_event(app_ctx.home, app_ctx.actor, "audit.verify", outcome="intact" if report.intact else "failed",
                        role="compliance", records=report.records, first_bad_seq=report.first_bad_seq,
                        external_checkpoint=external.tree_size if external else None, anchored=report.anchored,
                        key_fingerprint=report.fingerprint)
            recorded = True
        except AuditWriteError:
            recorded = False
    if as_json:
        emit_json({**report.model_dump(), "recorded": recorded})
    else:
        verdict = "INTACT" if report.intact else f"NOT INTACT: first bad record seq {report.first_bad_seq}"
        sys.stdout.write(f"{report.trail}: {report.records} records, {report.checkpoints} signed checkpoints, "
                         f"key {report.fingerprint}: {verdict}\n")
        for problem in report.problems[:50]:
            sys.stdout.write(f"  seq {problem.seq}: {problem.kind}: {problem.detail}\n")
        if len(report.problems) > 50:
            sys.stdout.write(f"  ... and {len(report.problems) - 50} more\n")
        if external:
            sys.stdout.write(f"  checked against exported checkpoint of {external.tree_size} records\n")
        if report.anchored:
            sys.stdout.write(f"  key pinned by {report.anchor_source}\n")
        else:
            info(f"warning: UNANCHORED: checked with the home's own public key, which anyone who can rewrite the "
                 f"trail can replace. Pin the key outside the home ({FINGERPRINT_ENV}={report.fingerprint}, as "
                 "`init` printed it) or name it with --public-key")
        if trail is None and not recorded:
            info("note: this verification could not be recorded in the trail (read-only copy, missing private "
                 "key, or a damaged trail)")
    if not report.intact:
        raise typer.Exit(1)


@app.command("checkpoint")
def checkpoint(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--export", "--out", help="Where to write the signed checkpoint (keep it off the "
                             "appliance; `audit verify --checkpoint FILE` compares the trail with it later)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Sign a fresh checkpoint of the trail's head and export it, so a later truncation or rewrite is detected."""
    app_ctx = app_context(ctx)
    if out.exists() and out.is_dir():
        raise BadInputError(f"--export: {out} is a directory; give a file name")
    app_ctx.home.refuse_output(out, "--export")
    if out.exists() or out.is_symlink():
        # An earlier checkpoint kept off the appliance still proves the trail up to its head: never replace it.
        raise BadInputError(f"--export: {out} already exists (an earlier checkpoint: keep it); give a new file "
                            "name, e.g. with today's date. Nothing was exported")
    signer = fingerprint(load_signing_key(app_ctx.home.keys_dir).public_key())
    pinned = pinned_anchor()
    if pinned is not None and pinned.fingerprint != signer:
        raise AnchorError(f"the home's signing key ({signer}) is not the pinned key {pinned.fingerprint} "
                          f"({pinned.source}); no checkpoint was exported. Run `medhelm-local doctor`")
    trail = AuditTrail(app_ctx.home.audit_path, app_ctx.home.keys_dir)
    trail.append(actor=app_ctx.actor, action="audit.checkpoint_export", outcome="success", role="compliance",
                 objects={"destination": out.name})
    assert trail.last_checkpoint is not None
    exported = {"checkpoint": trail.last_checkpoint, "appliance": app_ctx.home.config.appliance_name,
                "trail": str(app_ctx.home.audit_path), "key_fingerprint": signer}
    atomic_write(out, (json.dumps(exported, indent=2) + "\n").encode(), mode=0o600)
    if as_json:
        emit_json({"out": str(out), "key_fingerprint": signer, **trail.last_checkpoint})
    else:
        info(f"checkpoint of {trail.last_checkpoint['tree_size']} records, root {trail.last_checkpoint['root'][:16]}"
             f"…, key {signer}, written to {out}")


@app.command("repair")
def repair(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")
           ) -> None:
    """Remove a record left half-written by a failed append (crash, full disk), after checking that everything
    before it is intact; the removed bytes are kept beside the trail and the repair is audited."""
    app_ctx = app_context(ctx)
    result = repair_trail(app_ctx.home.audit_path, app_ctx.home.keys_dir)
    if result.removed_bytes:
        audit_event(app_ctx.home, app_ctx.actor, "audit.repair", role="it-admin", kept_records=result.kept_records,
                    removed_bytes=result.removed_bytes, removed_sha256=result.removed_sha256,
                    saved_as=result.saved_as)
    if as_json:
        emit_json(result.model_dump())
    elif result.removed_bytes:
        info(f"removed {result.removed_bytes} bytes of a failed append after record {result.kept_records} (kept in "
             f"{result.saved_as}); the trail verifies up to there and appends work again")
    else:
        info(f"nothing to repair: the trail ends in a complete, signed checkpoint ({result.kept_records} records)")


@app.command("report")
def report(
    ctx: typer.Context,
    since: str | None = typer.Option(None, "--since", help="Only records at or after this ISO date (UTC)."),
    pdf: Path | None = typer.Option(None, "--pdf", help="Also write the printable report as a PDF to this path."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Who ran which benchmarks on which datasets and models; what was exported and who approved it; which actions
    have no outcome recorded (still running, or killed). It first says whether the trail verifies."""
    start = parse_time(since, "--since") if since else None
    home = app_context(ctx).home
    integrity = trail_integrity(home.audit_path, home.keys_dir)
    everything = AuditTrail(home.audit_path).records()
    running = partial(run_in_progress, home.store_path)
    run_statuses = _run_statuses(app_context(ctx))
    summary = summarize(everything, start, running, run_statuses)
    summary.integrity = integrity
    if pdf is not None:
        from medhelm_local.audit.report import compliance_report
        from medhelm_local.audit.report_pdf import render_pdf

        if pdf.is_dir():
            raise BadInputError(f"--pdf: {pdf} is a directory; expected a file path such as report.pdf")
        home.refuse_output(pdf, "--pdf")
        report = compliance_report(everything, since=start, appliance=home.config.appliance_name, running=running,
                                   run_statuses=run_statuses, integrity=integrity)
        atomic_write(pdf, render_pdf(report), mode=0o640)
    if as_json:
        emit_json({**summary.model_dump(), **({"pdf": str(pdf)} if pdf is not None else {})})
    else:
        sys.stdout.write(render_text(summary))
        if pdf is not None:
            info(f"wrote the compliance report as PDF to {pdf}")


def _run_statuses(app_ctx: AppContext) -> dict[str, str] | None:
    """Every run's stored status, by id: what the report says of a run's intent left open by a killed process. None
    where the store cannot be read (none yet, no data key for this user, held by a writer): the report then says
    only what the trail does."""
    if not app_ctx.home.store_path.exists():
        return None
    try:
        with app_ctx.open_store(read_only=True) as store:
            return {run.run_id: run.status for run in store.list_runs()}
    except Exception:  # the store is an aid here: the report is of the trail, and must not fail with the store
        return None

