"""Fault injection: every instance is answered exactly once; failures are recorded, never scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.analysis.cost import run_cost
from medhelm_local.application.evaluation import Mode, Selection, evaluate
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.logs import configure_logging
from medhelm_local.runner.fitting import sent_request
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults, hash_responder
from tests.runner.helpers import app, make_home, outcomes, quiet, register, scores, synthetic_instances

FAULTS = Faults(http_5xx=0.10, timeout=0.05, drop=0.02, invalid_json=0.01, hang_s=3.0)


def test_fault_injection_every_instance_answered_exactly_once(tmp_path: Path) -> None:
    responder = hash_responder()
    with FakeOpenAIServer(responder=responder, latency_s=0.005, faults=FAULTS, seed=7, record_bodies=True) as server:
        home = make_home(tmp_path / "home", [server.base_url], timeout_s=0.5, max_retries=12)
        instances = synthetic_instances(200, contexts=20)
        register(home, instances)
        outcome = evaluate(app(home), quiet(backoff_base_s=0.02))
        seen = server.stats()
    rows = outcomes(home, outcome.run.run_id)
    assert sorted(r[1] for r in rows) == sorted(i.id for i in instances)  # one outcome per instance, no extra
    assert all(r[3] is None for r in rows), "every request eventually succeeded"
    # Each output is the answer to its own prompt, not to another instance's; the store keeps each request's hash
    # only (no copy of the prompt), and the prompt rebuilt from the spec and the instance is the one sent.
    with Store.open(home, read_only=True) as store:
        stored = store.conn.execute("SELECT instance_id, request, request_hash FROM requests WHERE run_id = ?",
                                    [outcome.run.run_id]).fetchall()
    by_id = {r[1]: r[2] for r in rows}
    spec = SpecRegistry(home.root).get("pubmedqa")
    instance_of = {i.id: i for i in instances}
    assert len(stored) == len(instances)
    for instance_id, request, digest in stored:
        assert request is None
        sent = sent_request(spec, instance_of[instance_id], outcome.run.seed, None)
        assert sent.digest() == digest
        assert by_id[instance_id] == responder([m.model_dump() for m in sent.messages])
    categories = outcome.report.endpoints[0]["failure_categories"] if outcome.report else {}
    assert {"http_503", "timeout", "connection_dropped", "invalid_json"} <= set(categories)
    assert seen["requests_seen"] > 200 and seen["completions_sent"] >= 200
    assert outcome.run.status == "finished" and outcome.errors == {}
    (result,) = outcome.results
    assert result.n == 200 and result.n_failed == 0


def test_exhausted_retries_are_recorded_then_retry_errors_replaces_them(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder(), faults=Faults(http_5xx=1.0)) as broken:
        home = make_home(tmp_path / "home", [broken.base_url], max_retries=1)
        register(home, synthetic_instances(30))
        first = evaluate(app(home), quiet(backoff_base_s=0.01))
    run_id = first.run.run_id
    assert first.errors == {"pubmedqa": {"http_503": 30}}
    (result,) = first.results
    assert result.n == 0 and result.n_failed == 30 and result.score is None  # never a default score
    assert all(value is None for _, _, value in scores(home, run_id))

    with FakeOpenAIServer(responder=hash_responder()) as healthy:
        config = home.config.model_copy(deep=True)
        config.models[-1].base_urls = [healthy.base_url]
        home.save_config(config)
        again = evaluate(app(home), quiet(Selection(), Mode.retry_errors(run_id)))
        assert healthy.stats()["requests_seen"] == 30
    assert again.run.run_id == run_id and again.errors == {}
    rows = outcomes(home, run_id)
    assert len(rows) == 30 and all(r[2] is not None and r[3] is None for r in rows)
    with Store.open(home, read_only=True) as store:
        history = store.conn.execute("SELECT count(*), min(error) FROM runner_error_history WHERE run_id = ?",
                                     [run_id]).fetchone()
        assert history == (30, "http_503")  # the replaced failures stay on record
        cost = run_cost(store, run_id, home.config)
    assert cost.method == "none" and cost.total is None and cost.responses == 30


def test_a_reply_the_store_cannot_keep_is_a_failed_request_never_the_end_of_the_run(tmp_path: Path) -> None:
    """A completion whose text holds an unpaired surrogate escape (``"\\ud800"``: no character, and no UTF-8) is
    ``invalid_json``, counted and retried like any broken reply; the other answers are kept and scored. It reached
    the group commit, whose batch DuckDB refused ("no low surrogate", quoting the batch's outputs): the run ended
    as an internal error with that round's answers unsaved, and every resume met the same reply again."""
    answer = hash_responder()

    def respond(messages: list[dict[str, object]]) -> str:
        text = answer(messages)
        return "yes \ud800" if text == "maybe" else text

    with FakeOpenAIServer(responder=respond) as server:
        home = make_home(tmp_path / "home", [server.base_url], max_retries=1)
        register(home, synthetic_instances(30))
        outcome = evaluate(app(home), quiet(backoff_base_s=0.01))
    rows = outcomes(home, outcome.run.run_id)
    broken = [r for r in rows if r[3] is not None]
    assert outcome.run.status == "finished" and len(rows) == 30
    assert broken and {r[3] for r in broken} == {"invalid_json"} and all(r[2] is None for r in broken)
    assert outcome.errors == {"pubmedqa": {"invalid_json": len(broken)}}
    (result,) = outcome.results
    assert result.n == 30 - len(broken) and result.n_failed == len(broken)  # counted, never scored 0


def test_answers_from_another_model_behind_a_router_are_recorded_failures_never_scored(tmp_path: Path) -> None:
    """A router in front of the server sends a share of the requests to another model, whose replies say so in
    ``model``: each is a failed request (``model_mismatch``, sent once), counted in the run's summary and left out
    of the score; `run --retry-errors` re-sends them once the router is fixed. They were scored as the model's."""
    with FakeOpenAIServer(responder=hash_responder(), faults=Faults(wrong_model=0.3)) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(50))
        outcome = evaluate(app(home), quiet(backoff_base_s=0.01))
        assert server.stats()["requests_seen"] == 50  # never retried
        run_id = outcome.run.run_id
        misrouted = [r for r in outcomes(home, run_id) if r[3] is not None]
        assert 5 <= len(misrouted) <= 25 and {(r[2], r[3]) for r in misrouted} == {(None, "model_mismatch")}
        assert outcome.errors == {"pubmedqa": {"model_mismatch": len(misrouted)}}
        (result,) = outcome.results
        assert (result.n, result.n_failed) == (50 - len(misrouted), len(misrouted))
        failed_ids = {r[1] for r in misrouted}
        assert {v for _, i, v in scores(home, run_id) if i in failed_ids} <= {None}  # never a score
        assert outcome.report is not None and outcome.report.errors == len(misrouted)

        server.faults.wrong_model = 0.0  # the router fixed
        retried = evaluate(app(home), quiet(Selection(), Mode.retry_errors(run_id)))
    assert retried.errors == {} and [(r.n, r.n_failed) for r in retried.results] == [(50, 0)]


