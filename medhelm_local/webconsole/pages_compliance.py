"""Compliance: the audit trail (filters), its verification against the pinned key, the printable compliance
report (HTML, and PDF to download), and export requests (bundle preview, checks, approval state). Release stays
with the approver's own key: the console shows what to sign and never holds an approver key."""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from medhelm_local.audit.report import (
    ComplianceReport,
    check_window,
    compliance_report,
    filter_records,
    parse_time,
    trail_integrity,
)
from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.audit.verify import VerifyReport, verify_with_pinned_key
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.export import approval as export_approval
from medhelm_local.export import bundle as export_bundle
from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.store.runlock import run_in_progress
from medhelm_local.webconsole.app import bad_form_token, check_csrf, console_of, identity_of, requires
from medhelm_local.webconsole.data import reading

COMPLIANCE = ConsoleRole.COMPLIANCE
MAX_RECORDS = 500
# What an action's first word says it concerns (the audit page's legend; COMPLIANCE.md section 1 has the details).
ACTION_FAMILIES = {
    "appliance": "setting the appliance up (init)",
    "audit": "the audit trail itself: a verification, an exported checkpoint, a repair",
    "benchmark": "a custom benchmark spec added or removed",
    "config": "a model added, changed or removed in appliance.yaml",
    "console": "the web console: sign-in and sign-out, patient-level views (instances, a response to rate), "
               "ratings, refusals",
    "dataset": "an extract or benchmark file registered (its fingerprint, never its content)",
    "egress": "a network connection the allowlist refused",
    "endpoint": "a model server a run used (its address and version)",
    "export": "an export request, its approval or denial, and its release",
    "jury": "the LLM jury: re-scoring and validation against clinicians' ratings",
    "keys": "the signing and storage keys: rotation, recovery, public key export",
    "leaderboard": "a leaderboard viewed from the command line",
    "report": "a report written",
    "run": "an evaluation run: its start, resumption, merge and finish (scored and failed counts)",
    "score": "outputs made elsewhere scored against a registered dataset",
    "server": "a local model server started or stopped",
}
# What each outcome the appliance writes means (the audit page's legend): an officer reads "denied" on an export an
# officer stopped and on a connection the allowlist stopped, so each says whose decision it was.
OUTCOMES = {
    "success": "done as asked",
    "started": "written before a step that matters (an intent): the record of how it ended follows and names it "
               "(intent_seq); one with nothing after it is listed as unfinished in the compliance report",
    "attempt": "as started: written before a file is read for registration",
    "failure": "tried and failed; the error's kind or a reason is under Objects (a run's finish: no request of the "
               "run was answered; a run with some failed requests finishes success, its failed count under Objects)",
    "refused": "the appliance refused to do it and did nothing (the reason under Objects): for example an approval "
               "signed by a key that is not an approver's, or a resume of a run whose benchmark spec or model "
               "changed",
    "rejected": "a file the appliance would not register (why, as the error's kind, under Objects)",
    "denied": "stopped: by the appliance for a network connection outside the allowlist (egress.denied) or a console "
              "page or sign-in the user may not have (console.*); by a compliance officer for an export request "
              "(export.deny)",
    "ready": "an export request that passed every check and awaits an approver's signature",
    "blocked": "an export request that failed a check: it can only be denied",
    "approved": "an export request an approver signed with their own key",
    "intact": "a verification of the trail that found every record as it was signed",
    "failed": "a verification of the trail that found it damaged (the first bad record under Objects)",
    "recovered": "written late for a step whose process ended (killed, power lost) part-way, completed by the next "
                 "command: a run finished in the store before its finish was recorded (run.finish), a key rotation "
                 "rolled forward (keys.rotate)",
    "abandoned": "written late by the next run for a run whose process ended before the run was created: nothing "
                 "was sent",
}
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; script-src 'none'; sandbox"


def verify_trail(home: Home) -> tuple[VerifyReport, str]:
    """Verify the home's trail against the pinned key, as ``audit verify`` does, and say where the key came from."""
    return verify_with_pinned_key(home.audit_path, home.keys_dir)


