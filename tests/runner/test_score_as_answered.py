"""A new run scores its answers as they are committed, where no judge is needed (``ScoreAsAnswered``); the run's
last step then only checks and aggregates them. The rows must be exactly those full scoring writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medhelm_local.analysis.aggregate import benchmark_score
from medhelm_local.application import evaluation
from medhelm_local.application.datasets import register_dataset
from medhelm_local.application.evaluation import Mode, Selection, evaluate
from medhelm_local.records import Instance
from medhelm_local.scoring import registry
from medhelm_local.scoring.engine import ScoreAsAnswered, score_benchmark
from medhelm_local.store import Store
from medhelm_local.store.judgments import score_rows
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import app, make_home, outcomes, quiet

# Answers of every kind the two benchmarks' metrics meet: right and wrong labels, numbers, prose, nothing usable.
ANSWERS = ("yes", "no", "maybe", "42", "The answer is 3.5 mL/min", "I cannot tell from this abstract.")
FILES = {"pubmedqa": "pubmedqa/ori_pqal.json", "medcalc_bench": "medcalc_bench/test_data.csv"}


def _home(tmp_path: Path, public_data: Path, base_url: str) -> Any:
    home = make_home(tmp_path / "home", [base_url])
    for benchmark, rel in FILES.items():
        register_dataset(app(home), benchmark, public_data / rel)
    return home


def _selection(n: int = 80) -> Any:
    return quiet(Selection(model="fake", benchmarks=list(FILES), max_instances=n))


def _spy_full_scoring(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    scored_whole: list[str] = []

    def spy(store: Store, specs: Any, run_id: str, benchmark: str, **kwargs: Any) -> Any:
        scored_whole.append(benchmark)
        return score_benchmark(store, specs, run_id, benchmark, **kwargs)

    monkeypatch.setattr(evaluation, "score_benchmark", spy)
    return scored_whole


def test_a_new_run_writes_the_rows_full_scoring_writes_and_is_not_scored_again(
        tmp_path: Path, public_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scored_whole = _spy_full_scoring(monkeypatch)
    with FakeOpenAIServer(responder=hash_responder(ANSWERS)) as server:
        home = _home(tmp_path, public_data, server.base_url)
        outcome = evaluate(app(home), _selection())
    assert scored_whole == [], "every benchmark was scored as its answers came"
    assert outcome.report is not None and outcome.report.scored == {"pubmedqa": 80, "medcalc_bench": 80}
    run_id = outcome.run.run_id
    app_ctx = app(home)
    with Store.open(home) as store:
        for result in outcome.results:
            as_answered = score_rows(store, run_id, result.benchmark)
            assert len([r for r in as_answered if r[1] == result.metric]) == 80
            score_benchmark(store, app_ctx.specs, run_id, result.benchmark)  # the full pass, for comparison
            assert score_rows(store, run_id, result.benchmark) == as_answered
            again = benchmark_score(store, app_ctx.specs, run_id, outcome.run.model, result.benchmark)
            assert again == result
    assert {r.benchmark: r.n for r in outcome.results} == {"pubmedqa": 80, "medcalc_bench": 80}
    assert any(0 < (r.score or 0) < 1 for r in outcome.results), "the answers score some right, some wrong"


def test_a_resumed_run_is_scored_whole_at_the_end(tmp_path: Path, public_data: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer(responder=hash_responder(ANSWERS)) as server:
        home = _home(tmp_path, public_data, server.base_url)
        first = evaluate(app(home), quiet(Selection(model="fake", benchmarks=list(FILES), max_instances=20)))
        run_id = first.run.run_id
        with Store.open(home) as store:  # as if killed before the last round of answers was committed
            last = [r[0] for r in store.conn.execute(
                "SELECT instance_id FROM responses WHERE run_id = ? ORDER BY instance_id LIMIT 5", [run_id]).fetchall()]
            for table in ("responses", "requests", "scores"):
                store.conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND list_contains(?, instance_id)",
                                   [run_id, last])
            store.set_run_status(run_id, "interrupted")
        scored_whole = _spy_full_scoring(monkeypatch)
        resumed = evaluate(app(home), quiet(Selection(), Mode.from_flags(resume=run_id)))
    assert resumed.report is not None and resumed.report.scored == {}
    assert sorted(scored_whole) == sorted(FILES)
    assert {r.benchmark: r.n for r in resumed.results} == {"pubmedqa": 20, "medcalc_bench": 20}


def test_a_scorer_that_raises_leaves_its_benchmark_to_the_end_and_loses_no_answer(
        tmp_path: Path, public_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = registry.scorer_for("exact_match")
    assert scorer is not None
    original = scorer.fn  # type: ignore[attr-defined]
    victim: list[str] = []

    def breaks_once(spec: Any, instance: Instance, output: str) -> Any:
        if not victim:
            victim.append(instance.id)
        if instance.id == victim[0]:
            raise RuntimeError("a scorer bug")
        return original(spec, instance, output)

    monkeypatch.setattr(scorer, "fn", breaks_once)
    with FakeOpenAIServer(responder=hash_responder(ANSWERS)) as server:
        home = _home(tmp_path, public_data, server.base_url)
        with pytest.raises(RuntimeError, match="a scorer bug"):  # raised by the last step, as without this path
            evaluate(app(home), _selection(30))
    with Store.open(home, read_only=True) as store:
        (run,) = store.list_runs()
    assert run.status == "failed"
    assert len(outcomes(home, run.run_id)) == 60, "every answer was committed"


@pytest.mark.parametrize("benchmark", [
    "aci_bench",  # the jury: judge models
    "ehrsql",  # runs the predicted SQL on the database, up to seconds per answer
    "mimic_iv_billing",  # loads the ICD-10-CM tables on first use
])
def test_slow_or_judged_metrics_are_scored_at_the_end_not_in_the_send_loop(benchmark: str) -> None:
    from medhelm_local.benchmarks.registry import shipped_spec

    scoring = ScoreAsAnswered({benchmark: shipped_spec(benchmark)})
    instance = Instance(benchmark=benchmark, id="1", fields={"text": "x"}, references=["a"], label="a",
                        meta={"db_path": "/nonexistent.db"})
    assert scoring.rows(benchmark, instance, "a", None) == []
    assert scoring.scored() == {}


@pytest.mark.parametrize("benchmark", ["pubmedqa", "medqa", "medcalc_bench", "medec"])
def test_quick_metrics_are_scored_as_answered(benchmark: str) -> None:
    from medhelm_local.benchmarks.registry import shipped_spec

    spec = shipped_spec(benchmark)
    scoring = ScoreAsAnswered({benchmark: spec})
    instance = Instance(benchmark=benchmark, id="1", fields={}, references=["yes"], label="yes",
                        meta={"lower_limit": "1", "upper_limit": "2", "error_flag": "0", "error_sentence_id": "-1",
                              "error_sentence": "", "corrected_sentence": ""})
    rows = scoring.rows(benchmark, instance, None, "timeout")  # a failed request: the main metric's failure row
    assert [(r.metric, r.value, r.details.get("error")) for r in rows] == [(spec.metric, None, "timeout")]
    assert scoring.scored() == {benchmark: 1}
