"""``export``: aggregate-only bundles, built under the disclosure policy and released after compliance sign-off.

Roles: anyone who can run the CLI may *request* an export (recorded as role ``informatics``). Approving or
denying needs the compliance role: ``--approver NAME`` must be listed under ``approval.approvers`` in the
export policy in force (``<home>/policies/export-policy.yaml``), and NAME may not be the requester (unless
the policy allows self-approval). The decision is recorded with role ``compliance``, the approver's name
and the acting OS user / ``--actor`` identity.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import typer

from medhelm_local.audit.trail import AuditTrail, audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.errors import BadInputError
from medhelm_local.export.bundle import (
    MANIFEST,
    SIGNATURE,
    ExportRefused,
    ExportRequest,
    build_candidate,
    build_manifest,
    bundle_hashes,
    list_requests,
    load_request,
    new_request_id,
    now_utc,
    release,
    request_dir,
    request_lock,
    save_request,
    sha256_bytes,
    sign_bundle,
    verify_bundle,
    write_candidate,
)
from medhelm_local.export.policy import LoadedPolicy, load_policy
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key, load_signing_key
from medhelm_local.store import Store

NAME = "export"
HELP = "Request, approve and verify aggregate-only export bundles (compliance)."
app = typer.Typer(no_args_is_help=True)


def _print_checks(request: ExportRequest) -> None:
    emit_table(f"export request {request.request_id}: {request.status}", ["check", "result", "detail"],
               [[c.id, c.result, c.detail] for c in request.checks])
    for check in request.checks:
        for finding in check.findings[:20]:
            sys.stdout.write(f"  {check.id}: {finding['file']} {finding['location']}: {finding['rule']}\n")


@app.command("request")
def request(
    ctx: typer.Context,
    runs: str = typer.Option(..., "--runs", help="Comma-separated run ids (finished runs)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Build a candidate bundle inside the home and check it against the disclosure policy.

    Exit 0 when every check passes (the request can be approved), 1 when a check fails (blocked)."""
    app_ctx = app_context(ctx)
    home = app_ctx.home
    run_ids = [r.strip() for r in runs.split(",") if r.strip()]
    if not run_ids or len(set(run_ids)) != len(run_ids):
        raise BadInputError("--runs: expected a comma-separated list of distinct run ids")
    loaded = load_policy(home.root)
    request_id = new_request_id()
    with Store.open(home, read_only=False) as store:
        files, checks, run_manifests = build_candidate(store, home.config, run_ids, loaded, request_id=request_id)
    status = "ready" if all(c.result == "pass" for c in checks) else "blocked"
    req = ExportRequest(
        request_id=request_id, runs=run_ids, requested_by=app_ctx.actor, requested_at=now_utc(),
        policy_sha256=loaded.sha256, policy_source=loaded.source, status=status, checks=checks,
        files={name: sha256_bytes(content) for name, content in files.items()}, run_manifests=run_manifests,
    )
    home.exports_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = write_candidate(home.exports_dir, req, files)
    try:
        audit_event(home, app_ctx.actor, "export.request", outcome=status, role="informatics",
                    request_id=request_id, runs=run_ids, policy_sha256=loaded.sha256, files=req.files,
                    run_manifests=run_manifests, failed_checks=[c.id for c in checks if c.result == "fail"])
        tmp.rename(request_dir(home.exports_dir, request_id))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if as_json:
        emit_json(req.model_dump())
    else:
        _print_checks(req)
        info(f"candidate bundle: {request_dir(home.exports_dir, request_id) / 'bundle'} (inside the home; nothing "
             "leaves it before approval)")
    if status != "ready":
        raise typer.Exit(1)


