"""The store's data key never reaches a message: whoever edits ``appliance.yaml`` chooses the store's path, and a
path that spelt the statement's key placeholder (``$key``) put the key into the ATTACH statement's path, where
DuckDB's parser error quoted it back (``syntax error at or near "8eff4869..."``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from medhelm_local.home.keys import DATA_KEY_FILE
from tests.compliance.inproc import InProcessCli


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MEDHELM_KEYS_DIR", "MEDHELM_CONFIG", "MEDHELM_AUDIT_KEY_FINGERPRINT", "MEDHELM_AUDIT_PUBKEY_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("store", ["store/m$key.duckdb", "store/$key", "store/x'$key'.duckdb"])
def test_a_store_path_naming_the_key_placeholder_does_not_print_the_key(tmp_path: Path, store: str) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    config = cli.home / "appliance.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["paths"]["store"] = store
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    key = (cli.home / "keys" / DATA_KEY_FILE).read_text(encoding="ascii").strip()

    result = cli("datasets", "list")

    output = result.stdout + result.stderr
    assert key[:16] not in output, "the store's data key was printed"
    assert result.code == 0, output  # the path is only an odd file name: the store opens there
