"""Score rows committed with their outcome (``Outcome.scores``, a run scored as answered) follow the outcome the
store keeps: a second outcome for an answered item adds none, and a retry that replaces an error replaces the
error's rows, in the same transaction."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.records import ChatMessage, InferenceRequest, InferenceResult, Instance, InstanceScore
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.judgments import score_rows
from tests.scoring.helpers import add_run, make_home, register


def _outcome(instance_id: str, text: str | None, value: float | None) -> runs_db.Outcome:
    request = InferenceRequest(benchmark="pubmedqa", instance_id=instance_id,
                               messages=[ChatMessage(role="user", content=f"q {instance_id}")], max_tokens=4)
    result = InferenceResult(text=text, latency_s=0.1) if text is not None else InferenceResult(error="timeout")
    details = {"error": "timeout"} if text is None else {"parsed": True}
    return runs_db.Outcome(request, result, None, [InstanceScore(benchmark="pubmedqa", instance_id=instance_id,
                                                                 metric="exact_match", value=value, details=details)])


def _values(store: Store, run_id: str) -> dict[str, tuple[float | None, dict[str, object]]]:
    return {i: (value, details) for i, _, value, details in score_rows(store, run_id, "pubmedqa")}


def _running_run(store: Store) -> str:
    """A running run of three pubmedqa items, p0 answered (no scores), p1 and p2 not yet."""
    data = [Instance(benchmark="pubmedqa", id=f"p{i}", fields={"question": "q", "context": "c"}, references=["yes"])
            for i in range(3)]
    fingerprint = register(store, "pubmedqa", data)
    run_id = add_run(store, "m", "pubmedqa", fingerprint, data, {"p0": "yes"}, status="running")
    for table in ("responses", "requests"):
        store.conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND instance_id <> 'p0'", [run_id])
    store.conn.execute("DELETE FROM scores WHERE run_id = ?", [run_id])
    return run_id


def test_scores_follow_the_outcome_the_store_keeps(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        run_id = _running_run(store)

        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("p1", "yes", 1.0), _outcome("p2", None, None)],
                                replace_errors=False)
        assert _values(store, run_id) == {"p1": (1.0, {"parsed": True}), "p2": (None, {"error": "timeout"})}

        # A second outcome for answered items (p0 answered without scores, p1 with): its rows are not added.
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("p0", "no", 0.0), _outcome("p1", "no", 0.0)],
                                replace_errors=False)
        assert _values(store, run_id) == {"p1": (1.0, {"parsed": True}), "p2": (None, {"error": "timeout"})}

        # A retry: the error's rows give way to the new answer's; a stored success keeps its own.
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("p2", "yes", 1.0), _outcome("p1", "no", 0.0)],
                                replace_errors=True)
        assert _values(store, run_id) == {"p1": (1.0, {"parsed": True}), "p2": (1.0, {"parsed": True})}
        assert runs_db.unscored(store, run_id, "pubmedqa", "exact_match") == (3, 1)  # p0 answered, never scored


def test_a_commit_round_looks_up_the_kept_outcomes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outcomes ``responses``' key keeps come back from its insert (RETURNING), and only their requests and
    scores are written: ``responses`` is not probed again for each of those tables (about a fifth of a round's
    cost)."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        run_id = _running_run(store)
        statements: list[str] = []
        real = Store.conn

        class Recording:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, sql: str, *args: Any) -> Any:
                statements.append(sql)
                return self._conn.execute(sql, *args)

        monkeypatch.setattr(Store, "conn", property(lambda self: Recording(real.fget(self))))  # type: ignore[attr-defined]
        runs_db.commit_outcomes(store, run_id, "s", 1.0, [_outcome("p0", "no", 0.0), _outcome("p1", "yes", 1.0)],
                                replace_errors=False)
        monkeypatch.undo()
        reads = [s.split(" SELECT")[0] for s in statements if re.search(r"\b(FROM|INTO|JOIN) responses\b", s)]
        assert reads == ["INSERT INTO responses"]
        assert _values(store, run_id) == {"p1": (1.0, {"parsed": True})}  # p0's second outcome adds nothing
        assert store.conn.execute("SELECT instance_id FROM requests WHERE run_id = ? ORDER BY instance_id",
                                  [run_id]).fetchall() == [("p0",), ("p1",)]
