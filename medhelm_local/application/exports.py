"""Use cases: request an export, approve it, release it, deny it (the two-person rule; see
:mod:`medhelm_local.export.approval` for what approval checks, :mod:`medhelm_local.export.bundle` for the bundle).

Each takes the caller's ``AppContext`` and writes the audit records; the CLI (``export ...``) and the console
call them and only present the outcome.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from medhelm_local.audit.intents import Attempt, announce
from medhelm_local.audit.trail import audit_event
from medhelm_local.context import AppContext
from medhelm_local.errors import NotFoundError
from medhelm_local.export import sshsig
from medhelm_local.export.approval import approve as approve_request
from medhelm_local.export.approval import audited_approval, audited_decision, decided_by_hand
from medhelm_local.export.bundle import (
    REQUEST_NAMESPACE,
    REQUEST_SIG,
    ExportRefused,
    ExportRequest,
    ManifestHead,
    build_candidate,
    build_manifest,
    load_request,
    new_request_id,
    now_utc,
    release,
    request_dir,
    request_lock,
    save_request,
    sha256_bytes,
    sign_appliance,
    verify_bundle,
    write_candidate,
)
from medhelm_local.export.policy import POLICY_ENV, load_policy
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key, load_signing_key
from medhelm_local.home.layout import atomic_write
from medhelm_local.phi_text import recorded_path


def _refuse_unknown_runs(app_ctx: AppContext, run_ids: list[str]) -> None:
    """Exit 2, before anything is recorded, where ``--runs`` names a run the store does not hold: the request's
    records name its runs, and a run id that names no run is only what the requester typed (a patient's record
    number, a date). A run that exists was named under the checks of ``run --run-id``."""
    with app_ctx.open_store(read_only=True) as store:
        unknown = [run_id for run_id in run_ids if store.get_run(run_id) is None]
    if unknown:
        raise NotFoundError(f"--runs: {len(unknown)} of the {len(run_ids)} run id(s) name no run in the store (see "
                            "`runs list`); nothing was requested or recorded")


def request_export(app_ctx: AppContext, run_ids: list[str], key: Path) -> ExportRequest:
    """Build a candidate bundle inside the home from ``run_ids``, check it against the disclosure policy and sign
    it with the requester's ``key`` (listed in the policy; read, used once, never stored). The request's
    ``status`` says whether every check passed (``ready``) or not (``blocked``)."""
    home = app_ctx.home
    loaded = load_policy(home.root)
    # A request is signed here (its digest exists only once the candidate is built): there is no --signature.
    private = sshsig.load_private_key(key, otherwise="a request is signed on the appliance, so give --key a "
                                      "requester key it can read (without a passphrase where it cannot decrypt one)")
    _refuse_unknown_runs(app_ctx, run_ids)
    requester_key = sshsig.fingerprint(private.public_key())
    requester = loaded.policy.approval.requester(requester_key)
    if requester is None:
        audit_event(home, app_ctx.actor, "export.request", outcome="refused", role="informatics",
                    runs=run_ids, requester_key=requester_key, reason="not_a_requester", intent_seq=None)
        hint = (f" (no site policy: set {POLICY_ENV} to the export policy file compliance gave you)"
                if loaded.source.startswith("packaged default") else "")
        raise ExportRefused(f"--key: the key {requester_key} is not listed under approval.requesters in "
                            f"{loaded.source}{hint}")
    request_id, requested_at = new_request_id(), now_utc()
    with announce(home, app_ctx.actor, "export.request", role="informatics", request_id=request_id, runs=run_ids,
                  requester_key=requester_key) as attempt:
        assert attempt.checkpoint is not None
        signing_key = load_signing_key(home.keys_dir)
        head: ManifestHead = {
            "request_id": request_id, "appliance": home.config.appliance_name, "policy_sha256": loaded.sha256,
            "requested_by": requester.name, "requester_key": requester_key, "requested_at": requested_at,
            "checkpoint": attempt.checkpoint, "appliance_key": signing_key.public_key()}
        with app_ctx.open_store() as store:
            candidate = build_candidate(store, app_ctx.specs, home.config, run_ids, loaded, request_id=request_id,
                                        generated_at=requested_at, manifest_head=head)
        manifest = build_manifest(files=candidate.hashes, run_manifests=candidate.run_manifests,
                                  checks={c.id: c.result for c in candidate.checks}, **head)
        digest = sha256_bytes(manifest)
        status = candidate.status
        req = ExportRequest(
            request_id=request_id, runs=run_ids, requested_by=requester.name, requester_key=requester_key,
            requested_actor=app_ctx.actor, requested_at=requested_at, policy_sha256=loaded.sha256,
            policy_source=loaded.source, status=status, checks=candidate.checks, files=candidate.hashes,
            run_manifests=candidate.run_manifests, manifest_sha256=digest,
        )
        home.exports_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = write_candidate(home.exports_dir, req, candidate.files)
        final = request_dir(home.exports_dir, request_id)
        try:
            sign_appliance(tmp / "bundle", manifest, signing_key)
            atomic_write(tmp / "bundle" / REQUEST_SIG,
                         sshsig.sign(private, digest.encode("ascii"), REQUEST_NAMESPACE).encode("ascii"), mode=0o600)
            tmp.rename(final)
        except BaseException:  # the attempt records the failure: the trail never says ready for a missing folder
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            attempt.conclude(status, request_id=request_id, runs=run_ids, policy_sha256=loaded.sha256,
                             files=req.files, run_manifests=candidate.run_manifests, requester=requester.name,
                             requester_key=requester_key, requested_at=requested_at, manifest_sha256=digest,
                             failed_checks=[c.id for c in candidate.checks if c.result == "fail"])
        except BaseException:  # the trail refused the outcome: no request folder the trail does not record
            shutil.rmtree(final, ignore_errors=True)
            raise
    return req


def approve_export(app_ctx: AppContext, request_id: str, *, signature: str | None, key: Path | None
                   ) -> tuple[ExportRequest, Path]:
    """Approve a ready request with an approver's signature over its manifest digest (``signature``, made on
    their own machine, or made here with their ``key``), under the request's lock. Returns the request and its
    bundle."""
    with request_lock(app_ctx.home.exports_dir, request_id):
        return approve_request(app_ctx, request_id, signature=signature, key_file=key)


def release_export(app_ctx: AppContext, req: ExportRequest, out: Path) -> Path:
    """Copy an approved bundle to ``out/REQUEST`` after re-verifying it against the policy's keys and the
    trail's approval record; audited before and after the copy."""
    home = app_ctx.home
    bundle = request_dir(home.exports_dir, req.request_id) / "bundle"
    policy, appliance_key = load_policy(home.root), load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    approved = audited_approval(home, req.request_id)

    def problems_of(folder: Path) -> list[str]:
        check = verify_bundle(folder, policy, same_policy=True, appliance_key=appliance_key)
        problems = list(check.problems)
        if approved is None or approved != check.manifest_sha256:
            problems.append("the audit trail records no approval of this manifest")
        return problems

    problems = problems_of(bundle)
    if problems:
        raise _refuse_release(app_ctx, req.request_id, out, ExportRefused(
            f"bundle {req.request_id} does not verify ({'; '.join(problems)}); not released",
            reason="bundle_does_not_verify"))
    with announce(home, app_ctx.actor, "export.release", role="compliance", request_id=req.request_id,
                  manifest_sha256=approved, destination=recorded_path(str(out.resolve()))) as attempt:
        try:
            target = release(bundle, out, req.request_id, check_copy=problems_of)  # the copy is what is checked last
        except ExportRefused as exc:
            raise _refuse_release(app_ctx, req.request_id, out, exc, attempt) from None
        attempt.conclude(request_id=req.request_id, manifest_sha256=approved,
                         destination=recorded_path(str(target.resolve()), keep=(req.request_id,)))
    req.released_to.append(str(target.resolve()))
    save_request(home.exports_dir, req)
    return target


