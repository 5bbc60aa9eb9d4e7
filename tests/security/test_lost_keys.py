"""Issue 12 §5: `init` never silently replaces a lost signing or data key while a trail or store needs it; an
explicit, audited `keys recover` does. Before the fix, `init` made a new signing key, `doctor` and `verify`
were fine, and every later action was refused as "invalid signature"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.home import Home
from medhelm_local.home.keys import DATA_KEY_FILE, SIGNING_KEY_FILE
from medhelm_local.store import Store
from tests.compliance.inproc import InProcessCli
from tests.security.pinkit import FINGERPRINT_ENV, no_pin, recorded_home

__all__ = ["no_pin"]  # the autouse fixture that clears the pin's environment


def test_init_refuses_to_replace_a_lost_signing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli, old = recorded_home(tmp_path)
    keys = cli.home / "keys"
    (keys / SIGNING_KEY_FILE).unlink()
    trail = cli.home / "audit" / "audit.jsonl"
    before = trail.read_bytes()
    result = cli("init")
    assert result.code == 1
    assert "will not replace a lost key" in result.stderr and "keys recover --signing-key" in result.stderr
    assert not (keys / SIGNING_KEY_FILE).exists() and trail.read_bytes() == before

    recovered = cli("keys", "recover", "--signing-key", "--json")
    assert recovered.code == 0, recovered.stderr
    info = json.loads(recovered.stdout)
    assert info["old_key_fingerprint"] == old and info["new_key_fingerprint"] != old
    archived = cli.home / "audit" / info["archived_trail"]
    assert archived.read_bytes() == before
    # the old trail still verifies against the old key; the new one starts with the recovery record
    old_public = keys / info["archived_public_key"]
    copy_check = cli("audit", "verify", "--trail", str(archived), "--pubkey", str(old_public), "--json")
    assert copy_check.code == 0, copy_check.stdout
    first = json.loads(trail.read_bytes().splitlines()[0])
    assert first["action"] == "keys.recover" and first["objects"]["previous_key_fingerprint"] == old
    assert first["objects"]["previous_records"] == info["archived_records"]
    # later actions work again ...
    assert cli("audit", "checkpoint", "--out", str(tmp_path / "after.json")).code == 0
    assert cli("audit", "verify").code == 0
    # ... and the recovery cannot go unnoticed: the pinned (old) key no longer matches until re-pinned
    monkeypatch.setenv(FINGERPRINT_ENV, old)
    assert cli("doctor").code == 1
    assert cli("audit", "verify").code == 1
    monkeypatch.setenv(FINGERPRINT_ENV, info["new_key_fingerprint"])
    assert cli("doctor").code == 0
    assert cli("keys", "recover", "--signing-key").code == 2  # nothing lost: nothing to recover


def test_init_refuses_to_replace_a_lost_data_key(tmp_path: Path) -> None:
    cli, _ = recorded_home(tmp_path)
    home = Home(cli.home)
    with Store.open(home) as store:
        store.conn.execute("INSERT INTO meta VALUES ('marker', 'kept')")
    store_bytes = home.store_path.read_bytes()
    (cli.home / "keys" / DATA_KEY_FILE).unlink()
    result = cli("init")
    assert result.code == 1 and "keys recover --data-key" in result.stderr
    assert not (cli.home / "keys" / DATA_KEY_FILE).exists()
    assert home.store_path.read_bytes() == store_bytes

    recovered = cli("keys", "recover", "--data-key", "--json")
    assert recovered.code == 0, recovered.stderr
    moved = home.store_path.with_name(json.loads(recovered.stdout)["moved_store"])
    assert moved.read_bytes() == store_bytes  # set aside, still encrypted, in case the key turns up
    listing = cli("datasets", "list", "--json")
    assert listing.code == 0 and json.loads(listing.stdout) == []
    actions = [(json.loads(line)["action"], json.loads(line)["outcome"])
               for line in (cli.home / "audit" / "audit.jsonl").read_bytes().splitlines()]
    assert ("keys.recover", "started") in actions and ("keys.recover", "success") in actions


def test_init_on_a_home_without_trail_or_store_still_creates_keys(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    home = Home(cli.home)
    home.root.mkdir()
    assert cli("init").code == 0
    (cli.home / "keys" / DATA_KEY_FILE).unlink()  # no store yet: nothing needs the old key
    assert cli("init").code == 0 and (cli.home / "keys" / DATA_KEY_FILE).exists()
