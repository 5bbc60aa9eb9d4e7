"""Structured output per backend (issue 18 §1, §3): each judge is sent the response_format shape its server
accepts, a generic server is negotiated down (json_schema -> json_object + schema -> prompt only) on a request-
validation error, the shape is recorded in the run's manifest, a refused shape is a recorded failure with an
operator hint, and `jury rescore` re-asks only the failed judgements.

The fake servers validate ``response_format`` as the real engines do (llama-cpp-python: HTTP 500 on anything but
``text``/``json_object``; vLLM: 400 on a malformed ``json_schema``), so sending the wrong shape fails here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.home import Home
from medhelm_local.home.config import BackendKind, ModelEndpoint, RunnerSettings
from medhelm_local.inference.client import FORMAT_REJECTED, ChatClient
from medhelm_local.inference.structured import OutputShape, is_format_rejection, shapes_for
from medhelm_local.records import ChatMessage, InferenceRequest, Instance
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.jury import JuryStats, rating_schema, response_format
from medhelm_local.scoring.jury_hints import failure_hint
from medhelm_local.store import Store
from medhelm_local.store.judgments import JudgmentStatus, get_judgments
from medhelm_local.testing.fake_openai import FakeOpenAIServer, check_response_format
from tests.conftest import Cli, cli_env
from tests.scoring.helpers import add_run, register

BENCHMARK = "medication_qa"
SECRET = "Perpetua-Wexcombe"  # invented patient text: never in logs, errors or hints


def rating_reply(_messages: list[dict[str, Any]]) -> str:
    return json.dumps({c: {"score": 4, "explanation": f"{SECRET} fine"} for c in ("accuracy", "completeness",
                                                                                   "clarity")})


def make_judge_home(root: Path, judges: dict[str, tuple[BackendKind, str]], *, max_retries: int = 2) -> Home:
    home = Home(root)
    home.init()
    config = home.config.model_copy(deep=True)
    for name, (kind, url) in judges.items():
        config.models.append(ModelEndpoint(name=name, kind=kind, base_urls=[url], timeout_s=5.0))
    config.judges = list(judges)
    config.runner = RunnerSettings(max_concurrency=8, max_retries=max_retries, seed=0)
    home.save_config(config)
    return home


def instances(n: int) -> list[Instance]:
    return [Instance(benchmark=BENCHMARK, id=f"q{i}", fields={"question": f"May {SECRET} take drug {i}?"},
                     references=[f"Reference {i}."]) for i in range(n)]


def judged_run(home: Home, n: int = 4) -> tuple[str, list[Any], dict[str, Any]]:
    data = instances(n)
    with Store.open(home) as store:
        fingerprint = register(store, BENCHMARK, data)
        run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, {i.id: f"answer {i.id}" for i in data})
        scores = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config, jury_concurrency=2)
        judgments = get_judgments(store, run_id, BENCHMARK)
        run = store.get_run(run_id)
    assert run is not None
    return run_id, [s for s in scores if s.metric == "jury"], {"judgments": judgments, "manifest": run.manifest}


def test_backend_shapes() -> None:
    assert shapes_for(BackendKind.EMBEDDED) == (OutputShape.JSON_OBJECT_SCHEMA,)
    assert shapes_for(BackendKind.VLLM) == (OutputShape.JSON_SCHEMA,)
    assert shapes_for(BackendKind.OPENAI_COMPATIBLE) == (
        OutputShape.JSON_SCHEMA, OutputShape.JSON_OBJECT_SCHEMA, OutputShape.PROMPT_ONLY)
    from medhelm_local.benchmarks.registry import shipped_spec

    rubric = shipped_spec(BENCHMARK).judge
    assert rubric is not None
    schema = rating_schema(rubric)
    assert response_format(rubric, OutputShape.JSON_OBJECT_SCHEMA) == {"type": "json_object", "schema": schema}
    as_vllm = response_format(rubric, OutputShape.JSON_SCHEMA)
    assert as_vllm is not None and as_vllm["json_schema"]["schema"] == schema and as_vllm["type"] == "json_schema"
    assert response_format(rubric, OutputShape.PROMPT_ONLY) is None
    # what each fake engine says about each shape, as the real engines do
    assert check_response_format("llama.cpp", as_vllm) is not None
    assert check_response_format("llama.cpp", as_vllm)[0] == 500  # type: ignore[index]
    assert check_response_format("llama.cpp", {"type": "json_object", "schema": schema}) is None
    assert check_response_format("vllm", as_vllm) is None
    assert check_response_format("vllm", {"type": "json_schema", "schema": schema})[0] == 400  # type: ignore[index]
    assert check_response_format("no-response-format", {"type": "json_object"})[0] == 422  # type: ignore[index]
    # a validation error about the prompt's length is not a format refusal
    assert not is_format_rejection(400, b'{"message": "maximum context length is 2048 tokens"}')
    assert is_format_rejection(500, json.dumps(check_response_format("llama.cpp", as_vllm)[1]).encode())  # type: ignore[index]
    assert not is_format_rejection(503, b'{"error": "response_format overloaded"}')


def test_refused_shape_is_not_retried() -> None:
    """A request-validation error is the same on every attempt: one request, category format_rejected."""
    with FakeOpenAIServer(backend="llama.cpp", responder=rating_reply) as server:
        request = InferenceRequest(benchmark="b", instance_id="i", messages=[ChatMessage(role="user", content="x")],
                                   max_tokens=8, response_format={"type": "json_schema", "json_schema": {
                                       "name": "r", "schema": {"type": "object"}}})

        async def send() -> Any:
            async with ChatClient([server.base_url], "m", ["http://127.0.0.1"]) as client:
                return await client.complete(request, max_retries=4, backoff_base_s=0.01)

        result = asyncio.run(send())
    assert result.error == FORMAT_REJECTED and result.attempts == 1
    assert server.requests_seen == 1 and server.rejected == 1


def test_generic_judge_on_llama_cpp_falls_back_to_json_object_with_schema(tmp_path: Path) -> None:
    with FakeOpenAIServer(backend="llama.cpp", responder=rating_reply, record_bodies=True) as server:
        home = make_judge_home(tmp_path / "home", {"j1": (BackendKind.OPENAI_COMPATIBLE, server.base_url)})
        _, scores, found = judged_run(home)
    assert [s.value for s in scores] == [0.75] * 4
    assert all(j.status == JudgmentStatus.OK and j.output_shape == "json_object+schema" for j in found["judgments"])
    # json_schema was refused once, on the first item; everything else went out as json_object + schema
    assert server.rejected == 1 and server.requests_seen == 5
    assert server.bodies[0]["response_format"]["type"] == "json_schema"
    for body in server.bodies[1:]:
        assert body["response_format"]["type"] == "json_object"
        assert body["response_format"]["schema"]["required"] == ["accuracy", "completeness", "clarity"]
    entry = found["manifest"]["jury"]["judges"]["j1"]
    assert {k: entry[k] for k in ("kind", "served_model", "structured_output", "rejected", "accepted")} == {
        "kind": "openai-compatible", "served_model": "j1", "structured_output": "json_object+schema",
        "rejected": ["json_schema"], "accepted": True}


def test_generic_judge_without_structured_output_falls_back_to_the_prompt(tmp_path: Path) -> None:
    with FakeOpenAIServer(backend="no-response-format", responder=rating_reply, record_bodies=True) as server:
        home = make_judge_home(tmp_path / "home", {"j1": (BackendKind.OPENAI_COMPATIBLE, server.base_url)})
        _, scores, found = judged_run(home, 3)
    assert [s.value for s in scores] == [0.75] * 3
    assert server.rejected == 2 and server.requests_seen == 5
    assert all("response_format" not in body for body in server.bodies[2:])
    entry = found["manifest"]["jury"]["judges"]["j1"]
    assert entry["structured_output"] == "prompt_only"
    assert entry["rejected"] == ["json_schema", "json_object+schema"]


def test_vllm_judge_gets_json_schema(tmp_path: Path) -> None:
    with FakeOpenAIServer(backend="vllm", responder=rating_reply, record_bodies=True) as server:
        home = make_judge_home(tmp_path / "home", {"judge-vllm": (BackendKind.VLLM, server.base_url)})
        _, scores, found = judged_run(home, 3)
    assert [s.value for s in scores] == [0.75] * 3
    assert server.rejected == 0 and server.requests_seen == 3
    for body in server.bodies:
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "jury_rating"
        assert fmt["json_schema"]["strict"] is True
        assert set(fmt["json_schema"]["schema"]["properties"]) == {"accuracy", "completeness", "clarity"}
    assert found["manifest"]["jury"]["judges"]["judge-vllm"]["structured_output"] == "json_schema"
    assert found["manifest"]["jury"]["judges"]["judge-vllm"]["kind"] == "vllm"


def test_refused_format_is_recorded_with_a_hint_and_rescore_reasks_only_failures(tmp_path: Path) -> None:
    """A vLLM-kind judge pointed at a llama.cpp server: json_schema is refused on every request (no fallback for
    a named backend), recorded as failures, never defaulted; `jury failures` says why; after the fix, `jury
    rescore` asks again exactly the failed judgements."""
    with FakeOpenAIServer(backend="llama.cpp", responder=rating_reply) as wrong, \
            FakeOpenAIServer(backend="vllm", responder=rating_reply) as right:
        home = make_judge_home(tmp_path / "home", {"jv": (BackendKind.VLLM, wrong.base_url),
                                                   "jg": (BackendKind.OPENAI_COMPATIBLE, right.base_url)})
        run_id, scores, found = judged_run(home, 4)
        assert wrong.requests_seen == 4 and wrong.rejected == 4  # one request each: not retried
        assert all(j.error == FORMAT_REJECTED for j in found["judgments"] if j.judge == "jv")
        assert all(s.details["valid_judges"] == 1 for s in scores)  # jg's ratings only; jv's never defaulted
        assert found["manifest"]["jury"]["judges"]["jv"]["accepted"] is False

        cli = Cli(home=home.root, env=cli_env())
        failures = cli("jury", "failures", "--run", run_id, "--json")
        assert failures.code == 0, failures.stderr
        rows = {r["judge"]: r for r in failures.json()}
        assert rows["jv"]["request_failed"] == 4 and rows["jv"]["failure_rate"] == 1.0
        (category,) = rows["jv"]["categories"]
        assert category["category"] == FORMAT_REJECTED and category["count"] == 4
        assert "rejected the structured-output format" in category["hint"]
        assert rows["jv"]["structured_output"] == ["json_schema"]
        assert rows["jg"]["categories"] == [] and rows["jg"]["failure_rate"] == 0.0
        assert rows["jg"]["truncated"] == 0
        table = cli("jury", "failures", "--run", run_id)
        assert table.code == 0 and "rejected the structured-output format" in table.stdout

        # the fix: the judge's server is the vLLM one after all
        config = home.config.model_copy(deep=True)
        config.models = [m.model_copy(update={"base_urls": [right.base_url]}) if m.name == "jv" else m
                         for m in config.models]
        home.save_config(config)
        before = right.requests_seen
        rescored = cli("jury", "rescore", "--run", run_id, "--json")
        assert rescored.code == 0, rescored.stderr
        (result,) = rescored.json()
        assert result["reasked"] == 4 and result["kept"] == 4
        assert right.requests_seen == before + 4  # only jv's four failed judgements were asked again
        assert result["scored"] == 4 and result["failed"] == 0
        assert result["structured_output"] == {"jv": "json_schema"}
        again = cli("jury", "rescore", "--run", run_id, "--json")
        assert again.json()[0]["reasked"] == 0 and right.requests_seen == before + 4
    with Store.open(home) as store:
        assert all(j.status == JudgmentStatus.OK for j in get_judgments(store, run_id, BENCHMARK))
    for output in (failures.stdout, failures.stderr, table.stdout, rescored.stdout, rescored.stderr):
        assert SECRET not in output


def test_rescore_keeps_valid_judgements_even_when_the_prompt_changed(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=rating_reply) as server:
        home = make_judge_home(tmp_path / "home", {"j1": (BackendKind.OPENAI_COMPATIBLE, server.base_url)})
        data = instances(3)
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "model-x", BENCHMARK, fingerprint, data, {i.id: "answer" for i in data})
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            store.conn.execute("UPDATE judgments SET prompt_hash = 'older' WHERE instance_id = 'q0'")
            store.conn.execute("UPDATE judgments SET status = 'request_failed', error = 'timeout', ratings = '{}' "
                               "WHERE instance_id = 'q1'")
            seen = server.requests_seen
            stats = JuryStats()
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config, only_failed=True, jury_stats=stats)
            assert (stats.asked, stats.kept) == (1, 2) and server.requests_seen == seen + 1
            # a plain re-score asks again where the prompt changed
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            assert server.requests_seen == seen + 2


@pytest.mark.parametrize("category,needle", [
    ("format_rejected", "structured-output format"), ("http_503", "server error"), ("timeout", "timeout_s"),
    ("missing:clarity", "'clarity'"), ("bad_score:accuracy", "1 to 5"), ("cut_off", "token limit"),
    ("not_json", "not JSON"), ("prompt_too_long", "context"),
    ("tokenize_http_503", "count the judge prompt's tokens"), ("something_new", "unknown"),
])
def test_failure_hints(category: str, needle: str) -> None:
    assert needle in failure_hint(category)


def test_every_category_the_client_records_has_a_hint() -> None:
    """What the client can record for a judge's request (read from its source) is explained in `jury failures`."""
    import inspect
    import re

    from medhelm_local.inference import client

    recorded = set(re.findall(r'RequestFailed\("([a-z_0-9]+)"', inspect.getsource(client)))
    assert {"timeout", "invalid_encoding", "response_too_large"} <= recorded
    assert {c for c in recorded if failure_hint(c) == "unknown failure category"} == set()