def _time(request: Request, name: str) -> datetime | None:
    value = request.query_params.get(name, "").strip()
    return parse_time(value, name) if value else None


@requires(COMPLIANCE)
def audit_trail(request: Request) -> Response:
    console = console_of(request)
    filters = {k: request.query_params.get(k, "").strip() for k in ("actor", "action", "since", "until")}
    records = filter_records(AuditTrail(console.home.audit_path).records())  # events: checkpoints not listed
    times: dict[str, datetime | None] = {}
    errors: dict[str, str] = {}
    for name in ("since", "until"):
        try:
            times[name] = _time(request, name)
        except BadInputError as exc:
            errors[name] = str(exc)
    invalid = set(errors)
    if not errors:
        try:
            check_window(times["since"], times["until"], "since", "until")
        except BadInputError as exc:
            errors["until"], invalid = str(exc), {"since", "until"}
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        errors["page"] = "page: expected a number"
        invalid.add("page")
    if errors:  # the form again, with what was typed, each wrong field marked and what is wrong with it
        return console.render(request, "audit.html", records=[], matched=0, total=len(records), filters=filters,
                              limit=MAX_RECORDS, error="; ".join(errors.values()), invalid=invalid,
                              status_code=400)
    chosen = filter_records(records, since=times["since"], until=times["until"],
                            actor=filters["actor"] or None, action=filters["action"] or None)
    pages = max(1, -(-len(chosen) // MAX_RECORDS))
    page = min(page, pages - 1)  # past the end (the trail as it was when the link was made): its last page

    def link(number: int) -> str | None:  # the same filters, another page of what they match
        kept = {k: v for k, v in filters.items() if v}
        return "/audit?" + urlencode({**kept, "page": number}) if 0 <= number < pages else None

    shown = list(reversed(chosen))[page * MAX_RECORDS:(page + 1) * MAX_RECORDS]
    return console.render(request, "audit.html", records=shown, matched=len(chosen), total=len(records),
                          filters=filters, limit=MAX_RECORDS, invalid=set(), page=page, pages=pages,
                          previous=link(page - 1), next=link(page + 1), families=ACTION_FAMILIES,
                          outcomes=OUTCOMES)


@requires(COMPLIANCE)
async def audit_verify(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    if not check_csrf(request, form):
        return bad_form_token(request, "/audit")

    def verify() -> tuple[VerifyReport, str, bool]:
        report, source = verify_trail(console.home)
        try:
            console.audit(identity_of(request), "audit.verify", outcome="intact" if report.intact else "failed",
                          role="compliance", records=report.records, first_bad_seq=report.first_bad_seq,
                          key_fingerprint=getattr(report, "fingerprint", "") or None)
        except AuditWriteError:
            if report.intact:  # nothing wrong with what it holds, yet it cannot be written: fail closed as elsewhere
                raise
            # A damaged trail refuses appends; what this check found is what the officer came to see (hashes and
            # sequence numbers only), so it is shown, and the page says it could not be recorded, as `audit verify`.
            return report, source, False
        return report, source, True

    report, source, recorded = await run_in_threadpool(verify)
    return console.render(request, "audit_verify.html", report=report, key_source=source, recorded=recorded,
                          status_code=200 if report.intact else 409)


def _compliance_report(request: Request) -> ComplianceReport:
    console = console_of(request)
    return compliance_report(AuditTrail(console.home.audit_path).records(), since=_time(request, "since"),
                             appliance=console.home.config.appliance_name,
                             running=partial(run_in_progress, console.home.store_path),
                             run_statuses=_run_statuses(console.home),
                             integrity=trail_integrity(console.home.audit_path, console.home.keys_dir))


def _run_statuses(home: Home) -> dict[str, str] | None:
    """Every run's stored status, by id, as for ``audit report``: None where the store cannot be read now."""
    try:
        with reading(home) as store:
            return {run.run_id: run.status for run in store.list_runs()}
    except Exception:  # the store is an aid here: the report is of the trail, and must not fail with the store
        return None


@requires(COMPLIANCE)
def audit_report(request: Request) -> Response:
    console = console_of(request)
    since = request.query_params.get("since", "").strip()
    try:
        report = _compliance_report(request)
    except BadInputError as exc:  # the form again, with what was typed and what is wrong with it; no report
        return console.render(request, "audit_report.html", report=None, since=since, pdf_link=None,
                              error=str(exc), error_field="since", status_code=400)
    pdf_link = "/audit/report.pdf" + (f"?{urlencode({'since': since})}" if since else "")
    return console.render(request, "audit_report.html", report=report, since=since, pdf_link=pdf_link)


@requires(COMPLIANCE)
async def audit_report_pdf(request: Request) -> Response:
    """The same report as a PDF file (drawn in Python: fpdf2), to download and file."""
    report = _compliance_report(request)
    from medhelm_local.audit.report_pdf import render_pdf

    content = await run_in_threadpool(render_pdf, report)
    stamp = report.generated[:10]
    return Response(content, media_type="application/pdf",
                    headers={"Content-Disposition": f'attachment; filename="compliance-report-{stamp}.pdf"'})


def _request(home: Home, request_id: str) -> export_bundle.ExportRequest:
    try:
        return export_bundle.load_request(home.exports_dir, request_id)
    except BadInputError:
        raise NotFoundError(f"no export request {request_id!r}") from None


@requires(COMPLIANCE)
def exports(request: Request) -> Response:
    console = console_of(request)
    return console.render(request, "exports.html", requests=export_bundle.list_requests(console.home.exports_dir))


PREVIEWED_TABLES = ("leaderboard.csv", "categories.csv", "cells.csv")


def _preview(bundle: Path) -> dict[str, Any]:
    """The bundle as it would leave: its files (names, sizes, sha256) and each of its tables, cell for cell."""
    files = []
    for path in sorted(bundle.iterdir()) if bundle.is_dir() else []:
        if path.is_file():
            files.append({"name": path.name, "bytes": path.stat().st_size,
                          "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    tables = {name: list(csv.reader(io.StringIO((bundle / name).read_text(encoding="utf-8"))))
              for name in PREVIEWED_TABLES if (bundle / name).is_file()}
    return {"files": files, "tables": {name: rows for name, rows in tables.items() if rows}}


@requires(COMPLIANCE)
def export_detail(request: Request) -> Response:
    console = console_of(request)
    req = _request(console.home, request.path_params["request_id"])
    folder = export_bundle.request_dir(console.home.exports_dir, req.request_id)
    preview = _preview(folder / "bundle")
    mismatched = sorted(f["name"] for f in preview["files"] if req.files.get(f["name"]) not in (None, f["sha256"]))
    return console.render(request, "export.html", req=req, preview=preview, mismatched=mismatched,
                          namespace=export_bundle.APPROVAL_NAMESPACE,
                          # Where an approval leads (?approved=1); the address alone never says a request is approved.
                          approved=request.query_params.get("approved") == "1" and req.status == "approved"
                          and req.decided_by == identity_of(request).user)


@requires(COMPLIANCE)
def export_report(request: Request) -> Response:
    """The bundle's own report.html, byte for byte, sandboxed (it runs nothing and loads nothing)."""
    console = console_of(request)
    req = _request(console.home, request.path_params["request_id"])
    path = export_bundle.request_dir(console.home.exports_dir, req.request_id) / "bundle" / "report.html"
    if not path.is_file():
        raise NotFoundError("this request has no report.html")
    return Response(path.read_bytes(), media_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": REPORT_CSP})


MAX_SIGNATURE_BYTES = 16 * 1024


async def _signature_text(form: Any) -> str:
    text = str(form.get("signature") or "")
    upload = form.get("signature_file")
    if isinstance(upload, UploadFile):
        content = await upload.read(MAX_SIGNATURE_BYTES + 1)
        if content:
            if len(content) > MAX_SIGNATURE_BYTES:
                raise BadInputError("the signature file is too large for an SSH signature")
            try:
                text = content.decode("ascii")
            except UnicodeDecodeError:
                raise BadInputError("the signature file is not an armored SSH signature (ASCII)") from None
    signature = text.replace("\r\n", "\n").strip() + "\n"  # a browser sends a textarea with CRLF
    if "BEGIN SSH SIGNATURE" not in signature:
        raise BadInputError("paste or upload the armored SSH signature (-----BEGIN SSH SIGNATURE-----)")
    return signature


@requires(COMPLIANCE)
async def export_approve(request: Request) -> Response:
    """Approve with a signature the approver made on their own machine (``ssh-keygen -Y sign``) over the
    request's manifest digest. The console holds no approver key: the export module checks everything again
    (rebuilt from the store, the audit trail's request record, requester and approver keys in the policy) and
    records the approval under this user's name."""
    console = console_of(request)
    identity = identity_of(request)
    request_id = request.path_params["request_id"]
    form = await request.form()
    if not check_csrf(request, form):
        return bad_form_token(request, f"/exports/{request_id}")
    _request(console.home, request_id)  # an unknown id: not found

    def approve() -> None:
        from medhelm_local.context import AppContext

        with export_bundle.request_lock(console.home.exports_dir, request_id):
            export_approval.approve(AppContext(home=console.home, actor=identity.user), request_id,
                                    signature=signature, key_file=None)

    try:
        signature = await _signature_text(form)
    except BadInputError as exc:  # nothing the export module could check: refused, and audited, here
        console.audit(identity, "export.approve", outcome="refused", role="compliance", request_id=request_id,
                      reason="signature_unreadable")
        return _approval_refused(request, request_id, exc, form)
    try:
        await run_in_threadpool(approve)
    except NotFoundError:
        raise
    except (BadInputError, export_bundle.ExportRefused, export_approval.ApprovalRefused) as exc:
        return _approval_refused(request, request_id, exc, form)
    return RedirectResponse(f"/exports/{request_id}?approved=1", status_code=303)


@requires(COMPLIANCE)
async def export_deny(request: Request) -> Response:
    """Deny (withdraw) a pending request, as ``export deny`` does: no key is needed, since a denial can only stop a
    release; the export module audits it under this user's name and refuses a request already decided."""
    from medhelm_local.application.exports import deny_export
    from medhelm_local.context import AppContext

    console = console_of(request)
    request_id = request.path_params["request_id"]
    form = await request.form()
    if not check_csrf(request, form):
        return bad_form_token(request, f"/exports/{request_id}")
    _request(console.home, request_id)  # an unknown id: not found
    try:
        await run_in_threadpool(deny_export, AppContext(home=console.home, actor=identity_of(request).user),
                                request_id)
    except export_bundle.ExportRefused as exc:
        return console.render(request, "error.html", status_code=409, title="Denial refused",
                              message=f"{exc}. Nothing was changed.",
                              back=(f"/exports/{request_id}", f"Back to export request {request_id}"))
    return RedirectResponse(f"/exports/{request_id}", status_code=303)


def _approval_refused(request: Request, request_id: str, exc: Exception, form: Any) -> Response:
    """Refused (a bad signature, or the request is no longer what was requested and audited): say so and why, and
    give the form again with what was pasted (an uploaded file cannot be put back into its field), while the request
    can still be approved; and lead back to the request."""
    console = console_of(request)
    return console.render(request, "approve_refused.html", status_code=400 if isinstance(exc, BadInputError) else 409,
                          req=_request(console.home, request_id), message=str(exc), refused=True,
                          signature=pasted if isinstance(pasted := form.get("signature"), str) else "",
                          namespace=export_bundle.APPROVAL_NAMESPACE)


def routes() -> list[Route]:
    return [
        Route("/audit", audit_trail), Route("/audit/verify", audit_verify, methods=["POST"]),
        Route("/audit/report", audit_report), Route("/audit/report.pdf", audit_report_pdf),
        Route("/exports", exports),
        Route("/exports/{request_id}", export_detail), Route("/exports/{request_id}/report.html", export_report),
        Route("/exports/{request_id}/approve", export_approve, methods=["POST"]),
        Route("/exports/{request_id}/deny", export_deny, methods=["POST"]),
    ]
