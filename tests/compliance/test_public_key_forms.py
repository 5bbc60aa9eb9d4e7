"""`export verify --public-key` and `audit verify --public-key` read the appliance's key through one reader, in
either form a recipient may hold it (PEM, OpenSSH). Before, `export verify` read PEM only: a recipient given the key
as `ssh-ed25519 AAAA...` (as `audit verify` accepts it) could not verify a bundle (exit 1, "not a PEM public key"),
and a private key given by mistake was reported as "not a PEM public key" (exit 1 from `export verify`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from medhelm_local.audit.anchor import fingerprint
from medhelm_local.home.keys import load_signing_key
from tests.compliance.conftest import EvaluatedHome, approve_args, request_export, run_json, signers
from tests.compliance.inproc import InProcessCli

SECRET = "Jane Roe MRN 00417"  # a file's content must never come back in a message


def _released(evaluated: EvaluatedHome, tmp_path: Path) -> Path:
    request_id = str(request_export(evaluated.cli, evaluated.run_id)["request_id"])
    out = tmp_path / "outbox"
    run_json(evaluated.cli, "export", "approve", request_id, *approve_args(evaluated.home), "--out", str(out))
    return out / request_id


def _openssh_public(evaluated: EvaluatedHome, tmp_path: Path) -> Path:
    key = load_signing_key(evaluated.home / "keys").public_key()
    path = tmp_path / "appliance.pub"
    path.write_bytes(key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                     + b" compliance@hospital\n")
    return path


def test_both_verifications_read_the_appliance_key_in_openssh_form(evaluated: EvaluatedHome, tmp_path: Path) -> None:
    cli = evaluated.cli
    released = _released(evaluated, tmp_path)
    ssh = _openssh_public(evaluated, tmp_path)
    exported = cli("export", "verify", str(released), "--public-key", str(ssh), "--json")
    assert exported.code == 0, exported.stdout + exported.stderr
    assert json.loads(exported.stdout)["ok"] is True
    audited = cli("audit", "verify", "--public-key", str(ssh), "--json")
    assert audited.code == 0 and json.loads(audited.stdout)["anchored"] is True
    pem = tmp_path / "appliance.pub.pem"
    assert cli("keys", "export-public", "--out", str(pem)).code == 0
    assert cli("export", "verify", str(released), "--public-key", str(pem)).code == 0
    # Another appliance's key, in OpenSSH form: read, and the bundle does not verify with it.
    other = tmp_path / "other.pub"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                            serialization.PublicFormat.OpenSSH))
    assert cli("export", "verify", str(released), "--public-key", str(other)).code == 1


def _private_pem(tmp_path: Path) -> Path:
    path = tmp_path / "appliance.pem"
    path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def _private_openssh(tmp_path: Path) -> Path:
    return signers(tmp_path / "home")["mallory"].private  # made by ssh-keygen, as a person keeps it


def _not_a_key(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text(f"ssh-ed25519 {SECRET}\n", encoding="utf-8")
    return path


def _rsa_public(tmp_path: Path) -> Path:
    path = tmp_path / "rsa.pub"
    path.write_bytes(generate_private_key(public_exponent=65537, key_size=2048).public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return path


@pytest.mark.parametrize("command", ["export", "audit"])
@pytest.mark.parametrize(("make", "expected"), [
    (_private_pem, "this is a private key, not a public key"),
    (_private_openssh, "this is a private key, not a public key"),
    (_not_a_key, "not a public key file; expected a PEM public key"),
    (_rsa_public, "a public key of another type; expected an Ed25519 key"),
    (lambda tmp_path: tmp_path / "missing.pub", "public key file not found"),
])
def test_a_file_that_is_no_public_key_is_bad_input_naming_it_never_its_content(
        tmp_path: Path, command: str, make: Callable[[Path], Path], expected: str) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    path = make(tmp_path)
    args = (["export", "verify", "exp-20261126T000000Z-000000"] if command == "export" else ["audit", "verify"])
    result = cli(*args, "--public-key", str(path))
    assert result.code == 2, result.stdout + result.stderr
    assert f"--public-key: {path}: {expected}" in result.stderr
    if "not a public key" in expected:
        assert "PEM" in result.stderr and "OpenSSH" in result.stderr
    shown = result.stdout + result.stderr
    assert SECRET not in shown and "PRIVATE KEY-----\n" not in shown
    if path.exists():
        body = path.read_text(encoding="ascii", errors="replace").splitlines()
        assert not any(len(line) > 20 and line in shown for line in body if "BEGIN" not in line and "END" not in line)


def test_the_pinned_key_file_is_read_by_the_same_reader(evaluated: EvaluatedHome, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from medhelm_local.audit.anchor import PUBKEY_FILE_ENV

    monkeypatch.setenv(PUBKEY_FILE_ENV, str(_private_pem(tmp_path)))
    result = evaluated.cli("audit", "verify")
    assert result.code == 2 and f"{PUBKEY_FILE_ENV}: " in result.stderr and "is a private key" in result.stderr
    monkeypatch.setenv(PUBKEY_FILE_ENV, str(_openssh_public(evaluated, tmp_path)))
    assert evaluated.cli("audit", "verify").code == 0



def test_export_public_names_the_key_by_the_fingerprint_init_printed(tmp_path: Path) -> None:
    """COMPLIANCE.md pins the key by the `SHA256:...` fingerprint `init` prints; `keys export-public` named the
    file it wrote by a 16-hex-digit id instead, so a verifier could not tell they had been given the pinned key."""
    cli = InProcessCli(tmp_path / "home")
    initialised = cli("init")
    assert initialised.code == 0, initialised.stderr
    (pinned,) = [line.split(": ", 1)[1] for line in initialised.stdout.splitlines()
                 if line.startswith("audit signing key fingerprint: ")]
    exported = cli("keys", "export-public", "--out", str(tmp_path / "appliance.pub.pem"))
    assert exported.code == 0, exported.stderr
    assert f"public key {pinned} written to" in exported.stdout + exported.stderr


def test_export_public_writes_the_openssh_form_both_verifications_read(evaluated: EvaluatedHome,
                                                                       tmp_path: Path) -> None:
    """COMPLIANCE.md says `--public-key` takes the key as `ssh-ed25519 AAAA...`, but `keys export-public` wrote PEM
    only and `ssh-keygen -i -m PKCS8` cannot convert an Ed25519 PEM key: a verifier had no way to get that form."""
    cli = evaluated.cli
    pem, ssh = tmp_path / "appliance.pub.pem", tmp_path / "appliance.pub"
    as_pem = cli("keys", "export-public", "--out", str(pem))
    as_ssh = cli("keys", "export-public", "--out", str(ssh), "--format", "openssh")
    assert as_pem.code == 0 and as_ssh.code == 0, as_ssh.stdout + as_ssh.stderr
    assert pem.read_text(encoding="ascii").startswith("-----BEGIN PUBLIC KEY-----")  # the default is unchanged
    (line,) = ssh.read_text(encoding="ascii").splitlines()
    kind, _, comment = line.split(" ")
    assert (kind, comment) == ("ssh-ed25519", "medhelm-appliance")
    printed = {(r.stdout + r.stderr).split("public key ", 1)[1].split(" ", 1)[0] for r in (as_pem, as_ssh)}
    assert printed == {fingerprint(load_signing_key(evaluated.home / "keys").public_key())}
    audited = cli("audit", "verify", "--public-key", str(ssh), "--json")
    assert audited.code == 0 and json.loads(audited.stdout)["anchored"] is True
    assert cli("export", "verify", str(_released(evaluated, tmp_path)), "--public-key", str(ssh)).code == 0
    if shutil.which("ssh-keygen"):  # OpenSSH's own tools read it (their SHA256 is over the key blob: see COMPLIANCE)
        listed = subprocess.run(["ssh-keygen", "-l", "-f", str(ssh)], capture_output=True, text=True, check=True)
        assert listed.stdout.split()[2:] == ["medhelm-appliance", "(ED25519)"]


def test_export_public_refuses_an_unknown_format(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    out = tmp_path / "appliance.pub"
    result = cli("keys", "export-public", "--out", str(out), "--format", "der")
    assert result.code == 2 and "--format" in result.stderr and not out.exists()
