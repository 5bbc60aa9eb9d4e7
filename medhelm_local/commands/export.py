"""``export``: aggregate-only bundles, built under the disclosure policy and released by an approver's own key.

Roles are keys, listed in the export policy (``$MEDHELM_EXPORT_POLICY``, outside the home): a requester signs a
request with their key (``export request --key FILE``); an approver, another person, signs its manifest digest
on their own machine (``ssh-keygen -Y sign -n medhelm-export``) and the signature releases it (``export release
REQUEST --signature FILE --out DIR``), or signs through ``export approve REQUEST --key FILE``. The appliance
never stores either private key. Approval rebuilds the candidate from the store and compares it with the
audited request (see :mod:`medhelm_local.export.approval`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from medhelm_local.application.exports import (
    approve_export,
    deny_export,
    release_approved,
    release_export,
    request_export,
)
from medhelm_local.audit.anchor import fingerprint
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.errors import BadInputError, MedhelmError
from medhelm_local.export.bundle import (
    APPROVAL_NAMESPACE,
    MANIFEST,
    SIGNATURE,
    ExportRequest,
    list_requests,
    load_request,
    request_dir,
    verify_bundle,
)
from medhelm_local.export.policy import load_policy, load_policy_file
from medhelm_local.home.keys import PUBLIC_KEY_FILE, VERIFIER_KEY_NAME, load_public_key

NAME = "export"
HELP = "Request, approve and verify aggregate-only export bundles (compliance)."
app = typer.Typer(no_args_is_help=True)


def sign_hint(digest: str) -> str:
    return f"printf %s {digest} | ssh-keygen -Y sign -f ~/.ssh/id_ed25519 -n {APPROVAL_NAMESPACE} > approval.sig"


# What a requester can do about a failed scan: the strings it finds are mostly names users chose, which a finished
# run keeps (its model name and run id are in its manifest).
_RENAMED_RUN = ("a finished run keeps its names: request a run made under others (`run --run-id`, or the model "
                "added again under another name)")
BLOCKED_HINTS = {
    "extract_terms": "a word or identifier of the runs' extracts is in a string at the places above, often a model "
                     "name, run id or custom benchmark id sharing a capitalised word with them; " + _RENAMED_RUN,
    "phi_patterns": "a string at the places above has the shape of PHI (a record number, a date, a phone number...) "
                    "or of encoded text, often a model name, run id or custom benchmark id; " + _RENAMED_RUN,
}


def _print_checks(request: ExportRequest) -> None:
    emit_table(f"export request {request.request_id}: {request.status}", ["check", "result", "detail"],
               [[c.id, c.result, c.detail] for c in request.checks])
    for check in request.checks:
        for finding in check.findings[:20]:
            sys.stdout.write(f"  {check.id}: {finding['file']} {finding['location']}: {finding['rule']}\n")
    sys.stdout.write(f"manifest digest: {request.manifest_sha256}\n")
    if request.status == "blocked":
        sys.stdout.write(f"blocked: it can only be denied (`medhelm-local export deny {request.request_id}`); fix "
                         "what the failing checks name, then request again\n")
        for check in request.checks:
            if check.result == "fail" and check.id in BLOCKED_HINTS:
                sys.stdout.write(f"  {check.id}: {BLOCKED_HINTS[check.id]}\n")
    if request.status == "ready":
        sys.stdout.write(f"an approver (not {request.requested_by}) signs it on their own machine:\n  "
                         f"{sign_hint(request.manifest_sha256)}\nthen: medhelm-local export release "
                         f"{request.request_id} --signature approval.sig --out DIR\n")


@app.command("request")
def request(
    ctx: typer.Context,
    runs: str = typer.Option(..., "--runs", help="Comma-separated run ids (finished runs)."),
    key: Path = typer.Option(..., "--key", help="Your own Ed25519 private key (OpenSSH or PEM), listed under "
                             "approval.requesters: it signs the request. Read, used once, never stored."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Build a candidate bundle inside the home, check it against the disclosure policy, sign it as requester.

    Exit 0 when every check passes (the request can be approved), 1 when a check fails (blocked)."""
    app_ctx = app_context(ctx)
    home = app_ctx.home
    run_ids = [r.strip() for r in runs.split(",") if r.strip()]
    if not run_ids or len(set(run_ids)) != len(run_ids):
        raise BadInputError("--runs: expected a comma-separated list of distinct run ids")
    req = request_export(app_ctx, run_ids, key)
    status = req.status
    if as_json:
        emit_json(req.model_dump())
    else:
        _print_checks(req)
        info(f"candidate bundle: {request_dir(home.exports_dir, req.request_id) / 'bundle'} (inside the home; nothing "
             "leaves it before an approver signs)")
    if status != "ready":
        raise typer.Exit(1)


