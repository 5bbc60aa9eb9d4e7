"""Every message, report and human-facing JSON field that names the appliance's signing key names it by the
``SHA256:...`` fingerprint `init` prints and COMPLIANCE.md has the compliance officer record. Before, `export
verify` ("the appliance signature is invalid for key 76b9ce5d...") and `audit verify` ("not made by key
a4597d5f...") named it by 16 hex digits, which cannot be compared with the recorded fingerprint."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from medhelm_local.audit.anchor import earlier_fingerprint, fingerprint
from medhelm_local.audit.trail import key_id
from medhelm_local.home.keys import load_signing_key
from tests.compliance.conftest import EvaluatedHome, approve_args, request_export, run_json
from tests.compliance.inproc import InProcessCli

HEX_ID = re.compile(r"\b[0-9a-f]{16,64}\b")


def _other_key(tmp_path: Path) -> tuple[Path, str]:
    return _write_key(tmp_path, Ed25519PrivateKey.generate().public_key())


def _write_key(tmp_path: Path, public: Ed25519PublicKey) -> tuple[Path, str]:
    path = tmp_path / "other.pub"
    path.write_bytes(public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return path, fingerprint(public)


def _init_fingerprint(cli: InProcessCli) -> str:
    result = cli("init")
    assert result.code == 0, result.stderr
    (pinned,) = [line.split(": ", 1)[1] for line in result.stdout.splitlines()
                 if line.startswith("audit signing key fingerprint: ")]
    return pinned


def test_export_verify_names_both_keys_by_fingerprint(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    appliance = load_signing_key(evaluated.home / "keys").public_key()
    request_id = str(request_export(cli, evaluated.run_id)["request_id"])
    run_json(cli, "export", "approve", request_id, *approve_args(evaluated.home), "--out", str(tmp_path / "out"))
    bundle = tmp_path / "out" / request_id
    other_public = Ed25519PrivateKey.generate().public_key()
    other, other_print = _write_key(tmp_path, other_public)

    result = cli("export", "verify", str(bundle), "--public-key", str(other))
    assert result.code == 1
    assert f"the appliance signature is invalid for key {other_print}" in result.stdout
    # the manifest holds only the key's raw digest: both keys are also named in that (earlier) form
    assert (f"the manifest names appliance key {earlier_fingerprint(appliance)} (sha256 of the raw key, the form "
            f"earlier releases printed), not {other_print} ({earlier_fingerprint(other_public)} in that form)"
            in result.stdout)
    assert not HEX_ID.search(" ".join(line for line in result.stdout.splitlines() if "key" in line))

    checked = cli("export", "verify", str(bundle), "--public-key", str(other), "--json")
    payload = json.loads(checked.stdout)
    assert payload["key_id"] == key_id(appliance)  # kept for scripts: the manifest's appliance_key_id
    assert payload["key_fingerprint"] == earlier_fingerprint(appliance)  # the manifest's key is not at hand

    good = cli("export", "verify", str(bundle))
    assert good.code == 0, good.stdout
    assert f"appliance key {fingerprint(appliance)}" in good.stdout


def test_audit_verify_names_the_key_a_checkpoint_was_not_made_by(tmp_path: Path) -> None:
    cli = InProcessCli(tmp_path / "home")
    _init_fingerprint(cli)
    other, other_print = _other_key(tmp_path)
    result = cli("audit", "verify", "--public-key", str(other))
    assert result.code == 1
    assert f"signature invalid or not made by key {other_print}" in result.stdout
    assert not HEX_ID.search(result.stdout)


def test_keys_show_and_the_audit_report_name_the_signing_key_by_fingerprint(tmp_path: Path) -> None:
    cli = InProcessCli(tmp_path / "home")
    pinned = _init_fingerprint(cli)
    shown = run_json(cli, "keys", "show")
    assert shown["signing_key_fingerprint"] == pinned
    assert shown["signing_key_id"] == key_id(load_signing_key(cli.home / "keys").public_key())
    table = cli("keys", "show")
    assert pinned in table.stdout and shown["signing_key_id"] not in table.stdout

    assert cli("keys", "export-public", "--out", str(tmp_path / "appliance.pub.pem")).code == 0
    report = cli("audit", "report", "--since", "2000-01-01")
    assert report.code == 0, report.stderr
    (line,) = [line for line in report.stdout.splitlines() if "keys.export_public" in line]
    assert f"key_fingerprint={pinned}" in line and shown["signing_key_id"] not in line
    events = run_json(cli, "audit", "report", "--since", "2000-01-01")["key_events"]
    assert [e["key_fingerprint"] for e in events if e["action"] == "keys.export_public"] == [pinned]
