"""Issue 12 §3: an export is released only by an approver's own key, from what the appliance itself computed.

Each test is an attack by an insider who can write specs, run the CLI, write the home and holds the
requester's key (alice), but not an approver's key (carol). On the code before issue 12, approval read status,
checks and hashes from the editable request.json and the two-person rule rested on a typed `--approver` name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.export import sshsig
from medhelm_local.export.bundle import APPROVAL_NAMESPACE, REQUEST_NAMESPACE
from tests.compliance.conftest import APPROVER, REQUESTER, approve_args, request_export, signers
from tests.compliance.inproc import InProcessCli
from tests.security.exportkit import evaluate, failed, notes, policy_env, site

__all__ = ["policy_env"]  # the autouse fixture that restores $MEDHELM_EXPORT_POLICY


def _approvals(cli: InProcessCli) -> list[tuple[str, str]]:
    return [(r["outcome"], str(r["objects"].get("reason"))) for r in AuditTrail(cli.home / "audit" / "audit.jsonl")
            .records() if r["action"] == "export.approve"]


def _bundle(cli: InProcessCli, request: dict[str, Any]) -> Path:
    return cli.home / "exports" / str(request["request_id"]) / "bundle"


def _resign_as_requester(cli: InProcessCli, bundle: Path) -> str:
    """What the insider can do with their own key: re-sign whatever manifest they wrote."""
    import hashlib

    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    key = sshsig.load_private_key(signers(cli.home)[REQUESTER].private)
    (bundle / "request.sig").write_text(sshsig.sign(key, digest.encode(), REQUEST_NAMESPACE))
    return digest


def _edit_request(cli: InProcessCli, request: dict[str, Any], **changes: Any) -> None:
    path = cli.home / "exports" / str(request["request_id"]) / "request.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_a_blocked_request_flipped_to_ready_is_not_approved(tmp_path: Path) -> None:
    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24), model="MRN-7730019942")
    request = request_export(cli, run_id)
    assert request["status"] == "blocked" and "phi_patterns" in failed(request)
    # The insider marks every check passed, in request.json and in the manifest, and re-signs it as requester.
    checks = [{**c, "result": "pass", "findings": []} for c in request["checks"]]
    bundle = _bundle(cli, request)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["checks"] = {c["id"]: "pass" for c in checks}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    digest = _resign_as_requester(cli, bundle)
    _edit_request(cli, request, status="ready", checks=checks, manifest_sha256=digest)

    refused = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home), "--out",
                  str(tmp_path / "outbox"))
    assert refused.code == 1, refused.stderr
    assert "not what the appliance computes" in refused.stderr and "MRN-7730019942" not in refused.stderr
    assert ("refused", "candidate_mismatch") in _approvals(cli)
    assert not (bundle / "approval.sig").exists() and not (tmp_path / "outbox").exists()
    # Even with an approver's honest signature over the forged digest, nothing verifies or leaves.
    signature = signers(cli.home)[APPROVER].sign(digest)
    again = cli("export", "release", str(request["request_id"]), "--signature", str(signature), "--out",
                str(tmp_path / "outbox"))
    assert again.code == 1 and not (tmp_path / "outbox").exists()


def test_a_phi_row_appended_with_every_hash_fixed_is_not_approved(tmp_path: Path) -> None:
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    assert request["status"] == "ready", failed(request)
    bundle = _bundle(cli, request)
    with (bundle / "cells.csv").open("a") as handle:
        handle.write("MRN 7730019942,Ada Quillonby,1970-03-14\n")
    import hashlib

    files = dict(request["files"])
    files["cells.csv"] = hashlib.sha256((bundle / "cells.csv").read_bytes()).hexdigest()
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = files
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    digest = _resign_as_requester(cli, bundle)
    _edit_request(cli, request, files=files, manifest_sha256=digest)

    refused = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home))
    assert refused.code == 1
    assert "bundle/cells.csv" in refused.stderr and "7730019942" not in refused.stderr
    assert ("refused", "candidate_mismatch") in _approvals(cli)
    assert not (bundle / "approval.sig").exists()
    records = (cli.home / "audit" / "audit.jsonl").read_text()
    assert "Quillonby" not in records and "7730019942" not in records


def test_the_requester_cannot_approve_with_their_own_key(tmp_path: Path) -> None:
    """alice is listed as requester AND approver: her key cannot approve her own request, whether through
    --key or a signature she made with ssh-keygen. (Before: `--approver bob` typed by alice was enough.)"""
    people = signers(tmp_path / "home")
    both = {"name": REQUESTER, "key": people[REQUESTER].public}
    cli = site(tmp_path, approval={"requesters": [both], "approvers": [both]})
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    assert request["status"] == "ready", failed(request)
    own = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home, REQUESTER))
    assert own.code == 2 and "two people" in own.stderr
    signature = people[REQUESTER].sign(str(request["manifest_sha256"]))
    released = cli("export", "release", str(request["request_id"]), "--signature", str(signature), "--out",
                   str(tmp_path / "outbox"))
    assert released.code == 2 and not (tmp_path / "outbox").exists()
    assert ("refused", "self_approval") in _approvals(cli)


def test_a_typed_name_or_an_unlisted_key_does_not_approve(tmp_path: Path) -> None:
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    request_id = str(request["request_id"])
    assert cli("export", "approve", request_id, "--approver", APPROVER).code == 2  # no such option any more
    assert cli("export", "approve", request_id).code == 2  # a key or a signature is required
    mallory = signers(cli.home)["mallory"]
    assert cli("export", "approve", request_id, "--key", str(mallory.private)).code == 2
    forged = mallory.sign(str(request["manifest_sha256"]))
    assert cli("export", "release", request_id, "--signature", str(forged), "--out", str(tmp_path / "o")).code == 2
    # The requester's own request signature is in another namespace: it is no approval.
    assert cli("export", "approve", request_id, "--signature", str(_bundle(cli, request) / "request.sig")).code == 2
    assert [o for o, _ in _approvals(cli)] == ["refused", "refused", "refused"]
    assert not (tmp_path / "o").exists()


def test_a_signature_over_another_requests_digest_is_refused(tmp_path: Path) -> None:
    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    first, second = request_export(cli, run_id), request_export(cli, run_id)
    signature = signers(cli.home)[APPROVER].sign(str(first["manifest_sha256"]))
    replay = cli("export", "release", str(second["request_id"]), "--signature", str(signature), "--out",
                 str(tmp_path / "outbox"))
    assert replay.code == 2 and "does not match" in replay.stderr and not (tmp_path / "outbox").exists()


def test_a_policy_inside_the_home_is_not_read(tmp_path: Path) -> None:
    """The insider writes a policy into the home naming their own key as an approver: it is refused, not read."""
    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    mallory = signers(cli.home)["mallory"]
    import os

    from medhelm_local.export.policy import POLICY_ENV

    own = cli.home / "policies" / "export-policy.yaml"
    own.parent.mkdir(exist_ok=True)
    own.write_text(json.dumps({"approval": {"requesters": [{"name": "m", "key": mallory.public}],
                                            "approvers": [{"name": "m2", "key": mallory.public}]}}))
    del os.environ[POLICY_ENV]
    refused = cli("export", "request", "--runs", run_id, "--key", str(mallory.private))
    assert refused.code == 2 and POLICY_ENV in refused.stderr
    assert not (cli.home / "exports").exists() or not list((cli.home / "exports").glob("exp-*"))


def test_a_bundle_copied_out_without_approval_does_not_verify(tmp_path: Path) -> None:
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    copy = tmp_path / "copied"
    shutil.copytree(_bundle(cli, request), copy)
    unsigned = cli("export", "verify", str(copy), "--json")
    assert unsigned.code == 1 and any("approval.sig is missing" in p for p in json.loads(unsigned.stdout)["problems"])
    # The insider signs it as "approver" with their own (requester) key, and with an unlisted key.
    digest = str(request["manifest_sha256"])
    for who in (REQUESTER, "mallory"):
        key = sshsig.load_private_key(signers(cli.home)[who].private)
        (copy / "approval.sig").write_text(sshsig.sign(key, digest.encode(), APPROVAL_NAMESPACE))
        forged = cli("export", "verify", str(copy))
        assert forged.code == 1 and "NOT VERIFIED" in forged.stdout, who
    # Only an approver's signature makes it verify.
    shutil.copy(signers(cli.home)[APPROVER].sign(digest), copy / "approval.sig")
    assert cli("export", "verify", str(copy)).code == 0


def test_a_bundle_changed_after_approval_is_not_released(tmp_path: Path) -> None:
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    request_id = str(request["request_id"])
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    with (_bundle(cli, request) / "leaderboard.csv").open("a") as handle:
        handle.write("Ada Quillonby\n")
    out = tmp_path / "outbox"
    refused = cli("export", "release", request_id, "--out", str(out))
    assert refused.code == 2 and "leaderboard.csv" in refused.stderr and not out.exists()
    assert _releases(cli) == [("refused", "bundle_does_not_verify")]  # the attempt is on the record


def _releases(cli: InProcessCli) -> list[tuple[str, str | None]]:
    return [(r["outcome"], r["objects"].get("reason")) for r in AuditTrail(cli.home / "audit" / "audit.jsonl")
            .records() if r["action"] == "export.release"]


def test_a_second_decision_is_refused_and_audited(tmp_path: Path) -> None:
    """Approving an approved request again (a stale console tab, a retried command) was refused with no record."""
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    assert cli("export", "approve", str(request["request_id"]), *approve_args(cli.home)).code == 0
    again = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home))
    assert again.code == 2 and "already approved" in again.stderr
    assert _approvals(cli)[-1] == ("refused", "already_decided")
    denied = cli("export", "deny", str(request["request_id"]))  # and a denial of it: refused, audited too
    assert denied.code == 2 and "already approved" in denied.stderr
    denials = [(r["outcome"], r["objects"].get("reason")) for r in AuditTrail(cli.home / "audit" / "audit.jsonl")
               .records() if r["action"] == "export.deny"]
    assert denials == [("refused", "already_decided")]


def test_a_denied_request_edited_back_to_ready_is_not_approved(tmp_path: Path) -> None:
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    assert cli("export", "deny", str(request["request_id"])).code == 0
    _edit_request(cli, request, status="ready", decided_by=None, decided_at=None)
    refused = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home))
    assert refused.code == 2 and "already denied" in refused.stderr
    assert ("refused", "already_decided") in _approvals(cli)
    assert not (_bundle(cli, request) / "approval.sig").exists()


def test_a_home_key_that_is_not_the_pinned_key_approves_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """The insider replaces the home's audit key pair (and so can re-sign any trail): with the key pinned outside
    the home, approval checks the trail against the pin and refuses."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from medhelm_local.audit.anchor import FINGERPRINT_ENV, fingerprint

    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    request = request_export(cli, run_id)
    assert request["status"] == "ready", failed(request)
    monkeypatch.setenv(FINGERPRINT_ENV, fingerprint(Ed25519PrivateKey.generate().public_key()))
    refused = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home), "--out",
                  str(tmp_path / "outbox"))
    assert refused.code == 1, refused.stderr
    assert not (tmp_path / "outbox").exists()
    assert not (_bundle(cli, request) / "approval.sig").exists()