def release_approved(app_ctx: AppContext, request_id: str, out: Path) -> Path:
    """Release ``request_id`` only if it was approved (an approver's signature is what lets a bundle leave)."""
    req = load_request(app_ctx.home.exports_dir, request_id)
    if req.status != "approved":
        raise _refuse_release(app_ctx, request_id, out, ExportRefused(
            f"export request {request_id} is {req.status}; only a bundle an approver signed leaves the home "
            "(--signature FILE)", reason="not_approved"))
    return release_export(app_ctx, req, out)


def _refuse_release(app_ctx: AppContext, request_id: str, out: Path, refused: ExportRefused,
                    attempt: Attempt | None = None) -> ExportRefused:
    """Audit a refused release (an attempt to take a bundle out of the home is recorded, whatever stopped it), as
    the outcome of ``attempt`` when it was refused after its intent was recorded."""
    objects = {"request_id": request_id, "reason": refused.reason, "destination": recorded_path(str(out.resolve()))}
    if attempt is not None:
        attempt.conclude("refused", **objects)
    else:
        audit_event(app_ctx.home, app_ctx.actor, "export.release", outcome="refused", role="compliance",
                    intent_seq=None, **objects)
    return refused


def deny_export(app_ctx: AppContext, request_id: str) -> ExportRequest:
    """Deny (withdraw) a pending request: its candidate stays inside the home and can never be released."""
    with request_lock(app_ctx.home.exports_dir, request_id):
        req = load_request(app_ctx.home.exports_dir, request_id)
        decided = audited_decision(app_ctx.home, request_id)
        if req.status in ("approved", "denied") or decided is not None:  # refused, audited, as approve refuses
            audit_event(app_ctx.home, app_ctx.actor, "export.deny", outcome="refused", role="compliance",
                        request_id=request_id, reason="already_decided")
            raise ExportRefused(f"export request {request_id} was already {req.status}" if decided is None
                                or req.status == decided else decided_by_hand(req, decided, "denied"))
        audit_event(app_ctx.home, app_ctx.actor, "export.deny", outcome="denied", role="compliance",
                    request_id=request_id)
        req.status, req.decided_by, req.decided_at = "denied", app_ctx.actor, now_utc()
        save_request(app_ctx.home.exports_dir, req)
    return req
