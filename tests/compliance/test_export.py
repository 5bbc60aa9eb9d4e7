"""Exports: request under the disclosure policy, approval by the compliance role, signed bundles, verify."""

from __future__ import annotations

import json
from pathlib import Path

from medhelm_local.audit.trail import AuditTrail
from tests.compliance.conftest import APPROVER, EvaluatedHome, run_json


def _request(evaluated: EvaluatedHome) -> dict[str, object]:
    return run_json(evaluated.cli, "export", "request", "--runs", evaluated.run_id)


def test_request_approve_release_verify(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    request = _request(evaluated)
    assert request["status"] == "ready", request["checks"]
    checks = {c["id"]: c["result"] for c in request["checks"]}  # type: ignore[index, union-attr]
    assert set(checks) >= {"schema", "min_cell_size", "complementary_suppression", "rounding", "string_allowlist",
                           "phi_patterns", "extract_terms", "self_contained_html", "files"}
    assert set(checks.values()) == {"pass"}
    request_id = str(request["request_id"])
    bundle = cli.home / "exports" / request_id / "bundle"
    assert sorted(p.name for p in bundle.iterdir()) == ["aggregates.json", "categories.csv", "cells.csv",
                                                       "leaderboard.csv", "report.html"]
    html = (bundle / "report.html").read_text()
    assert "<svg" in html and "<script" not in html and "Content-Security-Policy" in html
    data = json.loads((bundle / "aggregates.json").read_text())
    assert data["cells"][0]["n_total"] == 24 and data["cells"][0]["score"] is not None
    assert data["models"][0]["cost"] is not None and "<circle" in html  # the cost-performance scatter

    # Nothing leaves the home before approval: release is refused, and so is an unlisted approver.
    out = tmp_path / "outbox"
    refused = cli("export", "release", request_id, "--out", str(out))
    assert refused.code == 2 and not out.exists()
    assert cli("export", "approve", request_id, "--approver", "mallory").code == 2
    assert cli("export", "approve", request_id, "--approver", "root").code == 2

    approved = run_json(cli, "export", "approve", request_id, "--approver", APPROVER, "--out", str(out))
    released = out / request_id
    assert approved["released_to"] == str(released)
    assert (released / "manifest.json").exists() and (released / "manifest.sig").exists()
    manifest = json.loads((released / "manifest.json").read_text())
    assert manifest["approved_by"] == APPROVER
    assert manifest["run_manifests"].keys() == {evaluated.run_id}
    assert manifest["audit_checkpoint"]["tree_size"] > 0
    assert len(manifest["policy_sha256"]) == 64

    public = tmp_path / "appliance.pub.pem"
    assert cli("keys", "export-public", "--out", str(public)).code == 0
    assert cli("export", "verify", str(released), "--public-key", str(public)).code == 0

    records = AuditTrail(cli.home / "audit" / "audit.jsonl").records()
    started = next(r for r in records if r["action"] == "run.start")
    assert manifest["run_manifests"][evaluated.run_id] == started["objects"]["manifest_sha256"]
    actions = [(r["action"], r["outcome"]) for r in records]
    assert ("export.request", "ready") in actions
    assert ("export.approve", "refused") in actions
    assert ("export.approve", "approved") in actions
    assert ("export.release", "success") in actions
    # A decided request cannot be decided again.
    assert cli("export", "deny", request_id, "--approver", APPROVER).code == 2


def test_deny_is_audited_and_blocks_release(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    request_id = str(_request(evaluated)["request_id"])
    assert cli("export", "deny", request_id, "--approver", APPROVER).code == 0
    out = tmp_path / "outbox"
    assert cli("export", "release", request_id, "--out", str(out)).code == 2
    assert cli("export", "approve", request_id, "--approver", APPROVER).code == 2
    assert not out.exists()
    records = AuditTrail(cli.home / "audit" / "audit.jsonl").records()
    assert any(r["action"] == "export.deny" and r["outcome"] == "denied" for r in records)


def test_export_verify_rejects_any_changed_byte(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    from medhelm_local.export.bundle import verify_bundle
    from medhelm_local.home.keys import load_public_key

    cli = evaluated.cli
    request_id = str(_request(evaluated)["request_id"])
    out = tmp_path / "outbox"
    assert cli("export", "approve", request_id, "--approver", APPROVER, "--out", str(out)).code == 0
    bundle = out / request_id
    key = load_public_key(cli.home / "keys" / "signing-ed25519.pub.pem")
    assert verify_bundle(bundle, key).ok
    for path in sorted(bundle.iterdir()):
        original = path.read_bytes()
        for offset in sorted({0, len(original) // 2, len(original) - 2}):
            changed = bytearray(original)
            changed[offset] ^= 0x01
            path.write_bytes(bytes(changed))
            result = verify_bundle(bundle, key)
            assert not result.ok, (path.name, offset)
        path.write_bytes(original)
    assert verify_bundle(bundle, key).ok
    (bundle / "extra.txt").write_text("x")
    assert not verify_bundle(bundle, key).ok
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
