"""Requesting and approving exports: what the two-person rule rests on.

A request is signed by a requester's key (listed in the policy); approval needs an approver's SSH signature over
the request's manifest digest, by another person's key (listed in the policy). The appliance never holds either
private key: ``--key FILE`` is read from where the signer keeps it, used for one signature, and forgotten;
``--signature FILE`` is made elsewhere (``ssh-keygen -Y sign -n medhelm-export``).

Approval trusts nothing under ``exports/``: it rebuilds the candidate from the store, re-runs every check (the
differencing check against what was released since included), and compares the result with the audit trail's
``export.request`` record (runs, policy, files, run manifests, checks, manifest digest). Any difference refuses
approval (exit 1) and is audited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medhelm_local.audit.intents import announce
from medhelm_local.audit.trail import AuditTrail, audit_event
from medhelm_local.context import AppContext
from medhelm_local.errors import MedhelmError
from medhelm_local.export import sshsig
from medhelm_local.export.bundle import (
    APPROVAL_NAMESPACE,
    APPROVAL_SIG,
    MANIFEST,
    REQUEST_NAMESPACE,
    REQUEST_SIG,
    Candidate,
    ExportRefused,
    ExportRequest,
    ManifestHead,
    build_candidate,
    build_manifest,
    digest_messages,
    load_request,
    now_utc,
    request_dir,
    save_request,
    sha256_bytes,
)
from medhelm_local.export.differencing import record_released
from medhelm_local.export.policy import LoadedPolicy, load_policy
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key, load_signing_key
from medhelm_local.home.layout import atomic_write


class ApprovalRefused(MedhelmError):
    """The request as it stands is not what was requested and audited, or no longer passes its checks."""

    exit_code = 1


@dataclass
class AuditedRequest:
    record: dict[str, Any]

    @property
    def objects(self) -> dict[str, Any]:
        return dict(self.record.get("objects") or {})


def _refuse(app_ctx: AppContext, request_id: str, reason: str, message: str, *, exit_one: bool = False,
            **detail: Any) -> MedhelmError:
    audit_event(app_ctx.home, app_ctx.actor, "export.approve", outcome="refused", role="compliance",
                request_id=request_id, reason=reason, intent_seq=None, **detail)  # refused before its intent
    return ApprovalRefused(message) if exit_one else ExportRefused(message)


def audited_request(app_ctx: AppContext, request_id: str) -> AuditedRequest:
    """The trail's ``export.request`` record of ``request_id``, after checking the whole trail verifies."""
    from medhelm_local.audit.anchor import AnchorError, check_matches, pinned_anchor
    from medhelm_local.audit.trail import read_state, state_path_for
    from medhelm_local.audit.verify import verify_file

    home = app_ctx.home
    # The trail is checked against the key pinned outside the home where there is one: a requester who replaced
    # the trail and the home's public key together must not pass.
    anchor = pinned_anchor()
    key = load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    if anchor is not None:
        if anchor.public_key is not None:
            key = anchor.public_key
        else:
            try:
                check_matches(key, anchor, what="the home's audit public key")
            except AnchorError:
                raise _refuse(app_ctx, request_id, "audit_key_not_pinned_key", "the home's audit key is not the "
                              "pinned key (`audit verify`, `doctor`); an export cannot be approved", exit_one=True
                              ) from None
    report = verify_file(home.audit_path, key, state=read_state(state_path_for(home.audit_path)), anchor=anchor)
    if not report.intact:
        raise _refuse(app_ctx, request_id, "audit_trail_not_intact", "the audit trail does not verify (`audit "
                      "verify`); an export cannot be approved against it", exit_one=True)
    for record in reversed(AuditTrail(home.audit_path).records()):
        objects = record.get("objects") or {}
        if (record.get("action") == "export.request" and objects.get("request_id") == request_id
                and record.get("outcome") in ("ready", "blocked")):
            return AuditedRequest(record)
    raise _refuse(app_ctx, request_id, "not_audited", f"no audited export.request record for {request_id}: it was "
                  "not made by `export request` on this appliance", exit_one=True)