def _stuffed(armored: str, hidden: bytes) -> str:
    """The same SSHSIG with ``hidden`` in its reserved field (not covered by the signature) and whitespace padding."""
    import struct

    blob = sshsig.unarmor(armored)
    at = 6 + 4  # magic, version
    for _ in range(2):  # public key, namespace
        at += 4 + struct.unpack(">I", blob[at:at + 4])[0]
    (length,) = struct.unpack(">I", blob[at:at + 4])
    assert length == 0
    return sshsig.armor(blob[:at] + struct.pack(">I", len(hidden)) + hidden + blob[at + 4:])


def test_nothing_rides_out_in_the_signature_files(tmp_path: Path) -> None:
    """The signature files are not in the manifest: after approval the insider hides extract text in them (the
    SSHSIG reserved field, padding around the armor, around manifest.sig's base64). It must not verify or leave."""
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    request_id = str(request["request_id"])
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    bundle = _bundle(cli, request)
    hidden = b"MRN 7730019942 Ada Quillonby 1970-03-14 " * 100
    original = {name: (bundle / name).read_bytes() for name in ("approval.sig", "request.sig", "manifest.sig")}
    tampered = [
        ("approval.sig", _stuffed(original["approval.sig"].decode(), hidden).encode()),
        ("request.sig", _stuffed(original["request.sig"].decode(), hidden).encode()),
        ("approval.sig", b"\n" * 3000 + original["approval.sig"] + b" \t\n" * 3000),
        ("approval.sig", original["approval.sig"].replace(b"\n", b"\n \t", 3)),
        ("manifest.sig", original["manifest.sig"] + b" \t" * 4000 + b"\n"),
    ]
    for number, (name, content) in enumerate(tampered):
        (bundle / name).write_bytes(content)
        out = tmp_path / f"outbox-{number}"
        released = cli("export", "release", request_id, "--out", str(out))
        assert released.code == 2 and not out.exists(), (number, released.stderr)
        copy = tmp_path / f"copy-{number}"
        shutil.copytree(bundle, copy)
        assert cli("export", "verify", str(copy)).code == 1, number
        (bundle / name).write_bytes(original[name])
    assert cli("export", "release", request_id, "--out", str(tmp_path / "outbox")).code == 0


