"""Opening the store: DuckDB's own AES-GCM database encryption, keyed by the appliance's data key.

Writing an encrypted DuckDB database needs OpenSSL, which DuckDB gets from its httpfs extension. The
extension file ships on PyPI (``duckdb-extension-httpfs``, same version as ``duckdb``) and is loaded from
there by path: nothing is ever downloaded, and extension auto-install and auto-load are switched off.

Memory is bounded: above ``memory_limit_mb`` DuckDB spills to ``<store file>.tmp`` beside the store, with its
temporary files encrypted like the store. The directory has to be set before external access is switched off,
or DuckDB could not spill and a large query would fail with out-of-memory instead.
"""

from __future__ import annotations

import os
import time
from importlib import util
from pathlib import Path

import duckdb

from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import StoreSettings

STORE_ALIAS = "store"


class StoreError(MedhelmError):
    """The store cannot be opened or written."""


def httpfs_extension_path() -> Path:
    spec = util.find_spec("duckdb_extension_httpfs")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("package duckdb-extension-httpfs is not installed; it is required to encrypt the store")
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "extensions" / f"v{duckdb.__version__}" / "httpfs.duckdb_extension"
    if not path.exists():
        raise StoreError(
            f"duckdb-extension-httpfs does not match duckdb {duckdb.__version__} (no {path.name} for it); "
            "install the same version of both"
        )
    return path


