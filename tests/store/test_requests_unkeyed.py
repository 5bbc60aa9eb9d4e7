"""``requests`` has no primary key (each checkpoint of a keyed table of 3 KB rows cost time growing with the table:
bench/checkpoint_cost.py). One request per item is still kept: it is written only with the item's first stored
outcome (or a retry replacing an error), and a shard merged twice adds nothing. A store created with the key loses
it on its next opening for writing, its rows kept."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.records import ChatMessage, InferenceRequest, InferenceResult, Instance, Truncated
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from tests.scoring.helpers import add_run, make_home, register

KEYED = ("SELECT count(*) FROM duckdb_constraints() WHERE database_name = current_database() "
         "AND table_name = 'requests' AND constraint_type = 'PRIMARY KEY'")


def _outcome(content: str, text: str | None) -> runs_db.Outcome:
    request = InferenceRequest(benchmark="pubmedqa", instance_id="p0", max_tokens=4,
                               messages=[ChatMessage(role="user", content=content)])
    result = InferenceResult(text=text, latency_s=0.1) if text is not None else InferenceResult(error="timeout")
    return runs_db.Outcome(request, result)


def _rows(store: Store, run_id: str) -> list[tuple[str, str]]:
    """(instance id, which request: its prompt, found by the hash the store keeps) of each request row."""
    known = {_outcome(c, None).request.digest(): c for c in ("again", "retried", "later")}
    return [(r[0], known.get(r[1], "first")) for r in store.conn.execute(
        "SELECT instance_id, request_hash FROM requests WHERE run_id = ? ORDER BY 1", [run_id]).fetchall()]


DATA = [Instance(benchmark="pubmedqa", id="p0", fields={"question": "q", "context": "c"}, references=["yes"])]


def test_a_store_created_with_the_key_loses_it_and_keeps_its_requests(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:  # as created before: the table with its primary key, one request stored
        store.conn.execute("DELETE FROM meta WHERE key = 'schema_digest'")  # stores before it had none
        store.conn.execute("DROP TABLE requests")
        store.conn.execute("CREATE TABLE requests (run_id VARCHAR NOT NULL, benchmark VARCHAR NOT NULL, "
                           "instance_id VARCHAR NOT NULL, request JSON NOT NULL, request_hash VARCHAR NOT NULL, "
                           "PRIMARY KEY (run_id, benchmark, instance_id))")
        store.conn.execute("INSERT INTO requests VALUES ('run-old', 'pubmedqa', 'p0', '{\"a\": 1}', 'ab12')")
        assert store.conn.execute(KEYED).fetchone() == (1,)
    with Store.open(home, read_only=True) as store:  # a reader reads it as it is
        assert store.conn.execute("SELECT count(*) FROM requests").fetchone() == (1,)
    with Store.open(home) as store:
        assert store.conn.execute(KEYED).fetchone() == (0,)
        assert store.conn.execute("SELECT run_id, instance_id, request, request_hash FROM requests").fetchall() == [
            ("run-old", "p0", '{"a": 1}', "ab12")]
        fingerprint = register(store, "pubmedqa", DATA)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, DATA, {"p0": "yes"})
        assert len(_rows(store, run_id)) == 1
    with Store.open(home) as store:  # opened again: nothing to do, nothing lost
        assert store.conn.execute("SELECT count(*) FROM requests").fetchone() == (2,)


def test_one_request_per_item_without_the_key(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", DATA)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, DATA, {"p0": None})  # an error, with its request
        (first,) = _rows(store, run_id)
        # The same item committed again (not a retry): the first outcome and its request stay, nothing is added.
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("again", "yes")], replace_errors=False)
        assert _rows(store, run_id) == [first]
        # A retry replaces the error and its request; a later retry of a success changes nothing.
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("retried", "yes")], replace_errors=True)
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("later", "no")], replace_errors=True)
        assert _rows(store, run_id) == [("p0", "retried")]
        assert store.conn.execute("SELECT output FROM responses WHERE run_id = ?", [run_id]).fetchall() == [("yes",)]


def test_copying_requests_into_a_store_twice_adds_them_once(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", DATA)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, DATA, {"p0": "yes"})
    with Store.open(home, read_only=True) as source, Store.open_file(home, tmp_path / "other.duckdb") as target:
        copies = [runs_db.copy_rows(source, target, "requests", "run_id = ?", [run_id],
                                    key=("run_id", "benchmark", "instance_id"))
                  for _ in range(2)]  # a merge repeated after a crash
        assert copies == [runs_db.Copied(offered=1, added=1), runs_db.Copied(offered=1, added=0)]
        assert target.conn.execute("SELECT count(*) FROM requests").fetchone() == (1,)


def test_an_outcome_dropped_as_a_second_one_for_its_item_is_not_counted_nor_its_cut_recorded(tmp_path: Path
                                                                                              ) -> None:
    """A second outcome offered for an item is dropped (the key keeps the first), but the session's `responses` and
    `errors` counted it, and its truncation record replaced the kept request's (INSERT OR REPLACE): `runs show`
    counted answers the run lacks, and the cut reported was not the one of the request whose answer is scored. They
    count and record the outcomes kept now; tokens and request time, spent either way, count every one sent."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", DATA)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, DATA, {"p0": "yes"})
        runs_db.start_session(store, run_id, "s2", mode="resume", shard=None, endpoints=[])
        cut = Truncated(field="context", field_chars=900, removed_chars=400, removed_tokens=100, prompt_tokens=50)
        dropped = runs_db.Outcome(_outcome("again", None).request,
                                  InferenceResult(error="timeout", latency_s=0.5, prompt_tokens=7), truncated=cut)
        runs_db.commit_outcomes(store, run_id, "s2", 1.0, [dropped], replace_errors=False)
        session = next(s for s in runs_db.sessions(store, run_id) if s["session_id"] == "s2")
        assert (session["responses"], session["errors"]) == (0, 0)
        assert (session["prompt_tokens"], session["request_s"]) == (7, 0.5)
        assert store.conn.execute("SELECT count(*) FROM runner_truncations WHERE run_id = ?", [run_id]
                                  ).fetchone() == (0,)
