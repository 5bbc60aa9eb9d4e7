"""Upgrading in place: the home's store as the previous release left it (``previous_release``) is opened by this
code. The first command after the upgrade may be a reader (``runs show``, the console): the store is migrated
before it reads, so every query finds the tables it expects; ``doctor`` (a health check, never the write lock)
reads it as it is and says it is not migrated yet.
"""

from __future__ import annotations

from pathlib import Path

from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.webconsole import data as console_data
from tests.compliance.inproc import InProcessCli
from tests.scoring.helpers import make_home
from tests.store import previous_release


def _current_columns(tmp_path: Path) -> dict[str, list[tuple[str, str, bool]]]:
    """The tables and columns of a store this code creates."""
    with Store.open(make_home(tmp_path / "fresh")) as store:
        return previous_release.columns(store.conn)


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
