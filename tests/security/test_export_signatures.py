"""SSHSIG as ssh-keygen writes and checks it, verified in Python; the policy's people by key."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml

from medhelm_local.errors import BadInputError, ConfigError
from medhelm_local.export import sshsig
from medhelm_local.export.policy import parse_policy
from tests.compliance.conftest import signer

DIGEST = "3f" * 32


def test_ssh_keygen_signatures_verify_in_python(tmp_path: Path) -> None:
    carol = signer(tmp_path, "carol")
    for hashalg in ("sha512", "sha256"):
        out = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(carol.private), "-n", "medhelm-export", "-O",
                              f"hashalg={hashalg}"], input=DIGEST.encode(), capture_output=True, check=True).stdout
        verified = sshsig.verify(out.decode(), [DIGEST.encode()], "medhelm-export")
        assert verified.hash_algorithm == hashalg
        expected = subprocess.run(["ssh-keygen", "-l", "-f", str(carol.private.with_suffix(".pub"))],
                                  capture_output=True, text=True, check=True).stdout.split()[1]
        assert verified.fingerprint == expected
        with pytest.raises(sshsig.SignatureError, match="namespace"):
            sshsig.verify(out.decode(), [DIGEST.encode()], "medhelm-export-request")
        with pytest.raises(sshsig.SignatureError, match="does not match"):
            sshsig.verify(out.decode(), [("40" * 32).encode()], "medhelm-export")


def test_python_signatures_verify_with_ssh_keygen(tmp_path: Path) -> None:
    carol = signer(tmp_path, "carol")
    armored = sshsig.sign(sshsig.load_private_key(carol.private), DIGEST.encode(), "medhelm-export")
    (tmp_path / "sig").write_text(armored)
    (tmp_path / "allowed").write_text(f"carol {carol.public}\n")
    checked = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(tmp_path / "allowed"), "-I", "carol", "-n",
                              "medhelm-export", "-s", str(tmp_path / "sig")], input=DIGEST.encode(),
                             capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_damaged_signatures_are_refused(tmp_path: Path) -> None:
    carol = signer(tmp_path, "carol")
    armored = sshsig.sign(sshsig.load_private_key(carol.private), DIGEST.encode(), "medhelm-export")
    blob = sshsig.unarmor(armored)
    for offset in range(0, len(blob), 7):
        changed = bytearray(blob)
        changed[offset] ^= 0x01
        with pytest.raises(sshsig.SignatureError):
            sshsig.verify(sshsig.armor(bytes(changed)), [DIGEST.encode()], "medhelm-export")
    with pytest.raises(sshsig.SignatureError, match="armored"):
        sshsig.verify(base64.b64encode(blob).decode(), [DIGEST.encode()], "medhelm-export")
    with pytest.raises(sshsig.SignatureError):
        sshsig.verify(sshsig.armor(blob + b"x"), [DIGEST.encode()], "medhelm-export")


def test_only_ed25519_keys(tmp_path: Path) -> None:
    rsa = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)], check=True)
    with pytest.raises(BadInputError, match="Ed25519"):
        sshsig.load_private_key(rsa)
    out = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(rsa), "-n", "medhelm-export"], input=DIGEST.encode(),
                         capture_output=True, check=True).stdout
    with pytest.raises(sshsig.SignatureError, match="Ed25519"):
        sshsig.verify(out.decode(), [DIGEST.encode()], "medhelm-export")
    policy = {"approval": {"approvers": [{"name": "r", "key": rsa.with_suffix(".pub").read_text()}]}}
    with pytest.raises(ConfigError, match="Ed25519"):
        parse_policy(yaml.safe_dump(policy).encode(), "policy.yaml")


def test_policy_people_by_key(tmp_path: Path) -> None:
    alice, carol = signer(tmp_path, "alice"), signer(tmp_path, "carol")

    def policy(requesters: list[dict[str, str]], approvers: list[dict[str, str]]) -> bytes:
        return yaml.safe_dump({"approval": {"requesters": requesters, "approvers": approvers}}).encode()

    loaded = parse_policy(policy([{"name": "alice", "key": alice.public}], [{"name": "carol", "key": carol.public}]),
                          "p")
    fingerprint = sshsig.fingerprint(sshsig.load_private_key(carol.private).public_key())
    approver = loaded.policy.approval.approver(fingerprint)
    assert approver is not None and approver.name == "carol"
    assert loaded.policy.approval.requester(fingerprint) is None
    with pytest.raises(ConfigError, match="one key is one person"):
        parse_policy(policy([{"name": "alice", "key": alice.public}], [{"name": "bob", "key": alice.public}]), "p")
    with pytest.raises(ConfigError, match="listed twice"):
        parse_policy(policy([], [{"name": "c", "key": carol.public}, {"name": "d", "key": carol.public}]), "p")
    with pytest.raises(ConfigError, match="allow_self_approval"):
        parse_policy(yaml.safe_dump({"approval": {"approvers": [], "allow_self_approval": True}}).encode(), "p")
