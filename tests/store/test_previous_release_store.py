"""Upgrading in place, and rolling back: the home's store as the previous release left it (``previous_release``)
is opened by this code, and after this code migrated it, the previous release still writes it.

* The migration changes no table the previous release had (it inserts by position: a column added to one of its
  tables breaks every insert it makes after a rollback); what is new goes into new tables.
* The first command after the upgrade may be a reader (``runs show``, the console): the store is migrated before
  it reads, so every query finds the tables it expects; ``doctor`` (a health check, never the write lock) reads
  it as it is and says it is not migrated yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.store import utcnow
from medhelm_local.webconsole import data as console_data
from tests.compliance.conftest import evaluated_home, request_export, run_json
from tests.compliance.inproc import InProcessCli
from tests.scoring.helpers import make_home
from tests.store import previous_release


def _current_columns(tmp_path: Path) -> dict[str, list[tuple[str, str, bool]]]:
    """The tables and columns of a store this code creates."""
    with Store.open(make_home(tmp_path / "fresh")) as store:
        return previous_release.columns(store.conn)


def _previous_session(store: Store, run_id: str, session_id: str) -> None:
    """A session as the previous release records it, after a rollback."""
    store.conn.execute(previous_release.SESSION_INSERT, [run_id, session_id, "resume", None, utcnow(), json.dumps([])])


def test_the_migration_changes_no_table_of_the_previous_release_and_it_still_writes_them(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    previous_release.create_store(home)
    current = _current_columns(tmp_path)
    with Store.open(home) as store:
        migrated = previous_release.columns(store.conn)
        assert migrated == current
        released = previous_release.release_columns()
        assert {table: migrated[table] for table in released} == released
        _previous_session(store, "run-1", "rolled-back")
        runs_db.start_session(
            store, "run-1", "upgraded", mode="resume", shard=None, endpoints=[], sending={"concurrency": 3}
        )
        sent_with = {s["session_id"]: s["sending"] for s in runs_db.sessions(store, "run-1")}
        # A dataset version the previous release registers after a rollback: listed, its reading not yet digested.
        store.conn.execute(previous_release.DATASET_INSERT,
                           ["pubmedqa", "f-rolled-back", "s" * 64, utcnow(), 0, json.dumps({}), "x.json"])
        (rolled_back,) = store.list_datasets()
        assert (rolled_back.fingerprint, rolled_back.instances_sha256) == ("f-rolled-back", None)
        store.conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_digest'", [previous_release.schema_digest()])
    assert sent_with == {"rolled-back": None, "upgraded": {"concurrency": 3}}
    with Store.open(home) as store:  # upgraded again: the migration digests it
        (digested,) = store.list_datasets()
        assert digested.instances_sha256 == store.digest_instances([])


def test_a_reader_first_after_the_upgrade_finds_the_store_migrated(tmp_path: Path) -> None:
    current = _current_columns(tmp_path)
    for reader in ("cli", "console"):
        home = make_home(tmp_path / reader)
        previous_release.create_store(home)
        if reader == "cli":
            with Store.open(home, read_only=True) as store:
                assert previous_release.columns(store.conn) == current and store.schema_is_current()
                assert runs_db.run_sending(store, "run-1") is None and runs_db.sessions(store, "run-1") == []
        else:
            with console_data.reading(home) as store:
                assert previous_release.columns(store.conn) == current and store.schema_is_current()


def test_doctor_says_the_store_is_not_migrated_yet_and_leaves_it_so(tmp_path: Path) -> None:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    previous_release.create_store(Home(cli.home))
    result = cli("doctor", "--json")
    assert result.code == 0, result.stderr
    (store_check,) = [c for c in result.json()["checks"] if c["check"] == "store"]
    assert store_check["status"] == "ok" and "last migrated by another release" in store_check["detail"]
    with Store.open_file(Home(cli.home), Home(cli.home).store_path, read_only=True, migrate=False) as store:
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_digest'").fetchone() == (
            previous_release.schema_digest(),
        )
    assert cli("runs", "list").code == 0
    result = cli("doctor", "--json")
    (store_check,) = [c for c in result.json()["checks"] if c["check"] == "store"]
    assert "another release" not in store_check["detail"]


def _hospice_run(cli: InProcessCli, *, seed: int) -> dict[str, Any]:
    """A run of 12 hospice referrals by the evaluated model."""
    return run_json(cli, "run", "--model", "eval-model", "--benchmarks", "hospice_referral", "--max-instances", "12",
                    "--seed", str(seed))


def test_an_upgraded_home_answers_every_command_and_the_previous_release_still_writes_it(tmp_path: Path) -> None:
    with evaluated_home(tmp_path) as evaluated:
        cli, finished = evaluated.cli, evaluated.run_id
        assert request_export(cli, finished)["status"] == "ready"
        unfinished = _hospice_run(cli, seed=5)["run_id"]
        home = Home(cli.home)
        with Store.open(home) as store:  # interrupted half-way, as the previous release left it
            store.conn.execute("DELETE FROM scores WHERE run_id = ?", [unfinished])
            for table in ("responses", "requests"):
                store.conn.execute(
                    f"DELETE FROM {table} WHERE run_id = ? AND instance_id IN (SELECT instance_id "
                    "FROM run_items WHERE run_id = ? AND position >= 6)",
                    [unfinished, unfinished],
                )
            store.set_run_status(unfinished, "interrupted")
            previous_release.downgrade(store.conn)

        for command in (
            ["leaderboard"],
            ["runs", "list"],
            ["runs", "show", finished],
            ["runs", "show", unfinished],
            ["datasets", "list"],
            ["audit", "verify"],
            ["audit", "report"],
            ["export", "list"],
            ["jury", "failures", "--run", finished],
        ):
            result = cli(*command, "--json")
            assert result.code == 0, (command, result.stderr)
        shown = run_json(cli, "runs", "show", unfinished)
        assert (shown["status"], shown["answered"], shown["sending"]) == ("interrupted", 6, None)

        resumed = run_json(cli, "run", "--resume", unfinished)
        assert resumed["status"] == "finished"
        assert _hospice_run(cli, seed=6)["status"] == "finished"
        assert request_export(cli, unfinished)["status"] == "ready"

        with Store.open(home) as store:  # rolled back: the previous release resumes the run
            _previous_session(store, unfinished, "rolled-back")
        sessions = run_json(cli, "runs", "show", unfinished)["sessions"]
        assert [s["sending"] is None for s in sessions] == [True, False, True]