def test_a_bundle_changed_between_its_check_and_the_copy_is_not_released(tmp_path: Path, monkeypatch: Any) -> None:
    """The insider rewrites approval.sig (a file the manifest does not list) while `export release` runs, after
    the bundle in the home was checked and before it is copied (a loop of os.replace wins this race within a few
    hundred releases): what leaves must be what was checked."""
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    request_id = str(request["request_id"])
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    bundle = _bundle(cli, request)
    original = (bundle / "approval.sig").read_bytes()
    copytree = shutil.copytree

    def insider_writes_first(source: Path, target: Path, *args: Any, **kwargs: Any) -> Any:
        (Path(source) / "approval.sig").write_bytes(b"MRN 7730019942 Ada Quillonby\n" * 1000)
        return copytree(source, target, *args, **kwargs)

    monkeypatch.setattr("medhelm_local.export.bundle.shutil.copytree", insider_writes_first)
    out = tmp_path / "outbox"
    refused = cli("export", "release", request_id, "--out", str(out))
    assert refused.code == 2 and "changed while it was copied" in refused.stderr, refused.stderr
    assert not (out / request_id).exists() and not any(out.iterdir())
    assert _releases(cli) == [("started", None), ("refused", "changed_while_copied")]
    monkeypatch.setattr("medhelm_local.export.bundle.shutil.copytree", copytree)
    (bundle / "approval.sig").write_bytes(original)
    assert cli("export", "release", request_id, "--out", str(out)).code == 0


