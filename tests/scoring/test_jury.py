"""The LLM jury against real (fake) OpenAI-compatible judge servers: valid JSON, invalid replies, HTTP errors.

A failed or invalid judgement must be recorded and reported, never turned into a score; an instance with no
valid rating is excluded and counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import SHIPPED, shipped_spec
from medhelm_local.records import Instance
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.jury import (
    InvalidJudgement,
    JudgesNotConfigured,
    judge_names,
    judge_prompt,
    parse_judgement,
    response_format,
)
from medhelm_local.scoring.summary import summarise
from medhelm_local.store import Store
from medhelm_local.store.judgments import JudgmentStatus, get_judgments, judge_failure_rates
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults
from tests.scoring.helpers import add_run, make_home, register

BENCHMARK = "medication_qa"
SECRET = "Quillon-Marrowby"  # invented patient text: must never reach logs or errors


def instances(n: int = 6) -> list[Instance]:
    return [Instance(benchmark=BENCHMARK, id=f"m{i}", fields={"question": f"Can {SECRET} take drug {i}?"},
                     references=[f"Reference answer {i}."]) for i in range(n)]


def rating(a: int, b: int, c: int) -> str:
    return json.dumps({"accuracy": {"score": a, "explanation": f"{SECRET} ok"},
                       "completeness": {"score": b, "explanation": "fine"},
                       "clarity": {"score": c, "explanation": "clear"}})


def steady_judge(messages: list[dict[str, Any]]) -> str:
    return rating(5, 4, 3)  # mean 4 -> 0.75


def flaky_judge(messages: list[dict[str, Any]]) -> str:
    content = messages[-1]["content"]
    if "drug 1?" in content:
        return "I think it is good. Score: 4"  # not JSON
    if "drug 2?" in content:
        return json.dumps({"accuracy": {"score": 7}, "completeness": {"score": 3}, "clarity": {"score": 3}})
    if "drug 3?" in content:
        return json.dumps({"accuracy": {"score": 2}, "clarity": {"score": 2}})  # a criterion missing
    return "```json\n" + rating(1, 1, 1) + "\n```"  # fenced JSON is still valid


@pytest.fixture
def judges() -> Iterator[tuple[FakeOpenAIServer, FakeOpenAIServer, FakeOpenAIServer]]:
    with FakeOpenAIServer(responder=steady_judge, record_bodies=True) as steady, \
            FakeOpenAIServer(responder=flaky_judge) as flaky, \
            FakeOpenAIServer(faults=Faults(http_5xx=1.0)) as down:
        yield steady, flaky, down


def test_jury_records_failures_and_never_defaults(tmp_path: Path, judges: tuple[FakeOpenAIServer, ...],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    steady, flaky, down = judges
    home = make_home(tmp_path / "home", {"judge-a": steady.base_url, "judge-b": flaky.base_url,
                                         "judge-c": down.base_url}, max_retries=0)
    data = instances()
    outputs: dict[str, str | None] = {i.id: f"<think>reasoning</think>Answer for {i.id}" for i in data}
    outputs["m5"] = None  # the model's own request failed: nothing to judge
    with Store.open(home) as store:
        fingerprint = register(store, BENCHMARK, data)
        run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, outputs)
        scores = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config, jury_concurrency=2)
        judgments = get_judgments(store, run_id, BENCHMARK)
        rates = {r.judge: r for r in judge_failure_rates(store, run_id, BENCHMARK)}

    jury = {s.instance_id: s for s in scores if s.metric == "jury"}
    # judge-a always 4/5 -> 0.75; judge-b valid (all 1s) only on m0 and m4; judge-c always HTTP 503.
    assert jury["m0"].value == pytest.approx(((5 + 4 + 3 + 1 + 1 + 1) / 6 - 1) / 4)
    assert jury["m1"].value == pytest.approx(0.75)
    assert jury["m1"].details["valid_judges"] == 1
    assert jury["m1"].details["judge_errors"] == {"judge-b": "not_json", "judge-c": "http_503"}
    assert jury["m2"].details["judge_errors"]["judge-b"] == "bad_score:accuracy"
    assert jury["m3"].details["judge_errors"]["judge-b"] == "missing:completeness"
    assert jury["m5"].value is None and jury["m5"].details["error"] == "http_503"

    assert len(judgments) == 5 * 3  # five answered instances x three judges, each recorded
    assert {j.status for j in judgments if j.judge == "judge-c"} == {JudgmentStatus.REQUEST_FAILED}
    assert all(j.ratings == {} for j in judgments if j.status != JudgmentStatus.OK)
    assert rates["judge-a"].failure_rate == 0
    assert rates["judge-b"].invalid_reply == 3 and rates["judge-b"].failure_rate == pytest.approx(3 / 5)
    assert rates["judge-c"].request_failed == 5 and rates["judge-c"].failure_rate == 1.0
    # explanations are kept (in the encrypted store) for valid judgements only
    assert any(SECRET in j.explanations.get("accuracy", "") for j in judgments)

    breakdown = summarise(BENCHMARK, "jury", scores)
    assert breakdown.n == 5 and breakdown.n_failed == 1
    assert breakdown.score == pytest.approx(sum(s.value for s in jury.values() if s.value is not None) / 5)
    assert "rouge_l" in breakdown.secondary and breakdown.secondary["rouge_l"]["n"] == 5
    assert "criterion:accuracy" in breakdown.secondary

    # the judges were asked for structured output with the rubric's schema, reasoning dropped from the response
    body = steady.bodies[0]
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["accuracy", "completeness", "clarity"]
    assert "reasoning" not in body["messages"][-1]["content"]
    assert SECRET not in caplog.text


def test_instance_without_valid_rating_is_excluded(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=lambda _m: "nonsense") as bad, \
            FakeOpenAIServer(faults=Faults(http_5xx=1.0)) as down:
        home = make_home(tmp_path / "home", {"j1": bad.base_url, "j2": down.base_url}, max_retries=0)
        data = instances(3)
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, {i.id: "an answer" for i in data})
            scores = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
    jury = [s for s in scores if s.metric == "jury"]
    assert all(s.value is None and s.details["error"] == "no_valid_judgement" for s in jury)
    breakdown = summarise(BENCHMARK, "jury", scores)
    assert breakdown.score is None and breakdown.n == 0 and breakdown.n_failed == 3
    assert breakdown.failures == {"no_valid_judgement": 3}


def test_rescoring_reuses_valid_judgements_and_retries_failed_ones(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=steady_judge) as server:
        home = make_home(tmp_path / "home", {"j1": server.base_url}, max_retries=0)
        data = instances(4)
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, {i.id: "an answer" for i in data})
            server.faults = Faults(http_5xx=1.0)
            first = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            assert all(s.value is None for s in first if s.metric == "jury")
            server.faults = Faults()
            seen = server.requests_seen
            second = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            assert server.requests_seen == seen + 4
            third = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            assert server.requests_seen == seen + 4  # nothing asked again: all judgements valid
    assert [s.value for s in second if s.metric == "jury"] == [0.75] * 4
    assert [s.value for s in third if s.metric == "jury"] == [0.75] * 4


def test_no_judges_configured_is_a_clear_error(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", {})
    data = instances(2)
    with Store.open(home) as store:
        fingerprint = register(store, BENCHMARK, data)
        run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, {i.id: "x" for i in data})
        with pytest.raises(JudgesNotConfigured, match="no judges are configured"):
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
        with pytest.raises(JudgesNotConfigured):
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=None)
    assert JudgesNotConfigured.exit_code == 2


def test_no_judges_configured_names_the_audited_command_that_adds_one() -> None:
    """The error told the user to add names under `judges:` in appliance.yaml by hand: an edit the audit trail
    never sees (`models update --judge` writes `config.model_update`), and one the chart's read-only
    appliance.yaml refuses. It now names the command."""
    with pytest.raises(JudgesNotConfigured) as refused:
        judge_names(None, BENCHMARK)
    message = str(refused.value)
    assert "`medhelm-local models update NAME --judge`" in message and "models add NAME ... --judge" in message
    assert "in appliance.yaml" not in message


def test_parse_judgement_validates_every_criterion() -> None:
    rubric = shipped_spec(BENCHMARK).judge
    assert rubric is not None
    assert parse_judgement(rating(5, 4, 3), rubric)[0] == {"accuracy": 5, "completeness": 4, "clarity": 3}
    assert parse_judgement('{"Accuracy": 2, "Completeness": {"score": 3.0}, "clarity": {"score": 1}}',
                           rubric)[0] == {"accuracy": 2, "completeness": 3, "clarity": 1}
    paired = '{"accuracy": {"score": 4, "explanation": "\\ud83d\\ude00"}, "completeness": 3, "clarity": 3}'
    assert parse_judgement(paired, rubric)[1] == {"accuracy": "\U0001F600"}
    for bad, category in [
        ("[1, 2, 3]", "not_object"),
        ("{", "not_json"),
        ('{"accuracy": {"score": 0}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": {"score": 4.5}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": {"score": "4"}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": {"score": true}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": 4, "clarity": 3}', "missing:completeness"),
        # valid JSON whose number is out of float's range (inf), and Python's NaN / Infinity extensions: an
        # invalid reply, not an exception that ends the run (int() of them raises)
        ('{"accuracy": {"score": 1e400}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": {"score": NaN}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        ('{"accuracy": {"score": -Infinity}, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
        # an explanation holding an unpaired surrogate escape is no text: the store refused it (DuckDB's error
        # quoting the explanation), which ended the whole jury
        ('{"accuracy": {"score": 4, "explanation": "ok \\ud800"}, "completeness": 3, "clarity": 3}', "not_json"),
        # one criterion rated twice under names differing in case: the last one silently won
        ('{"Accuracy": 5, "accuracy": 1, "completeness": 3, "clarity": 3}', "bad_score:accuracy"),
    ]:
        with pytest.raises(InvalidJudgement) as caught:
            parse_judgement(bad, rubric)
        assert caught.value.category == category


def test_note_extract_rubric_uses_structure_and_no_gold() -> None:
    spec = shipped_spec("note_extract")
    assert spec.judge is not None
    shape = response_format(spec.judge)
    assert shape is not None
    schema = shape["json_schema"]["schema"]
    assert schema["required"] == ["accuracy", "structure", "clarity"]
    instance = Instance(benchmark="note_extract", id="n1", fields={"context": "care plan", "question": "format"},
                        references=["GOLD-TEXT"])
    prompt = judge_prompt(spec, instance, "restructured")
    assert "GOLD-TEXT" not in prompt and "restructured" in prompt
    medqa_prompt = judge_prompt(shipped_spec(BENCHMARK), instances(1)[0], "resp")
    assert "Reference answer 0." in medqa_prompt
    assert "Accuracy (1-5)" in medqa_prompt


def test_score_command_runs_the_jury_on_a_predictions_file(tmp_path: Path) -> None:
    from tests.conftest import Cli, cli_env

    with FakeOpenAIServer(responder=steady_judge) as steady, FakeOpenAIServer(responder=flaky_judge) as flaky:
        home = make_home(tmp_path / "home", {"judge-a": steady.base_url, "judge-b": flaky.base_url},
                         max_retries=0)
        data = instances(4)
        with Store.open(home) as store:
            register(store, BENCHMARK, data)
        predictions = tmp_path / "p.jsonl"
        predictions.write_text("\n".join(json.dumps({"id": i.id, "output": f"answer {i.id}"}) for i in data))
        cli = Cli(home=home.root, env=cli_env())
        result = cli("score", BENCHMARK, "--predictions", str(predictions), "--json", "--jury-concurrency", "2")
        assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["metric"] == "jury" and payload["n"] == 4 and payload["n_failed"] == 0
    judges = {j["judge"]: j for j in payload["breakdown"]["judges"]}
    assert judges["judge-a"]["failure_rate"] == 0.0
    assert judges["judge-b"]["failure_rate"] == 0.75  # m1 not JSON, m2 score 7, m3 missing a criterion
    # m0: judge-a 4 and judge-b 1 on average; m1-m3: judge-a only
    expected = [((4 * 3 + 1 * 3) / 6 - 1) / 4, 0.75, 0.75, 0.75]
    assert payload["score"] == pytest.approx(sum(expected) / 4)
    assert payload["breakdown"]["secondary"]["rouge_l"]["n"] == 4
    assert SECRET not in result.stdout + result.stderr


def test_a_rubric_may_use_exactly_the_fields_the_jury_fills() -> None:
    """The fields registration allows in a rubric (JUDGE_TEMPLATE_FIELDS) are those a judge prompt is filled with."""
    from medhelm_local.scoring.jury import JUDGE_TEMPLATE_FIELDS, judge_values

    spec = shipped_spec(BENCHMARK)
    assert set(judge_values(spec, instances(1)[0], "An answer.")) == set(JUDGE_TEMPLATE_FIELDS)
