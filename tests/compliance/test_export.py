"""Exports: request signed by a requester's key, approval by another person's key, signed bundles, verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.audit.trail import AuditTrail
from medhelm_local.errors import BadInputError
from medhelm_local.export.bundle import ExportRefused, release
from medhelm_local.formatting import money
from tests.compliance.conftest import (
    APPROVER,
    REQUESTER,
    EvaluatedHome,
    approve_args,
    request_export,
    run_json,
    signers,
)


def test_request_approve_release_verify(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    request = request_export(cli, evaluated.run_id)
    assert request["status"] == "ready", request["checks"]
    checks = {c["id"]: c["result"] for c in request["checks"]}
    assert set(checks) >= {"schema", "min_cell_size", "complementary_suppression", "implied_counts", "rounding",
                           "differencing", "string_allowlist", "phi_patterns", "extract_terms",
                           "self_contained_html", "files"}
    assert set(checks.values()) == {"pass"}
    assert request["requested_by"] == REQUESTER and request["requester_key"].startswith("SHA256:")
    request_id = str(request["request_id"])
    bundle = cli.home / "exports" / request_id / "bundle"
    assert sorted(p.name for p in bundle.iterdir()) == ["aggregates.json", "categories.csv", "cells.csv",
                                                       "leaderboard.csv", "manifest.json", "manifest.sig",
                                                       "report.html", "request.sig"]
    html = (bundle / "report.html").read_text()
    assert "<svg" in html and "<script" not in html and "Content-Security-Policy" in html
    data = json.loads((bundle / "aggregates.json").read_text())
    assert data["cells"][0]["n_total"] == 24 and data["cells"][0]["score"] is not None
    assert data["models"][0]["cost"] is not None and "<circle" in html  # the cost-performance scatter
    # 24 short notes at 0.5 / 1.5 per million tokens cost about a thousandth: published and shown non-zero,
    # not rounded to the policy's 2 decimals as 0.0, and the scans above passed with it.
    cost = data["models"][0]["cost"]
    assert 0 < cost < 0.01
    assert f'<td class="num cost">{money(cost, decimals=2)}</td>' in html and 'class="num cost">0.00<' not in html

    # Nothing leaves the home before approval: release is refused, and so is an unlisted key.
    out = tmp_path / "outbox"
    refused = cli("export", "release", request_id, "--out", str(out))
    assert refused.code == 2 and not out.exists()
    assert cli("export", "approve", request_id, *approve_args(cli.home, "mallory")).code == 2

    approved = run_json(cli, "export", "approve", request_id, *approve_args(cli.home), "--out", str(out))
    released = out / request_id
    assert approved["released_to"] == str(released) and approved["approver"] == APPROVER
    assert sorted(p.name for p in released.iterdir()) == sorted([*(p.name for p in bundle.iterdir())])
    assert (released / "approval.sig").read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    manifest = json.loads((released / "manifest.json").read_text())
    assert manifest["requested_by"] == REQUESTER
    assert manifest["run_manifests"].keys() == {evaluated.run_id}
    assert manifest["audit_checkpoint"]["tree_size"] > 0
    assert len(manifest["policy_sha256"]) == 64

    public = tmp_path / "appliance.pub.pem"
    assert cli("keys", "export-public", "--out", str(public)).code == 0
    verified = cli("export", "verify", str(released), "--public-key", str(public), "--json")
    assert verified.code == 0, verified.stdout
    assert json.loads(verified.stdout)["approved_by"] == APPROVER

    records = AuditTrail(cli.home / "audit" / "audit.jsonl").records()
    started = next(r for r in records if r["action"] == "run.start")
    assert manifest["run_manifests"][evaluated.run_id] == started["objects"]["manifest_sha256"]
    actions = [(r["action"], r["outcome"]) for r in records]
    assert ("export.request", "ready") in actions
    assert ("export.approve", "refused") in actions
    assert ("export.approve", "approved") in actions
    assert ("export.release", "success") in actions
    # A decided request cannot be decided again.
    assert cli("export", "deny", request_id).code == 2


def test_release_with_a_signature_made_by_ssh_keygen(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    """The approver never hands the appliance a key: they sign the digest with ssh-keygen on their own machine
    (here with the newline `echo` adds) and the signature file releases the bundle."""
    cli = evaluated.cli
    request = request_export(cli, evaluated.run_id)
    digest = str(request["manifest_sha256"])
    shown = cli("export", "show", str(request["request_id"]))
    assert digest in shown.stdout and "ssh-keygen -Y sign" in shown.stdout
    # What the approver checks on their copy before signing: files, requester signature, the digest.
    pending = cli("export", "verify", str(cli.home / "exports" / str(request["request_id"])), "--pending")
    assert pending.code == 0 and digest in pending.stdout
    signature = signers(cli.home)[APPROVER].sign(digest, newline=True)
    out = tmp_path / "outbox"
    released = run_json(cli, "export", "release", str(request["request_id"]), "--signature", str(signature),
                        "--out", str(out))
    assert released["approver"] == APPROVER and (out / str(request["request_id"]) / "approval.sig").exists()
    assert cli("export", "verify", str(out / str(request["request_id"]))).code == 0
    # The recipient, with no appliance home, checks it against their own copy of the policy.
    import os

    from medhelm_local.export.policy import POLICY_ENV
    from tests.compliance.inproc import InProcessCli

    policy = Path(os.environ.pop(POLICY_ENV))
    recipient = InProcessCli(home=tmp_path / "recipient-has-no-home")
    checked = recipient("export", "verify", str(out / str(request["request_id"])), "--policy", str(policy))
    assert checked.code == 0 and "VERIFIED" in checked.stdout and APPROVER in checked.stdout, checked.stderr
    assert recipient("export", "verify", str(out / str(request["request_id"]))).code == 1  # default policy: nobody
    # A later version of the policy (say, one more approver) still verifies it, with a note; on the appliance,
    # releasing it again under a changed policy is refused.
    later = tmp_path / "later-policy.yaml"
    later.write_text(policy.read_text() + "# one more approver, some day\n")
    noted = recipient("export", "verify", str(out / str(request["request_id"])), "--policy", str(later))
    assert noted.code == 0 and "note: the request was checked under another version" in noted.stdout
    os.environ[POLICY_ENV] = str(later)
    again = cli("export", "release", str(request["request_id"]), "--out", str(tmp_path / "second"))
    assert again.code == 2 and "another version of the export policy" in again.stderr


def test_deny_is_audited_and_blocks_release(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    assert cli("export", "deny", request_id).code == 0
    out = tmp_path / "outbox"
    assert cli("export", "release", request_id, "--out", str(out)).code == 2
    assert cli("export", "approve", request_id, *approve_args(cli.home)).code == 2
    assert not out.exists()
    records = AuditTrail(cli.home / "audit" / "audit.jsonl").records()
    assert any(r["action"] == "export.deny" and r["outcome"] == "denied" for r in records)


def test_export_verify_rejects_any_changed_byte(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    from medhelm_local.export.bundle import verify_bundle
    from medhelm_local.export.policy import load_policy
    from medhelm_local.home.keys import load_public_key

    cli = evaluated.cli
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    out = tmp_path / "outbox"
    assert cli("export", "approve", request_id, *approve_args(cli.home), "--out", str(out)).code == 0
    bundle = out / request_id
    key = load_public_key(cli.home / "keys" / "signing-ed25519.pub.pem")
    policy = load_policy(cli.home)
    assert verify_bundle(bundle, policy, appliance_key=key).ok
    for path in sorted(bundle.iterdir()):
        original = path.read_bytes()
        for offset in sorted({0, len(original) // 2, len(original) - 2}):
            changed = bytearray(original)
            changed[offset] ^= 0x01
            path.write_bytes(bytes(changed))
            result = verify_bundle(bundle, policy, appliance_key=key)
            assert not result.ok, (path.name, offset)
        path.write_bytes(original)
    assert verify_bundle(bundle, policy, appliance_key=key).ok
    (bundle / "extra.txt").write_text("x")
    assert not verify_bundle(bundle, policy, appliance_key=key).ok
    (bundle / "extra.txt").unlink()
    (bundle / "cells.csv").unlink()
    failed = cli("export", "verify", str(bundle), "--json")
    assert failed.code == 1 and any("cells.csv" in p for p in json.loads(failed.stdout)["problems"])
    # The same bundle checked against another appliance's key fails.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other = tmp_path / "other.pub.pem"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert cli("export", "verify", str(out / request_id), "--public-key", str(other)).code == 1


@pytest.mark.parametrize(("out", "message"), [("report.pdf", "is not a directory"),
                                              ("report.pdf/sub", "cannot create the directory")])
def test_release_to_a_file_is_refused_naming_out(tmp_path: Path, out: str, message: str) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    (tmp_path / "report.pdf").write_text("not a folder")
    with pytest.raises(ExportRefused, match=f"^--out: .*{message}"):
        release(bundle, tmp_path / out, "exp-20260101T000000Z-abcdef")
    assert (tmp_path / "report.pdf").read_text() == "not a folder"


def test_a_passphrase_protected_openssh_key_the_appliance_cannot_decrypt_is_named_with_what_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ssh-keygen -t ed25519` with a passphrase writes an encrypted OpenSSH key, which cryptography decrypts only
    with the bcrypt package. Without it a requester was told "set MEDHELM_KEY_PASSPHRASE, or ... pass --signature":
    with the passphrase set the next try failed as undecryptable, and `export request` has no --signature. Now the
    first answer says the key cannot be decrypted here and what the signer can do instead: an approver signs on
    their own machine, a requester gives a key the appliance can read."""
    import subprocess

    from medhelm_local.export import sshsig
    from tests.security.exportkit import site

    # as where bcrypt is not installed (raising=False: the check is new)
    monkeypatch.setattr(sshsig, "openssh_decryption_available", lambda: False, raising=False)
    monkeypatch.setenv(sshsig.PASSPHRASE_ENV, "correct horse")
    key = tmp_path / "people" / "protected"
    key.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "correct horse", "-f", str(key)], check=True)
    cli = site(tmp_path)
    refused = cli("export", "request", "--runs", "run-x", "--key", str(key))
    assert refused.code == 2
    assert (f"--key: {key} is a passphrase-protected OpenSSH key, which this appliance cannot decrypt (the Python "
            "package bcrypt, which does, is not installed): a request is signed on the appliance, so give --key a "
            "requester key it can read") in refused.stderr
    assert "--signature" not in refused.stderr and "set MEDHELM_KEY_PASSPHRASE" not in refused.stderr
    with pytest.raises(BadInputError) as approver:
        sshsig.load_private_key(key)
    assert str(approver.value).endswith("is not installed): sign with `ssh-keygen -Y sign -n medhelm-export` on "
                                        "your own machine and pass --signature FILE")


