"""The appliance key's fingerprint is OpenSSH's: `ssh-keygen -lf` on the key `keys export-public --format openssh`
writes prints exactly what `init`, `keys show` and `audit verify` print. Before, they hashed the raw 32-byte key
and printed another `SHA256:` than ssh-keygen, so a compliance officer comparing them rejected the appliance key.
Pins recorded in that earlier form still match (and are said to be in it); a wrong pin still fails."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from medhelm_local.home.keys import load_signing_key
from tests.compliance.inproc import InProcessCli
from tests.security.pinkit import FINGERPRINT_ENV, no_pin, recorded_home

__all__ = ["no_pin"]  # the autouse fixture that clears the pin's environment


def _raw_key_form(cli: InProcessCli) -> str:
    raw = load_signing_key(cli.home / "keys").public_key().public_bytes(serialization.Encoding.Raw,
                                                                        serialization.PublicFormat.Raw)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")
def test_ssh_keygen_prints_the_fingerprint_init_and_keys_show_print(tmp_path: Path) -> None:
    cli, printed_by_init = recorded_home(tmp_path)
    out = tmp_path / "appliance.pub"
    assert cli("keys", "export-public", "--format", "openssh", "--out", str(out)).code == 0
    listed = subprocess.run(["ssh-keygen", "-lf", str(out)], capture_output=True, text=True, check=True).stdout
    by_ssh_keygen = listed.split()[1]
    assert by_ssh_keygen.startswith("SHA256:")
    assert printed_by_init == by_ssh_keygen
    shown = cli("keys", "show", "--json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["signing_key_fingerprint"] == by_ssh_keygen
    verified = cli("audit", "verify", "--json")
    assert json.loads(verified.stdout)["fingerprint"] == by_ssh_keygen


def test_a_pin_in_the_earlier_raw_key_form_still_verifies_and_says_so(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cli, printed_by_init = recorded_home(tmp_path)
    earlier = _raw_key_form(cli)
    assert earlier != printed_by_init
    monkeypatch.setenv(FINGERPRINT_ENV, earlier)
    verified = cli("audit", "verify")
    assert verified.code == 0, verified.stdout + verified.stderr
    assert "earlier fingerprint form" in verified.stdout and printed_by_init in verified.stdout
    doctor = cli("doctor")
    assert doctor.code == 0, doctor.stdout + doctor.stderr
    assert "earlier fingerprint form" in doctor.stdout
    monkeypatch.setenv(FINGERPRINT_ENV, printed_by_init)
    verified = cli("audit", "verify")
    assert verified.code == 0 and "earlier fingerprint form" not in verified.stdout


def test_a_wrong_pin_still_fails_in_either_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, _ = recorded_home(tmp_path)
    other = Ed25519PrivateKey.generate().public_key()
    from medhelm_local.audit.anchor import earlier_fingerprint, fingerprint

    for wrong in (fingerprint(other), earlier_fingerprint(other)):
        monkeypatch.setenv(FINGERPRINT_ENV, wrong)
        verified = cli("audit", "verify", "--json")
        assert verified.code == 1, verified.stdout + verified.stderr
        assert json.loads(verified.stdout)["intact"] is False
        assert cli("doctor").code != 0
