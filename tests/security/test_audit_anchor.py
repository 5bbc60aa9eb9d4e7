"""Issue 12 §5: the audit trail is anchored outside the home (pinned key, state-file count, exported heads).

Each attack was reproduced on the code before the fix: truncating the tail verified INTACT, replacing the trail
and the public key together verified INTACT with `doctor` ok.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, SIGNING_KEY_FILE, load_signing_key
from tests.compliance.inproc import InProcessCli
from tests.security.pinkit import FINGERPRINT_ENV, PUBKEY_FILE_ENV, no_pin

__all__ = ["no_pin"]  # the autouse fixture that clears the pin's environment


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """OpenSSH's (`ssh-keygen -l`): sha256 of the key blob (string "ssh-ed25519", string raw key)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    blob = b"".join(len(part).to_bytes(4, "big") + part for part in (b"ssh-ed25519", raw))
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _home_with_trail(tmp_path: Path, events: int = 4) -> tuple[InProcessCli, str]:
    cli = InProcessCli(home=tmp_path / "home")
    init = cli("init", "--json")
    assert init.code == 0, init.stderr
    pinned = fingerprint(load_signing_key(cli.home / "keys").public_key())
    for i in range(events):  # --out: the option's older name, kept; the attacks below also ran on the old code
        assert cli("audit", "checkpoint", "--out", str(tmp_path / f"head-{i}.json")).code == 0
    return cli, pinned


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes()[:-1].split(b"\n")


def _verify(cli: InProcessCli, *args: str) -> tuple[int, dict]:
    result = cli("audit", "verify", *args, "--json")
    return result.code, json.loads(result.stdout)


