"""The store as the previous release (c401f01) leaves it, for upgrade and rollback tests that need no checkout of
that release: its schema files are copied, as they were, into ``schema_c401f01/``, and its migration is replayed
here (every statement, core first, then its digest in ``meta``). When a release is cut, the next one's tests
copy that release's files instead.

``SESSION_INSERT`` and ``DATASET_INSERT`` are that release's own statements for a new session
(``store/runs.py: start_session``) and a new dataset version (``store.py: register_dataset``): they insert by
position, so any column added to ``runner_sessions`` or ``datasets`` breaks them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb

from medhelm_local.home import Home
from medhelm_local.home.keys import load_data_key
from medhelm_local.store.connection import open_database

RELEASE = "c401f01"
SCHEMA_FOLDER = Path(__file__).with_name(f"schema_{RELEASE}")
SCHEMA_VERSION = "1"
MIGRATION_STEPS = ("unkey_requests",)
SESSION_INSERT = "INSERT INTO runner_sessions VALUES (?, ?, ?, ?, ?, NULL, 0, 0, 0, 0, 0, 0, ?)"
DATASET_INSERT = "INSERT INTO datasets VALUES (?, ?, ?, ?, ?, ?, ?)"  # store.py: register_dataset


def schema_texts() -> list[tuple[str, str]]:
    """The release's schema files, in the order its migration ran them (core first)."""
    files = sorted(SCHEMA_FOLDER.glob("schema_*.sql"), key=lambda f: (f.name != "schema_core.sql", f.name))
    return [(file.name, file.read_text(encoding="utf-8")) for file in files]


def schema_digest() -> str:
    """The digest the release's migration keeps in ``meta``."""
    return hashlib.sha256(json.dumps([SCHEMA_VERSION, MIGRATION_STEPS, schema_texts()]).encode()).hexdigest()


def create_store(home: Home) -> None:
    """The home's store as the release creates it: its tables, its ``meta`` rows, nothing else."""
    database = open_database(home.store_path, load_data_key(home.keys_dir), settings=home.config.store)
    try:
        apply_schema(database.conn)
        database.conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        database.conn.execute("INSERT INTO meta VALUES ('schema_digest', ?)", [schema_digest()])
    finally:
        database.close()


def apply_schema(conn: duckdb.DuckDBPyConnection) -> None:
    for _, text in schema_texts():
        for statement in text.split(";"):
            if statement.strip():
                conn.execute(statement)


def columns(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str, bool]]]:
    """Every table of the connection's current database: its columns (name, type, nullable), in order."""
    rows = conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable FROM duckdb_columns() "
        "WHERE database_name = current_database() ORDER BY table_name, column_index"
    ).fetchall()
    tables: dict[str, list[tuple[str, str, bool]]] = {}
    for table, name, data_type, nullable in rows:
        tables.setdefault(str(table), []).append((str(name), str(data_type), bool(nullable)))
    return tables


def release_columns() -> dict[str, list[tuple[str, str, bool]]]:
    """The tables and columns of a store the release created."""
    conn = duckdb.connect(":memory:")
    try:
        apply_schema(conn)
        return columns(conn)
    finally:
        conn.close()


def downgrade(conn: duckdb.DuckDBPyConnection) -> None:
    """Turn a store this code wrote (runs, sessions and all) into the one the release would have left: the tables
    it did not have are dropped and its digest put back. Every table it had must be as it had it."""
    release = release_columns()
    for table in set(columns(conn)) - set(release):
        conn.execute(f"DROP TABLE {table}")
    assert columns(conn) == release, "a table of the previous release changed: it cannot be downgraded"
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_digest'", [schema_digest()])