def test_a_passphrase_protected_openssh_key_signs_with_its_passphrase(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What `ssh-keygen -t ed25519` writes with a passphrase (the key a careful requester has) is decrypted with
    $MEDHELM_KEY_PASSPHRASE (bcrypt is a dependency): it signs; a wrong passphrase is refused naming the file."""
    import subprocess

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from medhelm_local.export import sshsig

    key = tmp_path / "protected"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "correct horse", "-f", str(key)], check=True)
    assert sshsig.openssh_decryption_available()
    monkeypatch.setenv(sshsig.PASSPHRASE_ENV, "correct horse")
    private = sshsig.load_private_key(key)
    assert isinstance(private, Ed25519PrivateKey)
    public = sshsig.parse_public_key((tmp_path / "protected.pub").read_text(), "protected.pub")
    assert sshsig.fingerprint(private.public_key()) == sshsig.fingerprint(public)
    monkeypatch.setenv(sshsig.PASSPHRASE_ENV, "wrong")
    with pytest.raises(BadInputError, match="with the right passphrase"):
        sshsig.load_private_key(key)


def test_exported_dataset_fingerprints_are_keyed_not_the_plain_hash(evaluated: EvaluatedHome) -> None:
    """The plain fingerprint is sha256(source file's sha256 : loader's): a recipient could confirm a guess of a small
    file's one unknown cell (an insider's file of known text and a date of birth) by hashing candidates. The export
    carries it keyed by the store's secret: the same across requests, never the plain one."""
    import hashlib

    cli = evaluated.cli
    shown = cli("datasets", "list", "--json")
    assert shown.code == 0
    listed = json.loads(shown.stdout)
    plain = {str(d["fingerprint"]) for d in listed}
    sources = {str(d["source_sha256"]) for d in listed if d.get("source_sha256")}
    published = []
    for _ in range(2):
        request = request_export(cli, evaluated.run_id)
        data = json.loads((cli.home / "exports" / str(request["request_id"]) / "bundle" / "aggregates.json")
                          .read_text())
        assert data["schema_id"] == "medhelm-local/export-aggregates/v3"
        published.append(data["runs"][0]["dataset_fingerprints"])
    assert published[0] == published[1] and published[0]
    values = set(published[0].values())
    assert all(len(v) == 64 for v in values) and not values & plain
    assert sources and not values & {hashlib.sha256(s.encode()).hexdigest() for s in sources}
    bundle_text = "".join(p.read_text() for p in (cli.home / "exports").rglob("*") if p.suffix in (".json", ".csv"))
    assert not any(fingerprint in bundle_text for fingerprint in plain)