def test_init_prints_the_fingerprint_of_the_signing_key(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    text = cli("init")
    assert text.code == 0
    expected = fingerprint(load_signing_key(cli.home / "keys").public_key())
    assert f"audit signing key fingerprint: {expected}" in text.stdout
    assert expected.startswith("SHA256:") and len(expected) == 7 + 43 and not expected.endswith("=")
    again = cli("init", "--json")  # re-init prints the same key's fingerprint
    assert json.loads(again.stdout)["audit_key_fingerprint"] == expected


def test_removing_the_last_pairs_is_caught_by_the_state_count(tmp_path: Path) -> None:
    cli, _ = _home_with_trail(tmp_path)
    trail = cli.home / "audit" / "audit.jsonl"
    lines = _lines(trail)
    trail.write_bytes(b"\n".join(lines[:-4]) + b"\n")  # two event + checkpoint pairs gone: still a valid trail
    code, report = _verify(cli)
    assert code == 1 and report["intact"] is False
    assert report["first_bad_seq"] == len(lines) - 3
    assert "truncated" in {p["kind"] for p in report["problems"]}
    # and no action signs over the truncated trail
    refused = cli("audit", "checkpoint", "--out", str(tmp_path / "after.json"))
    assert refused.code == 1 and "were removed" in refused.stderr


def test_truncation_with_the_state_file_rewritten_is_caught_by_an_exported_checkpoint(tmp_path: Path) -> None:
    cli, _ = _home_with_trail(tmp_path, events=2)
    head = tmp_path / "kept-by-the-officer.json"
    exported = cli("audit", "checkpoint", "--export", str(head), "--json")
    assert exported.code == 0
    assert json.loads(head.read_text())["key_fingerprint"] == json.loads(exported.stdout)["key_fingerprint"]
    trail = cli.home / "audit" / "audit.jsonl"
    lines = _lines(trail)
    trail.write_bytes(b"\n".join(lines[:-2]) + b"\n")
    (cli.home / "audit" / "audit.jsonl.state").unlink()  # the insider removes the count too
    copy = tmp_path / "copy.jsonl"
    shutil.copy(trail, copy)
    assert _verify(cli)[0] == 0  # nothing in the home shows it any more (and this verify is itself appended) ...
    code, report = _verify(cli, "--checkpoint", str(head))
    assert code == 1 and "rewritten" in {p["kind"] for p in report["problems"]}  # ... the exported head does
    public = tmp_path / "pub.pem"
    shutil.copy(cli.home / "keys" / PUBLIC_KEY_FILE, public)
    code, report = _verify(InProcessCli(home=tmp_path / "nowhere"), "--trail", str(copy), "--pubkey", str(public),
                           "--checkpoint", str(head))
    assert code == 1 and "truncated" in {p["kind"] for p in report["problems"]}


def test_an_exported_checkpoint_is_never_replaced(tmp_path: Path) -> None:
    """Exporting a checkpoint to a file that already holds one replaced it, silently: the officer's earlier proof
    of the trail up to its head was gone. Refused now (exit 2), the file and the trail as they were."""
    cli, _ = _home_with_trail(tmp_path, events=2)
    head = tmp_path / "kept-by-the-officer.json"
    assert cli("audit", "checkpoint", "--export", str(head)).code == 0
    kept, trail = head.read_bytes(), (cli.home / "audit" / "audit.jsonl").read_bytes()
    refused = cli("audit", "checkpoint", "--export", str(head))
    assert refused.code == 2 and "already exists" in refused.stderr
    assert head.read_bytes() == kept and (cli.home / "audit" / "audit.jsonl").read_bytes() == trail


def _attacker_rewrites_everything(home: Path) -> None:
    """Replace the key pair and the whole trail with a fresh one of the attacker's own (valid in itself)."""
    keys = home / "keys"
    attacker = Ed25519PrivateKey.generate()
    (keys / SIGNING_KEY_FILE).write_bytes(attacker.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (keys / PUBLIC_KEY_FILE).write_bytes(attacker.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    trail = home / "audit" / "audit.jsonl"
    trail.unlink()
    (home / "audit" / "audit.jsonl.state").unlink()
    for i in range(3):
        AuditTrail(trail, keys).append(actor="someone", action="appliance.init", outcome="success", objects={"i": i})


def test_replacing_trail_and_key_together_fails_against_the_pinned_fingerprint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, pinned = _home_with_trail(tmp_path, events=1)
    _attacker_rewrites_everything(cli.home)
    assert _verify(cli)[0] == 0  # unanchored, the substitute looks intact: that is the attack
    monkeypatch.setenv(FINGERPRINT_ENV, pinned)
    code, report = _verify(cli)
    assert code == 1 and report["anchored"] is True
    assert report["problems"][0]["kind"] == "key" and pinned in report["problems"][0]["detail"]
    doctor = cli("doctor", "--json")
    assert doctor.code == 1
    item = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["pinned audit key"]
    assert item["status"] == "fail" and pinned in item["detail"]
    export = cli("audit", "checkpoint", "--out", str(tmp_path / "x.json"))
    assert export.code == 1 and not (tmp_path / "x.json").exists()


def test_pinned_public_key_file_in_openssh_format_and_pubkey_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, pinned = _home_with_trail(tmp_path, events=1)
    original = load_signing_key(cli.home / "keys").public_key()
    ssh = tmp_path / "pinned" / "audit.pub"
    ssh.parent.mkdir()
    ssh.write_bytes(original.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                    + b" compliance@hospital\n")
    monkeypatch.setenv(PUBKEY_FILE_ENV, str(ssh))
    code, report = _verify(cli)
    assert code == 0 and report["anchored"] and report["fingerprint"] == pinned
    doctor = json.loads(cli("doctor", "--json").stdout)
    assert {c["check"]: c["status"] for c in doctor["checks"]}["pinned audit key"] == "ok"
    saved = tmp_path / "home-copy"
    shutil.copytree(cli.home, saved)
    _attacker_rewrites_everything(cli.home)
    code, report = _verify(cli)
    assert code == 1 and "signature" in {p["kind"] for p in report["problems"]}
    monkeypatch.delenv(PUBKEY_FILE_ENV)
    code, report = _verify(cli, "--pubkey", str(ssh))  # the verifier's own copy of the key
    assert code == 1
    # a copy of the genuine trail verifies with only the pinned key, no home
    other = InProcessCli(home=tmp_path / "nowhere")
    monkeypatch.setenv(PUBKEY_FILE_ENV, str(ssh))
    result = other("audit", "verify", "--trail", str(saved / "audit" / "audit.jsonl"), "--json")
    assert result.code == 0 and json.loads(result.stdout)["intact"] is True


def test_a_malformed_pin_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, _ = _home_with_trail(tmp_path, events=0)
    monkeypatch.setenv(FINGERPRINT_ENV, "SHA256:not-a-fingerprint")
    result = cli("audit", "verify")
    assert result.code == 2 and FINGERPRINT_ENV in result.stderr


def test_doctor_warns_while_unpinned_and_checks_private_against_public(tmp_path: Path) -> None:
    cli, pinned = _home_with_trail(tmp_path, events=0)
    doctor = cli("doctor", "--json")
    assert doctor.code == 0
    item = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}["pinned audit key"]
    assert item["status"] == "warn" and pinned in item["detail"] and FINGERPRINT_ENV in item["detail"]
    # the public key file swapped for another key's: doctor names the mismatch
    other = Ed25519PrivateKey.generate().public_key()
    (cli.home / "keys" / PUBLIC_KEY_FILE).write_bytes(other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    doctor = cli("doctor", "--json")
    assert doctor.code == 1


def test_append_refuses_a_trail_shorter_than_its_state(tmp_path: Path) -> None:
    cli, _ = _home_with_trail(tmp_path, events=2)
    trail_path = cli.home / "audit" / "audit.jsonl"
    lines = _lines(trail_path)
    trail_path.write_bytes(b"\n".join(lines[:-2]) + b"\n")
    with pytest.raises(AuditWriteError, match="were removed"):
        AuditTrail(trail_path, cli.home / "keys").append(actor="a", action="x.y", outcome="success")