@app.command("list")
def list_(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List export requests and their status."""
    requests = list_requests(app_context(ctx).home.exports_dir)
    if as_json:
        emit_json([r.model_dump() for r in requests])
        return
    emit_table("export requests", ["request", "status", "runs", "requested by", "approved by"],
               [[r.request_id, r.status, ",".join(r.runs), r.requested_by, r.approver] for r in requests])


@app.command("show")
def show(ctx: typer.Context, request_id: str = typer.Argument(..., metavar="REQUEST"),
         as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show a request: every check, its manifest digest and how an approver signs it."""
    req = load_request(app_context(ctx).home.exports_dir, request_id)
    if as_json:
        emit_json(req.model_dump())
    else:
        _print_checks(req)


def _approve_and_report(app_ctx: AppContext, request_id: str, *, signature: str | None, key: Path | None,
                        out: Path | None, as_json: bool) -> None:
    req, bundle = approve_export(app_ctx, request_id, signature=signature, key=key)
    target = release_export(app_ctx, req, out) if out is not None else None
    payload: dict[str, Any] = {"request_id": request_id, "status": req.status, "approver": req.approver,
                               "approver_key": req.approver_key, "manifest_sha256": req.manifest_sha256,
                               "bundle": str(bundle), "released_to": str(target) if target else None}
    if as_json:
        emit_json(payload)
    else:
        info(f"approved {request_id} by {req.approver} ({req.approver_key}), manifest "
             f"{req.manifest_sha256[:16]}…: {bundle}")
        if target:
            info(f"released to {target}")


@app.command("approve")
def approve(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    key: Path | None = typer.Option(None, "--key", help="Your own Ed25519 private key (OpenSSH or PEM), listed "
                                    "under approval.approvers; read, used for one signature, never stored."),
    signature: Path | None = typer.Option(None, "--signature", help="Your SSH signature over the manifest digest "
                                          "(ssh-keygen -Y sign -n medhelm-export), made on your own machine."),
    out: Path | None = typer.Option(None, "--out", help="After approval, copy the bundle to OUT/REQUEST."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Approve a ready request with an approver's key: rebuilt from the store, re-checked, compared with the audit
    trail's request record, then the approver's signature over the manifest digest is added to the bundle."""
    if (key is None) == (signature is None):
        raise BadInputError("give exactly one of --key FILE (your private key) or --signature FILE")
    _approve_and_report(app_context(ctx), request_id, signature=_read_signature(signature), key=key, out=out,
                        as_json=as_json)


def _read_signature(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        raise BadInputError(f"--signature: cannot read {path} as an armored SSH signature") from None


@app.command("deny")
def deny(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Deny (withdraw) a pending request: its candidate files stay inside the home and can never be released.
    Needs no key (it can only stop a release); audited with the acting identity."""
    deny_export(app_context(ctx), request_id)
    if as_json:
        emit_json({"request_id": request_id, "status": "denied"})
    else:
        info(f"denied {request_id}")


@app.command("release")
def release_(
    ctx: typer.Context,
    request_id: str = typer.Argument(..., metavar="REQUEST"),
    out: Path = typer.Option(..., "--out", help="Copy the signed bundle to OUT/REQUEST."),
    signature: Path | None = typer.Option(None, "--signature", help="An approver's SSH signature over the "
                                          "manifest digest (ssh-keygen -Y sign -n medhelm-export): approves a "
                                          "ready request first."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Copy an approved bundle out of the home after re-verifying it against the policy's keys; with
    --signature, approve a ready request with that signature first."""
    app_ctx = app_context(ctx)
    req = load_request(app_ctx.home.exports_dir, request_id)
    if signature is not None and req.status != "approved":
        _approve_and_report(app_ctx, request_id, signature=_read_signature(signature), key=None, out=out,
                            as_json=as_json)
        return
    target = release_approved(app_ctx, request_id, out)
    if as_json:
        emit_json({"request_id": request_id, "released_to": str(target)})
    else:
        info(f"released to {target}")


def _home_public_key(app_ctx: AppContext) -> Path | None:
    """The appliance's public key when this runs on the appliance; a recipient verifying elsewhere has none."""
    try:
        path = app_ctx.home.keys_dir / PUBLIC_KEY_FILE
    except MedhelmError:
        return None
    return path if path.exists() else None


@app.command("verify")
def verify(
    ctx: typer.Context,
    bundle: str = typer.Argument(..., metavar="BUNDLE", help="A bundle directory, or a request id in this home."),
    policy: Path | None = typer.Option(None, "--policy", help="The export policy whose keys are trusted "
                                       "[default: $MEDHELM_EXPORT_POLICY]."),
    public_key: Path | None = typer.Option(None, "--public-key", "--pubkey", help="The appliance's Ed25519 public "
                                           "key (PEM or OpenSSH; `keys export-public --out "
                                           f"{VERIFIER_KEY_NAME}` wrote it), to "
                                           "check its signature and audit checkpoint too [default: the home's, if "
                                           "there is one]."),
    pending: bool = typer.Option(False, "--pending", help="Not approved yet: check the files and the requester's "
                                 "signature, and print the digest an approver signs."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check a bundle: every file against the manifest, the requester's signature, an approver's signature by a
    key the policy lists (not the requester's). Exit 0 only if all hold."""
    path = Path(bundle)
    if not path.exists() and not (path.parent != Path(".") or "/" in bundle):
        path = request_dir(app_context(ctx).home.exports_dir, bundle) / "bundle"
    if path.is_dir() and not (path / MANIFEST).exists() and (path / "bundle").is_dir():
        path = path / "bundle"
    loaded = load_policy_file(policy, "--policy") if policy else load_policy(app_context(ctx).home.root)
    key_path = public_key or _home_public_key(app_context(ctx))
    appliance_key = (load_public_key(public_key, given_as="--public-key") if public_key is not None
                     else load_public_key(key_path) if key_path else None)
    result = verify_bundle(path, loaded, appliance_key=appliance_key, pending=pending)
    if as_json:
        emit_json(result.model_dump())
    else:
        label = ("CHECKED, awaiting approval" if pending else "VERIFIED") if result.ok else "NOT VERIFIED"
        sys.stdout.write(f"{result.bundle}: {label}"
                         f"{' (request ' + result.request_id + ')' if result.request_id else ''}\n")
        if result.ok and not pending:
            sys.stdout.write(f"  requested by {result.requested_by} ({result.requester_key}), approved by "
                             f"{result.approved_by} ({result.approver_key})\n")
        if key_path is None:
            sys.stdout.write(f"  the appliance's own signature ({SIGNATURE}) was not checked: no --public-key\n")
        elif appliance_key is not None:
            sys.stdout.write(f"  appliance key {fingerprint(appliance_key)} (read from {key_path})\n")
        for problem in result.problems:
            sys.stdout.write(f"  {problem}\n")
        for note in result.notes:
            sys.stdout.write(f"  note: {note}\n")
        if pending and result.ok and result.manifest_sha256:
            digest = result.manifest_sha256
            sys.stdout.write(f"  manifest digest: {digest}\n  sign: {sign_hint(digest)}\n")
    if not result.ok:
        raise typer.Exit(1)
