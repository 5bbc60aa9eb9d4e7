"""A model's ``api_key_file`` never names one of the appliance's own secrets: whoever edits the configuration (or
points ``MEDHELM_CONFIG`` at a copy of it) and runs the CLI must not get the store's data key or the signing key
sent, as a bearer token, to a server they run on an allowlisted address (loopback)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.conftest import Cli
from tests.httpstub import QuietHandler, stub_server


@contextmanager
def listener() -> Iterator[tuple[str, list[str]]]:
    """A server on loopback (allowlisted) that records every Authorization header it is sent."""
    seen: list[str] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            body = b'{"data": [{"id": "spy"}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with stub_server(Handler) as base_url:
        yield base_url, seen


def _add_model(home: Path, base_url: str, key_file: Path) -> None:
    config = home / "appliance.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["models"].append({"name": "spy", "kind": "openai-compatible", "base_urls": [base_url],
                           "served_model": "spy", "api_key_file": str(key_file)})
    config.write_text(yaml.safe_dump(data), encoding="utf-8")


@pytest.mark.parametrize("secret", ["keys/store-data.key", "keys/signing-ed25519.pem", "audit/audit.jsonl"])
@pytest.mark.parametrize("via_symlink", [False, True])
def test_an_api_key_file_in_the_appliances_folders_is_refused(home_cli: Cli, tmp_path: Path, secret: str,
                                                              via_symlink: bool) -> None:
    home = home_cli.home
    target = home / secret
    key_file = target
    if via_symlink:
        key_file = tmp_path / "innocent-api-key"
        os.symlink(target, key_file)
    with listener() as (base_url, seen):
        _add_model(home, base_url, key_file)
        result = home_cli("models", "wait", "spy", "--timeout", "5")
    assert result.code == 2, result.stdout + result.stderr
    assert seen == [], "a request went out with the appliance's secret as its API key"
    assert "api_key_file" in result.stderr
    secret_text = target.read_text(encoding="utf-8").strip()
    assert secret_text not in result.stdout + result.stderr


def test_an_api_key_file_outside_the_appliances_folders_is_sent(home_cli: Cli, tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-for-tests\n", encoding="utf-8")
    with listener() as (base_url, seen):
        _add_model(home_cli.home, base_url, key_file)
        result = home_cli("models", "wait", "spy", "--timeout", "5")
    assert result.code == 0, result.stdout + result.stderr
    assert seen and set(seen) == {"Bearer k3y-for-tests"}


def test_a_store_kept_at_the_top_of_the_home_does_not_fence_off_the_whole_home(home_cli: Cli, tmp_path: Path
                                                                                ) -> None:
    """With `paths.store: medhelm.duckdb` the store's folder is the home itself: only the store file and its
    companions are refused there, not every file of the home."""
    home = home_cli.home
    config = home / "appliance.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["paths"] = {**data.get("paths", {}), "store": "medhelm.duckdb"}
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    (home / "site-api-key").write_text("k3y-in-the-home\n", encoding="utf-8")
    with listener() as (base_url, seen):
        _add_model(home, base_url, home / "site-api-key")
        result = home_cli("models", "wait", "spy", "--timeout", "5")
        assert result.code == 0, result.stdout + result.stderr
        assert set(seen) == {"Bearer k3y-in-the-home"}
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
        for model in data["models"]:
            if model["name"] == "spy":
                model["api_key_file"] = str(home / "medhelm.duckdb.wal")
        config.write_text(yaml.safe_dump(data), encoding="utf-8")
        refused = home_cli("models", "wait", "spy", "--timeout", "5")
    assert refused.code == 2 and "api_key_file" in refused.stderr
