"""A file a command is told to write (`keys export-public --out`, `audit checkpoint --export`, `audit report
--pdf`) never replaces one of the appliance's own. `keys export-public --out keys/store-data.key` exited 0 having
replaced the store's data key with the public key: every stored result was unreadable from then on; `--out
audit/audit.jsonl` replaced the trail, and every later command failed closed."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli


def _appliance_files(home: Path) -> list[Path]:
    return [home / "keys" / "store-data.key", home / "keys" / "signing-ed25519.pem",
            home / "audit" / "audit.jsonl", home / "audit" / "audit.jsonl.state", home / "appliance.yaml"]


def test_no_output_option_replaces_a_key_the_trail_or_the_configuration(home_cli: Cli) -> None:
    home = home_cli.home
    files = _appliance_files(home)
    before = {file: file.read_bytes() for file in files}
    commands = [("keys", "export-public", "--out"), ("audit", "checkpoint", "--export"), ("audit", "report", "--pdf")]
    for command in commands:
        for file in [*files, home / "store" / "medhelm.duckdb"]:
            result = home_cli(*command, str(file))
            assert result.code == 2, (command, file, result.stderr)
            assert "lies in the appliance's" in result.stderr, result.stderr
    assert {file: file.read_bytes() for file in files} == before
    assert not (home / "store" / "medhelm.duckdb").exists() or home_cli("datasets", "list").code == 0
    assert home_cli("audit", "verify").code == 0
    elsewhere = home.parent / "appliance.pub.pem"
    assert home_cli("keys", "export-public", "--out", str(elsewhere)).code == 0
    assert elsewhere.read_text().startswith("-----BEGIN PUBLIC KEY-----")