def test_a_request_checked_under_a_weakened_copy_of_the_policy_fails_the_approvers_check(tmp_path: Path) -> None:
    """The insider points $MEDHELM_EXPORT_POLICY at a copy of the site policy, same people, min_cell_size 2. The
    approver checks the bundle against compliance's own policy before signing (`export verify --pending
    --policy`): that said CHECKED with a note, exit 0, and the signature then released it under the weak rules."""
    import os

    import yaml

    from medhelm_local.export.policy import POLICY_ENV

    cli = site(tmp_path)
    run_id = evaluate(cli, notes(tmp_path / "notes.csv", 24))
    policy = Path(os.environ[POLICY_ENV])
    weak = tmp_path / "insider" / "export-policy.yaml"
    weak.parent.mkdir()
    weak.write_text(yaml.safe_dump({**yaml.safe_load(policy.read_text()), "min_cell_size": 2}))
    os.environ[POLICY_ENV] = str(weak)
    request = request_export(cli, run_id)
    assert request["status"] == "ready"
    copy = tmp_path / "approver-copy"
    shutil.copytree(_bundle(cli, request), copy)
    checked = cli("export", "verify", str(copy), "--pending", "--policy", str(policy))
    assert checked.code == 1 and "NOT VERIFIED" in checked.stdout, checked.stdout
    assert "another version of the export policy" in checked.stdout and "do not sign it" in checked.stdout
    assert str(request["manifest_sha256"]) not in checked.stdout  # no digest to sign
    # Under the policy it was made with, the check passes as before.
    assert cli("export", "verify", str(copy), "--pending", "--policy", str(weak)).code == 0


