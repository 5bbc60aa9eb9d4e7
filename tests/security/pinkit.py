"""Helpers for the audit-key pin tests: the pin's environment cleared, and a home whose key the compliance
officer recorded. The conventions (TEAM.md) are spelled out here, not imported, so that the tests also run, and
fail, against the code before them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.compliance.inproc import InProcessCli

FINGERPRINT_ENV = "MEDHELM_AUDIT_KEY_FINGERPRINT"
PUBKEY_FILE_ENV = "MEDHELM_AUDIT_PUBKEY_FILE"


@pytest.fixture(autouse=True)
def no_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (FINGERPRINT_ENV, PUBKEY_FILE_ENV, "MEDHELM_KEYS_DIR", "MEDHELM_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def recorded_home(tmp_path: Path) -> tuple[InProcessCli, str]:
    """A new home with a checkpoint of its trail, and the fingerprint `init` printed (the one the officer
    recorded)."""
    cli = InProcessCli(home=tmp_path / "home")
    init = cli("init", "--json")
    assert init.code == 0, init.stderr
    assert cli("audit", "checkpoint", "--out", str(tmp_path / "head.json")).code == 0
    return cli, json.loads(init.stdout)["audit_key_fingerprint"]