def spill_directory(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def connect_engine(store_path: Path, settings: StoreSettings | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that can attach encrypted databases: OpenSSL (httpfs) loaded by path, nothing
    downloaded, memory bounded and spilling, encrypted, into the spill directory of ``store_path``."""
    settings = settings or StoreSettings()
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "memory_limit": f"{settings.memory_limit_mb}MiB",
        "threads": settings.threads,
    }
    conn = duckdb.connect(":memory:", config=config)
    try:
        conn.execute(f"LOAD {sql_literal(str(httpfs_extension_path()))}")
        conn.execute(f"SET temp_directory = {sql_literal(str(spill_directory(store_path)))}")
        conn.execute("SET temp_file_encryption = true")
    except BaseException:
        conn.close()
        raise
    return conn


LOCK_TIMEOUT_ENV = "MEDHELM_LOCK_TIMEOUT_S"
_LOCK_POLL_S = 0.2


def lock_timeout_s(settings: StoreSettings | None) -> float:
    """How long a writer waits for another process's store lock: ``MEDHELM_LOCK_TIMEOUT_S`` if set (the chart
    and compose set it), else ``store.lock_timeout_s``."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is not None and raw.strip():
        try:
            value = float(raw)
        except ValueError:
            raise StoreError(f"{LOCK_TIMEOUT_ENV} must be a number of seconds, got a non-numeric value") from None
        if value < 0:
            raise StoreError(f"{LOCK_TIMEOUT_ENV} must be zero or more seconds")
        return value
    return (settings or StoreSettings()).lock_timeout_s


def _is_lock_conflict(exc: duckdb.Error) -> bool:
    return "Could not set lock" in str(exc) or "Conflicting lock" in str(exc)


# The files DuckDB keeps for a database: the file itself, its WAL, and the WAL's checkpoint and recovery files.
STORE_FILE_SUFFIXES = ("", ".wal", ".wal.checkpoint", ".wal.recovery")
REACQUIRE_WAIT_S = 600.0  # a run that let readers in between its writes waits this long for them to finish


class EncryptedDatabase:
    """One process's handle on an encrypted store file: an in-memory DuckDB engine (OpenSSL loaded, sandboxed to
    the store's own files before any query runs) to which the store is attached only while it is needed.

    Attaching takes DuckDB's file lock (exclusive for a writer, shared for a read-only reader); ``detach`` gives
    it back, so a long-running writer (the runner) can hold the store only for short write transactions and let
    read-only commands (doctor, leaderboard, runs, datasets list, the console) open it in between. Re-attaching
    costs a few milliseconds: the engine, and the extension it loaded, stay.
    """

    def __init__(self, path: Path, key_hex: str, *, read_only: bool, settings: StoreSettings | None) -> None:
        self.path = path
        self.read_only = read_only
        self.settings = settings
        self._key = key_hex
        try:
            self.conn = connect_engine(path, settings)
        except duckdb.Error as exc:
            raise StoreError(f"cannot open the store {path}: {exc}") from None
        try:
            # From here on, no file or network access beyond the store's own files (and its encrypted spill
            # directory), and no way to switch that back.
            files = ", ".join(sql_literal(str(path.with_name(path.name + suffix))) for suffix in STORE_FILE_SUFFIXES)
            self.conn.execute(f"SET allowed_paths = [{files}]")
            self.conn.execute(f"SET allowed_directories = [{sql_literal(str(spill_directory(path)))}]")
            self.conn.execute("SET enable_external_access = false")
            self.conn.execute("SET lock_configuration = true")
        except duckdb.Error as exc:
            self.conn.close()
            raise StoreError(f"cannot open the store {path}: {exc}") from None
        self.attached = False

    def attach(self, *, wait_s: float | None = None) -> None:
        """Attach the store, waiting (polling) while another process holds a conflicting lock, up to ``wait_s``
        (default: the lock timeout); past it the error says who to wait for and how to wait longer."""
        if self.attached:
            return
        limit = lock_timeout_s(self.settings) if wait_s is None else wait_s
        deadline = time.monotonic() + limit
        # Both values quoted in one step: a path (chosen in appliance.yaml) spelling a placeholder must never put
        # the key into the statement's path, where DuckDB's parser error would quote it back.
        read_only = ", READ_ONLY" if self.read_only else ""
        statement = (f"ATTACH {sql_literal(str(self.path))} AS {STORE_ALIAS} "
                     f"(ENCRYPTION_KEY {sql_literal(self._key)}{read_only})")
        while True:
            try:
                self.conn.execute(statement)
                self.conn.execute(f"USE {STORE_ALIAS}")
                self.attached = True
                return
            except duckdb.Error as exc:
                self._detach_quietly()
                if not _is_lock_conflict(exc):
                    # DuckDB's message names the file and the failure (wrong key, corrupt); no data in it.
                    raise StoreError(f"cannot open the store {self.path}: {exc}") from None
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"cannot open the store {self.path}: another medhelm-local process holds it (a run or a "
                        f"registration); waited {limit:.0f}s. Wait for it to finish, or set "
                        f"{LOCK_TIMEOUT_ENV} (or store.lock_timeout_s) to wait longer"
                    ) from None
            time.sleep(_LOCK_POLL_S)

    def detach(self) -> None:
        """Give the store's file lock back (any open transaction must have ended)."""
        if self.attached:
            self.conn.execute("USE memory")
            self.conn.execute(f"DETACH {STORE_ALIAS}")
            self.attached = False

    def _detach_quietly(self) -> None:
        try:
            self.conn.execute("USE memory")
            self.conn.execute(f"DETACH DATABASE IF EXISTS {STORE_ALIAS}")
        except duckdb.Error:
            pass
        self.attached = False

    def close(self) -> None:
        self.attached = False
        self.conn.close()


def open_database(path: Path, key_hex: str, *, read_only: bool = False, settings: StoreSettings | None = None
                  ) -> EncryptedDatabase:
    """The store at ``path`` (created if needed), attached, waiting for another process's lock up to the lock
    timeout."""
    database = EncryptedDatabase(path, key_hex, read_only=read_only, settings=settings)
    try:
        database.attach()
    except BaseException:
        database.close()
        raise
    return database


def open_encrypted(path: Path, key_hex: str, *, read_only: bool = False, settings: StoreSettings | None = None
                   ) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the encrypted database at ``path``; the session cannot reach anything else."""
    return open_database(path, key_hex, read_only=read_only, settings=settings).conn


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