@app.command("list")
def list_(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List export requests and their status."""
    requests = list_requests(app_context(ctx).home.exports_dir)
    if as_json:
        emit_json([r.model_dump() for r in requests])
        return
    emit_table("export requests", ["request", "status", "runs", "requested by", "decided by"],
               [[r.request_id, r.status, ",".join(r.runs), r.requested_by, r.decided_by] for r in requests])


@app.command("show")
def show(ctx: typer.Context, request_id: str = typer.Argument(..., metavar="REQUEST"),
         as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show a request: every check and its result."""
    req = load_request(app_context(ctx).home.exports_dir, request_id)
    if as_json:
        emit_json(req.model_dump())
    else:
        _print_checks(req)


def _authorize(app_ctx: AppContext, req: ExportRequest, approver: str, loaded: LoadedPolicy, action: str) -> None:
    approval = loaded.policy.approval
    reason = None
    if approver not in approval.approvers:
        reason = "not_an_approver"
    elif not approval.allow_self_approval and approver in (req.requested_by, req.requested_by.split(":", 1)[-1]):
        reason = "self_approval"
    if reason:
        audit_event(app_ctx.home, app_ctx.actor, action, outcome="refused", role="compliance",
                    request_id=req.request_id, approver=approver, reason=reason)
        if reason == "not_an_approver":
            raise ExportRefused(f"--approver: {approver!r} does not hold the compliance role (not listed under "
                                f"approval.approvers in {loaded.source})")
        raise ExportRefused(f"--approver: {approver!r} requested this export and may not approve it")


def _pending(app_ctx: AppContext, request_id: str) -> tuple[ExportRequest, LoadedPolicy]:
    home = app_ctx.home
    req = load_request(home.exports_dir, request_id)
    if req.status in ("approved", "denied"):
        raise ExportRefused(f"export request {request_id} was already {req.status} by {req.decided_by}")
    loaded = load_policy(home.root)
    if loaded.sha256 != req.policy_sha256:
        raise ExportRefused(f"the export policy changed since request {request_id} was made; make a new request")
    return req, loaded


def _release(app_ctx: AppContext, req: ExportRequest, out: Path) -> Path:
    home = app_ctx.home
    bundle = request_dir(home.exports_dir, req.request_id) / "bundle"
    check = verify_bundle(bundle, load_public_key(home.keys_dir / PUBLIC_KEY_FILE))
    if not check.ok:
        raise ExportRefused(f"bundle {req.request_id} does not verify ({'; '.join(check.problems)}); not released")
    audit_event(home, app_ctx.actor, "export.release", outcome="started", role="compliance",
                request_id=req.request_id, manifest_sha256=req.manifest_sha256, destination=str(out.resolve()))
    target = release(bundle, out, req.request_id)
    audit_event(home, app_ctx.actor, "export.release", outcome="success", role="compliance",
                request_id=req.request_id, manifest_sha256=req.manifest_sha256, destination=str(target.resolve()))
    req.released_to.append(str(target.resolve()))
    save_request(home.exports_dir, req)
    return target


@app.command("approve")
def approve(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    approver: str = typer.Option(..., "--approver", help="Your name as listed under approval.approvers."),
    out: Path | None = typer.Option(None, "--out", help="After signing, copy the bundle to OUT/REQUEST."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Approve a ready request: sign its manifest (file hashes, policy, run manifests, audit checkpoint)."""
    app_ctx = app_context(ctx)
    with request_lock(app_ctx.home.exports_dir, request_id):
        req, bundle = _approve(app_ctx, request_id, approver)
    target = _release(app_ctx, req, out) if out is not None else None
    payload: dict[str, Any] = {"request_id": request_id, "status": req.status, "approver": approver,
                               "manifest_sha256": req.manifest_sha256, "bundle": str(bundle),
                               "released_to": str(target) if target else None}
    if as_json:
        emit_json(payload)
    else:
        info(f"approved and signed {request_id} (manifest {str(req.manifest_sha256)[:16]}…): {bundle}")
        if target:
            info(f"released to {target}")


def _approve(app_ctx: AppContext, request_id: str, approver: str) -> tuple[ExportRequest, Path]:
    home = app_ctx.home
    req, loaded = _pending(app_ctx, request_id)
    _authorize(app_ctx, req, approver, loaded, "export.approve")
    if req.status != "ready":
        raise ExportRefused(f"export request {request_id} is {req.status}: a check failed, so it cannot be approved "
                            "(see `export show`); deny it or fix the cause and request again")
    bundle = request_dir(home.exports_dir, request_id) / "bundle"
    current = {name: digest for name, digest in bundle_hashes(bundle).items() if name not in (MANIFEST, SIGNATURE)}
    if current != req.files:  # (a manifest left by an interrupted approval is simply replaced)
        raise ExportRefused(f"the candidate files of {request_id} changed after the request; not approved")
    key = load_signing_key(home.keys_dir)
    trail = AuditTrail(home.audit_path, home.keys_dir)
    trail.append(actor=app_ctx.actor, action="export.approve", outcome="started", role="compliance",
                 objects={"request_id": request_id, "approver": approver})
    assert trail.last_checkpoint is not None
    manifest = build_manifest(req, appliance=home.config.appliance_name, approver=approver,
                              approver_actor=app_ctx.actor, checkpoint=trail.last_checkpoint, signer=key.public_key())
    sign_bundle(bundle, manifest, key)
    req.status, req.decided_by, req.approver = "approved", app_ctx.actor, approver
    req.decided_at, req.manifest_sha256 = now_utc(), sha256_bytes(manifest)
    audit_event(home, app_ctx.actor, "export.approve", outcome="approved", role="compliance", request_id=request_id,
                approver=approver, manifest_sha256=req.manifest_sha256, files=req.files)
    save_request(home.exports_dir, req)
    return req, bundle


@app.command("deny")
def deny(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    approver: str = typer.Option(..., "--approver", help="Your name as listed under approval.approvers."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Deny a request; its candidate files stay inside the home and can never be released."""
    app_ctx = app_context(ctx)
    with request_lock(app_ctx.home.exports_dir, request_id):
        req, loaded = _pending(app_ctx, request_id)
        _authorize(app_ctx, req, approver, loaded, "export.deny")
        audit_event(app_ctx.home, app_ctx.actor, "export.deny", outcome="denied", role="compliance",
                    request_id=request_id, approver=approver)
        req.status, req.decided_by, req.approver, req.decided_at = "denied", app_ctx.actor, approver, now_utc()
        save_request(app_ctx.home.exports_dir, req)
    if as_json:
        emit_json({"request_id": request_id, "status": "denied", "approver": approver})
    else:
        info(f"denied {request_id}")


@app.command("release")
def release_(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    out: Path = typer.Option(..., "--out", help="Copy the signed bundle to OUT/REQUEST."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Copy an approved bundle out of the home (after re-verifying its signature)."""
    app_ctx = app_context(ctx)
    req = load_request(app_ctx.home.exports_dir, request_id)
    if req.status != "approved":
        raise ExportRefused(f"export request {request_id} is {req.status}; only approved bundles leave the home")
    target = _release(app_ctx, req, out)
    if as_json:
        emit_json({"request_id": request_id, "released_to": str(target)})
    else:
        info(f"released to {target}")


@app.command("verify")
def verify(
    ctx: typer.Context,
    bundle: str = typer.Argument(..., metavar="BUNDLE", help="A bundle directory, or a request id in this home."),
    public_key: Path | None = typer.Option(None, "--public-key", help="The appliance's Ed25519 public key (PEM) "
                                           "[default: the home's]."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check a signed bundle: the signature, every file's sha256, no file added or missing. Exit 0 only if intact."""
    path = Path(bundle)
    if not path.exists() and not (path.parent != Path(".") or "/" in bundle):
        path = request_dir(app_context(ctx).home.exports_dir, bundle) / "bundle"
    if path.is_dir() and not (path / SIGNATURE).exists() and (path / "bundle").is_dir():
        path = path / "bundle"
    key_path = public_key or app_context(ctx).home.keys_dir / PUBLIC_KEY_FILE
    result = verify_bundle(path, load_public_key(key_path))
    if as_json:
        emit_json(result.model_dump())
    else:
        sys.stdout.write(f"{result.bundle}: {'VERIFIED' if result.ok else 'NOT VERIFIED'}"
                         f"{' (request ' + result.request_id + ')' if result.request_id else ''}\n")
        for problem in result.problems:
            sys.stdout.write(f"  {problem}\n")
    if not result.ok:
        raise typer.Exit(1)