def test_a_server_that_names_its_model_otherwise_is_scored_under_reply_model(tmp_path: Path) -> None:
    """A server that names the model it loaded whatever it is asked (a gateway adding a version): with the
    endpoint's ``reply_model`` set to that name its answers are scored; a reply naming any third model is still
    ``model_mismatch``. Without it, every answer was a failed request, with no way to say the name is expected."""
    with FakeOpenAIServer(responder=hash_responder(), faults=Faults(wrong_model=1.0, misrouted_to="fake-v2")) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"reply_model": "fake-v2"})
        register(home, synthetic_instances(10))
        outcome = evaluate(app(home), quiet())
        assert outcome.errors == {} and [(r.n, r.n_failed) for r in outcome.results] == [(10, 0)]

        server.faults.misrouted_to = "other-model"
        second = evaluate(app(home), quiet())
    assert second.errors == {"pubmedqa": {"model_mismatch": 10}}


def test_the_model_mismatch_warning_names_no_model_appliance_yaml_does_not(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Neither a name the server's /v1/models lists nor one only a reply carries is logged: both are the server's
    own text, after it saw the prompts (its /v1/models listing a name the replies carry is no proof either)."""
    phi = "Doe_Jane_MRN00123456"

    def mismatch_warnings() -> list[dict[str, object]]:
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
        return [line for line in lines if line.get("event") == "inference.model_mismatch"]

    configure_logging("WARNING", json_lines=True, force=True)
    try:
        with FakeOpenAIServer(responder=hash_responder(), model_id="loaded-model",
                              faults=Faults(wrong_model=1.0, misrouted_to="loaded-model")) as server:
            home = make_home(tmp_path / "home", [server.base_url], served_model="asked-model")
            register(home, synthetic_instances(3))
            capsys.readouterr()
            first = evaluate(app(home), quiet())
            (listed,) = mismatch_warnings()
            server.faults.misrouted_to = phi
            evaluate(app(home), quiet(Selection(), Mode.retry_errors(first.run.run_id)))
            (unlisted,) = mismatch_warnings()
    finally:
        configure_logging(force=True)
    assert (listed["replied_model"], listed["replied_model_known"]) == (None, False)
    assert unlisted["replied_model_known"] is False and "Jane" not in json.dumps(unlisted)


def test_retry_errors_with_nothing_failed_sends_nothing(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(10))
        first = evaluate(app(home), quiet())
        evaluate(app(home), quiet(Selection(), Mode.retry_errors(first.run.run_id)))
        assert server.stats()["requests_seen"] == 10


def test_an_exception_in_a_request_task_fails_the_run_it_is_never_dropped(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A send task that raises (a bug, a reply the client could not turn into a result) after the last page was
    read must end the run as failed; it was dropped, and the run 'finished' with its items neither answered nor
    counted as failed."""
    from medhelm_local.inference.client import ChatClient

    async def broken(self: ChatClient, request: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected")

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(3))
        monkeypatch.setattr(ChatClient, "complete", broken)
        with pytest.raises(RuntimeError):
            evaluate(app(home), quiet())
    with Store.open(home, read_only=True) as store:
        row = store.conn.execute("SELECT status FROM runs").fetchone()
    assert row is not None
    (status,) = row
    assert status == "failed"
