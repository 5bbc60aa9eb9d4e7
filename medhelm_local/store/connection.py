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


def open_encrypted(path: Path, key_hex: str, *, read_only: bool = False, settings: StoreSettings | None = None
                   ) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the encrypted database at ``path``; the session cannot reach anything else.

    Another process holding the store (a run, a registration) is waited for, polling, up to the lock timeout;
    past it the error says who to wait for and how to wait longer."""
    deadline = time.monotonic() + lock_timeout_s(settings)
    while True:
        try:
            return _open_once(path, key_hex, read_only=read_only, settings=settings)
        except _LockBusy as busy:
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"cannot open the store {path}: another medhelm-local process holds it (a run or a "
                    f"registration); waited {lock_timeout_s(settings):.0f}s. Wait for it to finish, or set "
                    f"{LOCK_TIMEOUT_ENV} (or store.lock_timeout_s) to wait longer"
                ) from busy.__cause__
            time.sleep(_LOCK_POLL_S)


class _LockBusy(Exception):
    pass


def _open_once(path: Path, key_hex: str, *, read_only: bool, settings: StoreSettings | None
               ) -> duckdb.DuckDBPyConnection:
    try:
        conn = connect_engine(path, settings)
    except duckdb.Error as exc:
        raise StoreError(f"cannot open the store {path}: {exc}") from None
    try:
        options = "ENCRYPTION_KEY $key" + (", READ_ONLY" if read_only else "")
        conn.execute(f"ATTACH $path AS {STORE_ALIAS} ({options})".replace("$path", sql_literal(str(path)))
                     .replace("$key", sql_literal(key_hex)))
        conn.execute(f"USE {STORE_ALIAS}")
        # From here on, no file or network access beyond the attached database.
        conn.execute("SET enable_external_access = false")
        conn.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        conn.close()
        if _is_lock_conflict(exc):
            raise _LockBusy() from exc
        # DuckDB's message names the file and the failure (wrong key, locked, corrupt); no data in it.
        raise StoreError(f"cannot open the store {path}: {exc}") from None
    return conn


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
