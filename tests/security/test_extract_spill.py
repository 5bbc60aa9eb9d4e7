"""DuckDB connections that read an extract (MEDS Parquet, a DuckDB extract, OMOP) never spill it to disk.

Before the fix, above its memory limit (80% of the pod's memory) DuckDB spilled the extract's rows, unencrypted,
into ``.tmp`` in the working directory (the container's is the appliance's home), and a crash left them there:
``datasets register ehrshot`` on a large MEDS folder wrote patient text in plaintext into ``$MEDHELM_HOME/.tmp``."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from medhelm_local.loaders import sql_sandbox

MARKER = b"PHIMARKER-12345"


def test_sealed_connections_have_no_spill_directory(tmp_path: Path) -> None:
    extract = tmp_path / "extract.duckdb"
    duckdb.connect(str(extract)).close()
    (tmp_path / "meds").mkdir()
    for con in (sql_sandbox.sealed_connect(None), sql_sandbox.sealed_connect(extract),
                sql_sandbox.folder_reader(tmp_path / "meds")):
        try:
            assert con.execute("select current_setting('temp_directory')").fetchone() == ("",)
        finally:
            con.close()


def test_a_query_too_large_for_memory_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "meds" / "data"
    data.mkdir(parents=True)
    with duckdb.connect() as writer:
        writer.execute(f"copy (select i as subject_id, 'PHIMARKER-12345 note ' || i as text_value "
                       f"from range(3000000) r(i)) to '{data / 'events.parquet'}'")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    real_connect = duckdb.connect

    def small_memory(database: str = ":memory:", read_only: bool = False, config: dict[str, Any] | None = None,
                     **kwargs: Any) -> duckdb.DuckDBPyConnection:  # a pod with little memory
        return real_connect(database, read_only,
                            config={**(config or {}), "memory_limit": "120MB", "threads": 1}, **kwargs)

    monkeypatch.setattr(sql_sandbox.duckdb, "connect", small_memory)
    con = sql_sandbox.folder_reader(tmp_path / "meds")
    leaked: list[str] = []
    done = threading.Event()

    def watch() -> None:  # DuckDB deletes its spill files when the query ends: look while it runs
        while not done.is_set():
            for file in tmp_path.rglob("*"):
                try:
                    if file.is_file() and file.suffix != ".parquet" and MARKER in file.read_bytes():
                        leaked.append(str(file.relative_to(tmp_path)))
                except OSError:
                    pass
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        con.execute(f"select subject_id, text_value from read_parquet('{data / '*.parquet'}') "
                    "order by md5(text_value) limit 1 offset 2500000").fetchall()
    except duckdb.OutOfMemoryException:
        pass  # without a spill directory, a query that does not fit fails instead
    finally:
        done.set()
        watcher.join()
        con.close()
    assert leaked == []
    assert list(cwd.iterdir()) == []