def _manifest_fields(bundle: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        data = (bundle / MANIFEST).read_bytes()
        manifest = json.loads(data)
        if not isinstance(manifest, dict):
            raise ValueError
        return data, manifest
    except (OSError, ValueError):
        return b"", {}


def check_against_audit(app_ctx: AppContext, request_id: str, loaded: LoadedPolicy
                        ) -> tuple[AuditedRequest, str, Candidate]:
    """Rebuild the candidate from the store and compare it with the audited request and the bundle on disk.
    Returns (the audited request, the manifest digest, the rebuilt candidate); raises on any difference."""
    home = app_ctx.home
    audited = audited_request(app_ctx, request_id)
    want = audited.objects
    if loaded.sha256 != want.get("policy_sha256"):
        raise _refuse(app_ctx, request_id, "policy_changed", f"the export policy in force ({loaded.source}) is not "
                      f"the one request {request_id} was checked under; make a new request", exit_one=True)
    bundle = request_dir(home.exports_dir, request_id) / "bundle"
    manifest_bytes, manifest = _manifest_fields(bundle)
    runs = [str(r) for r in want.get("runs") or []]
    head: ManifestHead = {
        "request_id": request_id, "appliance": str(manifest.get("appliance")), "policy_sha256": loaded.sha256,
        "requested_by": str(manifest.get("requested_by")), "requester_key": str(want.get("requester_key")),
        "requested_at": str(want.get("requested_at")), "checkpoint": manifest.get("audit_checkpoint") or {},
        "appliance_key": load_signing_key(home.keys_dir).public_key()}
    with app_ctx.open_store() as store:
        candidate = build_candidate(store, app_ctx.specs, home.config, runs, loaded, request_id=request_id,
                                    generated_at=str(want.get("requested_at")), manifest_head=head)
    rebuilt = build_manifest(files=candidate.hashes, run_manifests=candidate.run_manifests,
                             checks={c.id: c.result for c in candidate.checks}, **head)
    differences = []
    if candidate.hashes != want.get("files"):
        differences += [f"files:{n}" for n in sorted(set(candidate.hashes) | set(want.get("files") or {}))
                        if candidate.hashes.get(n) != (want.get("files") or {}).get(n)]
    if candidate.run_manifests != want.get("run_manifests"):
        differences.append("run_manifests")
    failed = sorted(c.id for c in candidate.checks if c.result == "fail")
    if failed != sorted(want.get("failed_checks") or []) or candidate.status != audited.record.get("outcome"):
        differences.append("checks:" + ",".join(failed or ["none_failing_now"]))
    digest = sha256_bytes(rebuilt)
    if sha256_bytes(manifest_bytes) != want.get("manifest_sha256"):
        differences.append(f"bundle/{MANIFEST}")
    if digest != want.get("manifest_sha256"):
        differences.append("manifest_rebuilt_from_store")
    for name, content in candidate.files.items():
        try:
            if (bundle / name).read_bytes() != content:
                differences.append(f"bundle/{name}")
        except OSError:
            differences.append(f"bundle/{name}:missing")
    if differences:
        raise _refuse(app_ctx, request_id, "candidate_mismatch", f"request {request_id} is not what the appliance "
                      "computes from the store and audited: " + "; ".join(differences) + ". Not approved: deny it "
                      f"(medhelm-local export deny {request_id}) and ask for a new request",
                      exit_one=True, differences=differences)
    if candidate.status != "ready":
        raise _refuse(app_ctx, request_id, "blocked", f"export request {request_id} is blocked: a check failed, so "
                      f"it cannot be approved (checks failing: {', '.join(failed)}); deny it, fix the cause and "
                      "request again", exit_one=True)
    return audited, digest, candidate


def approve(app_ctx: AppContext, request_id: str, *, signature: str | None, key_file: Path | None
            ) -> tuple[ExportRequest, Path]:
    """Check everything, then accept an approver's signature over the manifest digest (see module doc)."""
    home = app_ctx.home
    req = load_request(home.exports_dir, request_id)
    if req.status in ("approved", "denied"):  # a second approval (a stale tab, a retried command): refused, audited
        raise _refuse(app_ctx, request_id, "already_decided", f"export request {request_id} was already {req.status}")
    decided = audited_decision(home, request_id)
    if decided is not None:  # request.json said otherwise: the trail is what counts
        raise _refuse(app_ctx, request_id, "already_decided", decided_by_hand(req, decided, "approved"))
    loaded = load_policy(home.root)
    audited, digest, candidate = check_against_audit(app_ctx, request_id, loaded)
    approval = loaded.policy.approval
    bundle = request_dir(home.exports_dir, request_id) / "bundle"
    requester_key = str(audited.objects.get("requester_key"))
    try:
        requester_sig = (bundle / REQUEST_SIG).read_text(encoding="ascii")
        signed_by = sshsig.verify(requester_sig, digest_messages(digest), REQUEST_NAMESPACE).fingerprint
    except (OSError, UnicodeDecodeError, sshsig.SignatureError):
        signed_by = None
    requester = approval.requester(requester_key)
    if signed_by != requester_key or requester is None:
        raise _refuse(app_ctx, request_id, "requester_signature", f"{REQUEST_SIG} of {request_id} is not a valid "
                      "signature by a requester the policy lists", exit_one=True)
    if key_file is not None:
        signature = sshsig.sign(sshsig.load_private_key(key_file), digest.encode("ascii"), APPROVAL_NAMESPACE)
    assert signature is not None
    try:
        signer = sshsig.verify(signature, digest_messages(digest), APPROVAL_NAMESPACE)
    except sshsig.SignatureError as exc:
        raise _refuse(app_ctx, request_id, "bad_signature", f"--signature: {exc} (sign the digest {digest} with "
                      f"`ssh-keygen -Y sign -n {APPROVAL_NAMESPACE}`)") from None
    approver = approval.approver(signer.fingerprint)
    if approver is None:
        raise _refuse(app_ctx, request_id, "not_an_approver", f"the signing key {signer.fingerprint} is not listed "
                      f"under approval.approvers in {loaded.source}", approver_key=signer.fingerprint)
    if signer.fingerprint == requester_key or approver.name == requester.name:
        raise _refuse(app_ctx, request_id, "self_approval", f"{approver.name} requested this export and may not "
                      "approve it (two people are required)", approver_key=signer.fingerprint)
    with announce(home, app_ctx.actor, "export.approve", role="compliance", request_id=request_id,
                  approver_key=signer.fingerprint, manifest_sha256=digest) as attempt:
        # As the appliance writes signatures (no padding, no CRLF): a bundle's signature files carry nothing else.
        canonical = sshsig.armor(sshsig.unarmor(signature))
        atomic_write(bundle / APPROVAL_SIG, canonical.encode("ascii"), mode=0o600)
        with app_ctx.open_store() as store:
            record_released(store, request_id, candidate.released_cells)
        attempt.conclude("approved", request_id=request_id, approver=approver.name, approver_key=signer.fingerprint,
                         requester_key=requester_key, manifest_sha256=digest, files=candidate.hashes)
    req.status, req.decided_by, req.decided_at = "approved", app_ctx.actor, now_utc()
    req.approver, req.approver_key = approver.name, signer.fingerprint
    save_request(home.exports_dir, req)
    return req, bundle


def audited_decision(home: Any, request_id: str) -> str | None:
    """``approved`` or ``denied`` when the trail records that decision on ``request_id``."""
    for record in AuditTrail(home.audit_path).records():
        objects = record.get("objects") or {}
        if (record.get("action") in ("export.approve", "export.deny") and objects.get("request_id") == request_id
                and record.get("outcome") in ("approved", "denied")):
            return str(record["outcome"])
    return None


def decided_by_hand(req: ExportRequest, decided: str, verb: str) -> str:
    """Why ``req`` cannot be ``verb`` (approved, denied): the trail records it ``decided`` though its request.json
    says otherwise, so request.json was changed by hand."""
    return (f"export request {req.request_id} was already {decided} (audit trail), so it cannot be {verb}; its "
            f"request.json says {req.status}, so it was changed by hand: run `medhelm-local audit show --action "
            "export.` to see who decided it")


def audited_approval(home: Any, request_id: str) -> str | None:
    """The manifest digest the trail recorded when ``request_id`` was approved, if it was."""
    for record in reversed(AuditTrail(home.audit_path).records()):
        objects = record.get("objects") or {}
        if (record.get("action") == "export.approve" and record.get("outcome") == "approved"
                and objects.get("request_id") == request_id):
            return str(objects.get("manifest_sha256"))
    return None
