"""Rotating the store's data key: re-encrypt into a new file, then swap the store and its key together.

1. Under an exclusive lock, attach the old store with the old key (read-write, so DuckDB's own file lock
   keeps every other process out) and a new file with a fresh key; ``COPY FROM DATABASE``; compare every
   table's row count; checkpoint and fsync the new file.
2. Write the new key beside the old one (``store-data.key.new``, 0600) and fsync.
3. Write a journal (``<store>.rekey.json``): from here on the rotation only ever rolls forward.
4. Rename old store aside, new store into place, new key over the old key (each rename atomic, each
   directory fsynced), remove the journal, delete the old store. The old key is gone once its file is
   replaced.

A crash before step 3 leaves the old store and key untouched (leftover files are removed by the next
rotation); a crash after it is finished by :func:`recover_interrupted_rotation`, which ``Store.open`` calls,
so the store is usable either way and nothing is lost.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel

from medhelm_local.fileio import write_all
from medhelm_local.home.keys import DATA_KEY_FILE, NEW_DATA_KEY_FILE, load_data_key
from medhelm_local.sinks import AuditSink
from medhelm_local.store.connection import StoreError, connect_engine, sql_literal

# Fault injection for the crash tests: called with the name of each step; production leaves it None.
CRASH_HOOK: Callable[[str], None] | None = None


class RotationResult(BaseModel):
    old_key_id: str
    new_key_id: str
    tables: dict[str, int]


def data_key_id(key_hex: str) -> str:
    """A public identifier of a data key (a hash of 256 random bits reveals nothing about them)."""
    return "sha256:" + hashlib.sha256(key_hex.encode("ascii")).hexdigest()[:16]


def _paths(store: Path, keys_dir: Path) -> dict[str, Path]:
    return {
        "store": store,
        "new_store": store.with_name(store.name + ".rekey-new"),
        "old_store": store.with_name(store.name + ".rekey-old"),
        "journal": store.with_name(store.name + ".rekey.json"),
        "lock": store.with_name(store.name + ".rekey.lock"),
        "key": keys_dir / DATA_KEY_FILE,
        "new_key": keys_dir / NEW_DATA_KEY_FILE,
    }


def _step(name: str) -> None:
    if CRASH_HOOK is not None:
        CRASH_HOOK(name)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(*paths: Path) -> None:
    for path in paths:
        for candidate in (path, path.with_name(path.name + ".wal")):
            candidate.unlink(missing_ok=True)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _table_counts(conn: duckdb.DuckDBPyConnection, alias: str) -> dict[str, int]:
    tables = [r[0] for r in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? ORDER BY table_name", [alias]
    ).fetchall()]
    counts = {}
    for table in tables:
        row = conn.execute(f'SELECT count(*) FROM {alias}."{table}"').fetchone()
        counts[table] = int(row[0]) if row else 0
    return counts


def _finish_swap(p: dict[str, Path]) -> None:
    """Roll an interrupted swap forward; idempotent at every step."""
    if p["new_key"].exists():
        if p["new_store"].exists():
            if p["store"].exists():
                if p["old_store"].exists():
                    raise StoreError(f"key rotation journal {p['journal']} found both {p['store'].name} and "
                                     f"{p['old_store'].name}; refusing to guess which is current")
                os.replace(p["store"], p["old_store"])
            os.replace(p["new_store"], p["store"])
            _fsync_dir(p["store"].parent)
        os.replace(p["new_key"], p["key"])
        _fsync_dir(p["key"].parent)
    p["journal"].unlink(missing_ok=True)
    _fsync_dir(p["store"].parent)
    _unlink(p["old_store"])


def recover_interrupted_rotation(store: Path, keys_dir: Path) -> dict[str, Any] | None:
    """Finish a rotation that crashed after its point of no return. Returns the journal when it did."""
    p = _paths(store, keys_dir)
    if not p["journal"].exists():
        return None
    with _exclusive(p["lock"]):
        if not p["journal"].exists():  # the rotating process finished while we waited for the lock
            return None
        try:
            journal: dict[str, Any] = json.loads(p["journal"].read_text(encoding="utf-8"))
        except (OSError, ValueError):
            journal = {}
        _finish_swap(p)
        return journal


def check_new_data_key(key_hex: str, source: str) -> str:
    """A data key supplied by the operator: 64 lowercase hex characters (256 bits), as `init` writes them."""
    key = key_hex.strip()
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise StoreError(f"{source}: expected a data key of 64 lowercase hex characters (256 bits), e.g. from "
                         "`python3 -c 'import secrets; print(secrets.token_hex(32))'`")
    return key


def rotate_data_key(store: Path, keys_dir: Path, on_point_of_no_return: Callable[[str, str], None] | None = None,
                    *, new_key: str | None = None) -> RotationResult:
    """Re-encrypt the store under a new data key. ``on_point_of_no_return(old_id, new_id)`` runs (and may
    refuse by raising) after the copy is verified and before anything is swapped.

    ``new_key`` (64 hex characters) is a key the operator generated and stored safely beforehand (a new
    Kubernetes Secret, the key vault): the store is then never encrypted under a key that exists only here."""
    p = _paths(store, keys_dir)
    with _exclusive(p["lock"]):
        if p["journal"].exists():
            _finish_swap(p)
        _unlink(p["new_store"], p["old_store"])
        p["new_key"].unlink(missing_ok=True)
        if not store.exists():
            raise StoreError(f"no store at {store}; nothing to re-encrypt")
        shards = sorted((store.parent / "shards").glob("*/*.duckdb"))
        if shards:
            raise StoreError(f"{len(shards)} unmerged shard store(s) under {store.parent / 'shards'} use the current "
                             "data key; merge them first (`medhelm-local runs merge RUN_ID`), then rotate")
        old_key = load_data_key(keys_dir)
        if new_key is None:
            new_key = secrets.token_hex(32)
        elif new_key == old_key:
            raise StoreError("the new data key is the current one; generate a new key")
        old_id, new_id = data_key_id(old_key), data_key_id(new_key)
        conn = connect_engine(store)  # a large copy spills into the store's own spill directory, encrypted
        try:
            try:
                conn.execute(f"ATTACH {sql_literal(str(store))} AS old_db (ENCRYPTION_KEY {sql_literal(old_key)})")
                conn.execute("CHECKPOINT old_db")
                conn.execute(f"ATTACH {sql_literal(str(p['new_store']))} AS new_db "
                             f"(ENCRYPTION_KEY {sql_literal(new_key)})")
                conn.execute("COPY FROM DATABASE old_db TO new_db")
                old_counts, new_counts = _table_counts(conn, "old_db"), _table_counts(conn, "new_db")
                if old_counts != new_counts:
                    raise StoreError("key rotation: the re-encrypted copy does not match the store; nothing was "
                                     "changed")
                conn.execute("CHECKPOINT new_db")
                conn.execute("DETACH new_db")
            except duckdb.Error as exc:
                # DuckDB's messages can quote values and statements (the ATTACHes carry both keys): the type
                # only, except for an I/O error (a full disk), whose message names a file and the failure.
                reason = str(exc) if isinstance(exc, duckdb.IOException) else type(exc).__name__
                raise StoreError(f"key rotation could not copy the store {store}: {reason}; nothing was changed"
                                 ) from None
            _fsync_file(p["new_store"])
            _step("copied")
            try:
                fd = os.open(p["new_key"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    write_all(fd, new_key.encode("ascii"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _fsync_dir(keys_dir)
            except OSError as exc:
                raise StoreError(f"cannot write the new data key in {keys_dir} ({exc.strerror}); is the keys "
                                 "volume read-only? Nothing was changed") from None
            _step("new_key_written")
            if on_point_of_no_return is not None:
                on_point_of_no_return(old_id, new_id)
            journal = {"phase": "swap", "old_key_id": old_id, "new_key_id": new_id}
            fd = os.open(p["journal"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                write_all(fd, json.dumps(journal).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(store.parent)
            _step("journal_written")
            os.replace(store, p["old_store"])
            _step("old_store_moved")
            os.replace(p["new_store"], store)
            _fsync_dir(store.parent)
            _step("store_swapped")
            os.replace(p["new_key"], p["key"])
            _fsync_dir(keys_dir)
            _step("key_swapped")
            p["journal"].unlink()
            _fsync_dir(store.parent)
        except BaseException:
            if not p["journal"].exists():  # before the point of no return: leave the store as it was
                _unlink(p["new_store"])
                p["new_key"].unlink(missing_ok=True)
            raise
        finally:
            conn.close()
        _unlink(p["old_store"])
        return RotationResult(old_key_id=old_id, new_key_id=new_id, tables=new_counts)


def recover_and_audit(store: Path, keys_dir: Path, audit: AuditSink | None) -> None:
    """``Store.open``'s hook: finish an interrupted rotation and record that it did in ``audit``."""
    journal = recover_interrupted_rotation(store, keys_dir)
    if journal is not None and audit is not None:
        audit("keys.rotate", outcome="recovered", role="system", key="store-data",
              old_key_id=journal.get("old_key_id"), new_key_id=journal.get("new_key_id"))
