"""A retried item keeps the request the retry sent, not the failed attempt's (which may differ: a prompt cut to
fit the model's context on the retry), so the instance view never shows a prompt the model did not see."""

from __future__ import annotations

from pathlib import Path

from medhelm_local.records import ChatMessage, InferenceRequest, InferenceResult, Instance, Truncated
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from tests.scoring.helpers import add_run, make_home, register


def _request(content: str) -> InferenceRequest:
    return InferenceRequest(benchmark="pubmedqa", instance_id="p0",
                            messages=[ChatMessage(role="user", content=content)], max_tokens=4)


SENT = ["the prompt the retry sent, cut to fit", "a later attempt"]


def _stored(store: Store, run_id: str) -> tuple[str, int]:
    """Which request the store holds for the item (by its hash: no copy of the prompt is kept), and its cuts."""
    row = store.conn.execute(
        "SELECT request_hash FROM requests WHERE run_id = ? AND instance_id = 'p0'", [run_id]).fetchone()
    count = store.conn.execute("SELECT count(*) FROM runner_truncations WHERE run_id = ?", [run_id]).fetchone()
    assert row is not None and count is not None
    (digest,), cuts = row, count[0]
    return next((content for content in SENT if _request(content).digest() == digest), "the first attempt's"), cuts


def test_a_retry_replaces_the_failed_attempts_request_and_a_success_keeps_its_own(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    data = [Instance(benchmark="pubmedqa", id="p0", fields={"question": "q", "context": "c"}, references=["yes"])]
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "m", "pubmedqa", fingerprint, data, {"p0": None})  # the first attempt failed
        first, _ = _stored(store, run_id)
        cut = Truncated(field="context", field_chars=1, removed_chars=1, removed_tokens=1, prompt_tokens=3)
        retried = runs_db.Outcome(_request("the prompt the retry sent, cut to fit"),
                                  InferenceResult(text="yes", latency_s=0.1), cut)
        runs_db.commit_outcomes(store, run_id, "test", 1.0, [retried], replace_errors=True)
        assert _stored(store, run_id) == ("the prompt the retry sent, cut to fit", 1)
        assert first != "the prompt the retry sent, cut to fit"
        again = runs_db.Outcome(_request("a later attempt"), InferenceResult(text="no", latency_s=0.1))
        runs_db.commit_outcomes(store, run_id, "test", 1.0, [again], replace_errors=True)  # a success stays
        assert _stored(store, run_id) == ("the prompt the retry sent, cut to fit", 1)