def test_an_approved_request_edited_back_to_ready_is_not_denied(tmp_path: Path) -> None:
    """request.json of an approved request is edited back to ready: `export deny` said 'denied' (exit 0), the report
    then showed the request denied, and the bundle was still released (the trail's approval is what release
    reads). The trail's decision is what counts, for a denial as for an approval."""
    cli = site(tmp_path)
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    request_id = str(request["request_id"])
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 0
    _edit_request(cli, request, status="ready", decided_by=None, decided_at=None, approver=None, approver_key=None)
    denied = cli("export", "deny", request_id)
    assert denied.code == 2 and "already approved (audit trail)" in denied.stderr, denied.stderr
    records = AuditTrail(cli.home / "audit" / "audit.jsonl").records()
    assert [r["outcome"] for r in records if r["action"] == "export.deny"] == ["refused"]
    summary = json.loads(cli("audit", "report", "--json").stdout)
    assert [e["status"] for e in summary["exports"]] == ["approved"]


def test_the_insiders_own_policy_is_refused_where_the_appliances_is_mounted(tmp_path: Path, monkeypatch: Any) -> None:
    """The insider controls the CLI's environment: $MEDHELM_EXPORT_POLICY pointed at a copy of the site policy that
    lists their own key as an approver approved and released their request. Where compliance's policy is mounted
    (the chart, compose: /etc/medhelm/policy/export-policy.yaml, read-only) it alone is read: the variable naming
    another file is refused (exit 2), naming it through the mount's symlinks is the mount, and carol still approves."""
    import os

    import yaml

    from medhelm_local.export import policy as export_policy

    people = signers(tmp_path / "home")
    cli = site(tmp_path)
    mounted = tmp_path / "etc-medhelm" / "policy" / "..data" / "export-policy.yaml"
    mounted.parent.mkdir(parents=True)
    shutil.copy(os.environ[export_policy.POLICY_ENV], mounted)
    link = mounted.parent.parent / "export-policy.yaml"  # as a ConfigMap mount lays it out
    link.symlink_to(mounted)
    monkeypatch.setattr(export_policy, "APPLIANCE_POLICY", link)
    del os.environ[export_policy.POLICY_ENV]  # the mount alone, as the chart's pods read it
    request = request_export(cli, evaluate(cli, notes(tmp_path / "notes.csv", 24)))
    assert request["status"] == "ready", failed(request)

    own = yaml.safe_load(mounted.read_text())
    own["approval"]["approvers"].append({"name": "alice-too", "key": people[REQUESTER].public})
    forged = tmp_path / "mine" / "export-policy.yaml"
    forged.parent.mkdir()
    forged.write_text(yaml.safe_dump(own))
    os.environ[export_policy.POLICY_ENV] = str(forged)
    approved = cli("export", "approve", str(request["request_id"]), *approve_args(cli.home, REQUESTER))
    assert approved.code == 2 and str(export_policy.APPLIANCE_POLICY) in approved.stderr
    released = cli("export", "release", str(request["request_id"]), "--signature",
                   str(people[REQUESTER].sign(str(request["manifest_sha256"]))), "--out", str(tmp_path / "outbox"))
    assert released.code == 2 and not (tmp_path / "outbox").exists()

    os.environ[export_policy.POLICY_ENV] = str(mounted)  # the mount, through its symlinks: the same file
    assert cli("export", "approve", str(request["request_id"]), *approve_args(cli.home, APPROVER)).code == 0
