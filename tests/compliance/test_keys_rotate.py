"""`keys rotate`: the store is re-encrypted under a new data key, audited, and survives a crash at any step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pytest

from medhelm_local.audit.verify import verify_file
from medhelm_local.home.keys import DATA_KEY_FILE, PUBLIC_KEY_FILE, load_public_key
from medhelm_local.store import rekey
from medhelm_local.store.connection import StoreError, open_encrypted
from tests.compliance.conftest import hospice_csv
from tests.compliance.inproc import InProcessCli

PHRASE = "Plaintextcheckword"
STEPS = ["copied", "new_key_written", "journal_written", "old_store_moved", "store_swapped", "key_swapped"]


@pytest.fixture
def home_with_data(tmp_path: Path) -> InProcessCli:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    extract = hospice_csv(tmp_path / "notes.csv", 30, note=lambda i: f"{PHRASE} note {i} for rotation.")
    assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    return cli


def _datasets(cli: InProcessCli) -> list[dict[str, object]]:
    result = cli("datasets", "list", "--json")
    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return rows


def _key(cli: InProcessCli) -> str:
    return (cli.home / "keys" / DATA_KEY_FILE).read_text().strip()


def _audit_ok(cli: InProcessCli) -> list[tuple[str, str]]:
    trail = cli.home / "audit" / "audit.jsonl"
    report = verify_file(trail, load_public_key(cli.home / "keys" / PUBLIC_KEY_FILE))
    assert report.intact, report.problems
    return [(r["action"], r["outcome"]) for r in (json.loads(line) for line in trail.read_text().splitlines())]


def test_rotate_reencrypts_and_retires_the_old_key(home_with_data: InProcessCli) -> None:
    cli = home_with_data
    before, old_key = _datasets(cli), _key(cli)
    store = cli.home / "store" / "medhelm.duckdb"
    result = cli("keys", "rotate", "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["old_key_id"] != payload["new_key_id"] and payload["tables"]["instances"] == 30
    assert _key(cli) != old_key
    assert _datasets(cli) == before
    with pytest.raises(StoreError):
        open_encrypted(store, old_key, read_only=True).close()
    assert PHRASE.encode() not in store.read_bytes()
    assert oct((cli.home / "keys" / DATA_KEY_FILE).stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in store.parent.iterdir() if "rekey" in p.name and not p.name.endswith(".lock")) == []
    assert ("keys.rotate", "started") in _audit_ok(cli) and ("keys.rotate", "success") in _audit_ok(cli)


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_leaves_a_usable_store(home_with_data: InProcessCli, step: str) -> None:
    cli = home_with_data
    before, old_key = _datasets(cli), _key(cli)
    pid = os.fork()
    if pid == 0:  # the child rotates and dies abruptly at ``step`` (no cleanup, like a power cut or kill -9)
        try:
            rekey.CRASH_HOOK = lambda name: os._exit(70) if name == step else None
            cli("keys", "rotate")
        finally:
            os._exit(71)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 70
    # The next command opens the store: a crash after the journal is rolled forward, one before leaves it be.
    assert _datasets(cli) == before
    rolled_forward = STEPS.index(step) >= STEPS.index("journal_written")
    assert (_key(cli) != old_key) == rolled_forward
    store = cli.home / "store"
    assert [p.name for p in store.iterdir() if p.name.endswith((".rekey-old", ".rekey.json"))] == []
    actions = _audit_ok(cli)
    assert (("keys.rotate", "recovered") in actions) == rolled_forward
    # And a later rotation still works (it clears any leftovers of the crashed one).
    assert cli("keys", "rotate").code == 0
    assert _datasets(cli) == before


def test_the_new_key_is_written_whole_when_the_system_writes_less_than_asked(home_with_data: InProcessCli,
                                                                               monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """The new data key and the journal were written with one os.write each: a short write left part of the key
    in place of the key the store had just been re-encrypted under, and the store unreadable for good."""
    cli = home_with_data
    before = _datasets(cli)
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:5]))
    rotated = cli("keys", "rotate", "--json")
    monkeypatch.setattr(os, "write", real_write)
    assert rotated.code == 0, rotated.stderr
    assert len(_key(cli)) == 64 and rekey.data_key_id(_key(cli)) == json.loads(rotated.stdout)["new_key_id"]
    assert _datasets(cli) == before


def test_rotation_refused_while_shards_are_unmerged(home_with_data: InProcessCli) -> None:
    cli = home_with_data
    shard = cli.home / "store" / "shards" / "run-x" / "shard-0-of-2.duckdb"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"")
    old_key = _key(cli)
    result = cli("keys", "rotate")
    assert result.code == 1 and "shard" in result.stderr
    assert _key(cli) == old_key
    assert ("keys.rotate", "failure") in _audit_ok(cli)


def test_a_failed_copy_names_its_error_type_not_its_message(home_with_data: InProcessCli,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's messages can quote values (a conversion or constraint error) and statements (whose ATTACH carries the
    keys): a copy that fails is reported by its error type; only an I/O error (a full disk) keeps its message."""
    cli = home_with_data
    old_key = _key(cli)
    real_connect = rekey.connect_engine

    class FailingCopy:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("COPY FROM DATABASE"):
                raise duckdb.ConversionException(f"Could not convert string '{PHRASE}' (key {old_key})")
            return self._conn.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    monkeypatch.setattr(rekey, "connect_engine", lambda *a, **k: FailingCopy(real_connect(*a, **k)))
    result = cli("keys", "rotate")
    assert result.code != 0
    assert "ConversionException" in result.stderr and "nothing was changed" in result.stderr
    assert PHRASE not in result.stderr and old_key not in result.stderr
    assert _key(cli) == old_key
