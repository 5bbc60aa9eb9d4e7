"""A run's requests are kept as their SHA-256 only (``request_hash``; ``request`` is NULL): the prompt is rebuilt
from the run's spec and the instance, so a run adds no copy of patient text to the store. Stores created before,
where both columns are NOT NULL and ``request`` holds each request's JSON, still open, keep their rows and take
new outcomes."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.records import Instance
from medhelm_local.store import Store
from tests.scoring.helpers import add_run, make_home, register

NULLABLE = ("SELECT column_name, is_nullable FROM information_schema.columns WHERE table_name = 'requests' "
            "AND column_name IN ('request', 'request_hash') ORDER BY column_name")


def test_a_store_with_the_old_not_null_columns_takes_new_outcomes_as_hashes(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:  # as a store created before: both columns NOT NULL, a request stored whole
        store.conn.execute("DELETE FROM meta WHERE key = 'schema_digest'")  # stores before it had none
        store.conn.execute("ALTER TABLE requests ALTER COLUMN request SET NOT NULL")
        store.conn.execute("ALTER TABLE requests ALTER COLUMN request_hash SET NOT NULL")
        store.conn.execute("INSERT INTO requests VALUES ('run-old', 'pubmedqa', 'p0', '{}', 'ab12')")
        assert store.conn.execute(NULLABLE).fetchall() == [("request", "NO"), ("request_hash", "NO")]
    data = [Instance(benchmark="pubmedqa", id=f"p{i}", fields={"question": "q", "context": "c"},
                     references=["yes"]) for i in range(3)]
    with Store.open(home) as store:
        assert store.conn.execute(NULLABLE).fetchall() == [("request", "YES"), ("request_hash", "YES")]
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, data, {i.id: "yes" for i in data})
        rows = store.conn.execute("SELECT run_id, instance_id, length(request_hash), request FROM requests "
                                  "ORDER BY run_id, instance_id").fetchall()
    assert sorted(rows) == sorted([("run-old", "p0", 4, "{}")] + [(run_id, f"p{i}", 64, None) for i in range(3)])


def test_the_console_shows_a_request_stored_whole_before_as_stored(tmp_path: Path) -> None:
    from medhelm_local.webconsole.data import instances as console_instances

    home = make_home(tmp_path / "home")
    data = [Instance(benchmark="pubmedqa", id=f"p{i}", fields={"question": f"q{i}", "context": "c"},
                     references=["yes"]) for i in range(2)]
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, data, {i.id: "yes" for i in data})
        old = '{"messages": [{"role": "user", "content": "the prompt as stored before"}]}'
        store.conn.execute("UPDATE requests SET request = ?, request_hash = NULL WHERE run_id = ? "
                           "AND instance_id = 'p0'", [old, run_id])
    rows = {r.instance_id: r for r in console_instances(home, run_id, "pubmedqa")[0]}
    assert rows["p0"].prompt_source == "stored"
    assert rows["p0"].messages == [{"role": "user", "content": "the prompt as stored before"}]
    assert rows["p1"].prompt_source == "rebuilt" and "q1" in rows["p1"].messages[-1]["content"]
