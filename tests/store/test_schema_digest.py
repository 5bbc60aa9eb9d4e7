"""Opening a store migrates its schema (every ``schema_*.sql`` statement, then the steps written in Python) only
where the store was not already migrated by these very files: their digest is kept in ``meta``. A reader of a store
migrated by another release has it migrated first."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.store import Store
from medhelm_local.store import store as store_mod
from tests.scoring.helpers import make_home

TABLES = "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'prefix_keys'"


def _digest(store: Store) -> str | None:
    row = store.conn.execute("SELECT value FROM meta WHERE key = 'schema_digest'").fetchone()
    return None if row is None else str(row[0])


def test_a_migrated_store_keeps_its_digest_and_a_changed_schema_is_applied(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        first = _digest(store)
        assert first is not None and len(first) == 64
        store.conn.execute("DROP TABLE prefix_keys")  # what an upgrade's new schema file would create
    with Store.open(home) as store:
        assert _digest(store) == first
        assert store.conn.execute(TABLES).fetchone() == (0,), "the same schema: not migrated again"
    monkeypatch.setattr(store_mod, "MIGRATION_STEPS", (*store_mod.MIGRATION_STEPS, "a_new_step"))
    with Store.open(home) as store:  # the code changed its migration: the store is migrated again
        assert store.conn.execute(TABLES).fetchone() == (1,)
        assert _digest(store) not in (None, first)


def test_a_store_from_before_digests_is_migrated(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        first = _digest(store)
        store.conn.execute("DELETE FROM meta WHERE key = 'schema_digest'")
        store.conn.execute("DROP TABLE prefix_keys")
    with Store.open_file(home, home.store_path, read_only=True, migrate=False) as store:  # a health check
        assert store.conn.execute(TABLES).fetchone() == (0,) and not store.schema_is_current()
    with Store.open(home, read_only=True) as store:  # a reader: migrated first, then read
        assert store.conn.execute(TABLES).fetchone() == (1,)
        assert _digest(store) == first and store.schema_is_current()
