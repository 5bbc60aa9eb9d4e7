"""Judge prompts that fit the judge (issue 18 §2): the long fields (question, response, gold) are cut with the
judge server's own tokenizer so that prompt + reply fit its context; the cut is recorded per judgement.

The fake server counts tokens like vLLM (``/tokenize`` with chat messages) and refuses, like vLLM, a request whose
prompt + ``max_tokens`` exceed its context (HTTP 400): without fitting, these judgements would fail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.home import Home
from medhelm_local.home.config import BackendKind, ModelEndpoint, RunnerSettings
from medhelm_local.inference.tokens import TokenCounter
from medhelm_local.records import ChatMessage, Instance
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.jury import JUDGE_MAX_TOKENS
from medhelm_local.scoring.jury_fit import fit_judge_prompt, water_fill
from medhelm_local.scoring.jury_hints import failure_hint
from medhelm_local.store import Store
from medhelm_local.store.judgments import JudgmentStatus, get_judgments
from medhelm_local.testing.fake_openai import FakeOpenAIServer, fake_chat_tokens
from tests.scoring.helpers import add_run, register

BENCHMARK = "medication_qa"


class WordCounter(TokenCounter):
    """A counter whose tokens are whitespace-separated words (for the fitting logic alone)."""

    def __init__(self) -> None:
        self.requests = 0

    async def count(self, messages: Sequence[ChatMessage]) -> int:
        self.requests += 1
        return sum(len(m.content.split()) for m in messages)


def test_water_fill_shares_the_room() -> None:
    assert water_fill({"question": 900, "response": 50, "gold_response": 100}, 400) == {
        "response": 50, "gold_response": 100, "question": 250}
    assert water_fill({"question": 900, "response": 600}, 400) == {"question": 200, "response": 200}
    assert water_fill({"question": 10, "response": 20}, 400) == {"question": 10, "response": 20}
    assert water_fill({"question": 10}, -5) == {"question": 0}


def test_fit_cuts_the_long_fields_to_their_share() -> None:
    def render(values: dict[str, str]) -> str:
        return f"Rate. Q: {values['question']} A: {values['response']} G: {values['gold_response']} end"

    values = {"question": " ".join(f"q{i}" for i in range(500)), "response": " ".join(f"r{i}" for i in range(40)),
              "gold_response": " ".join(f"g{i}" for i in range(300))}
    counter = WordCounter()
    fitted = asyncio.run(fit_judge_prompt(counter, render, values, 200))
    assert fitted.tokens is not None and fitted.tokens <= 200
    assert fitted.truncation is not None
    assert fitted.truncation["tokens_before"] == 845 and fitted.truncation["tokens_after"] == fitted.tokens
    cut = fitted.truncation["fields"]
    assert set(cut) == {"question", "gold_response"}  # the short response is kept whole
    assert "r39" in fitted.prompt and "q0 q1" in fitted.prompt and "q499" not in fitted.prompt
    assert cut["question"]["chars"] == len(values["question"]) > cut["question"]["kept_chars"] > 0
    # the room left by the template (5 words) and the response (40) is shared by question and gold
    assert abs(cut["question"]["kept_tokens"] - cut["gold_response"]["kept_tokens"]) <= 2
    # nothing to cut: no count at all when the byte bound fits
    small = {"question": "q", "response": "r", "gold_response": "g"}
    untouched = asyncio.run(fit_judge_prompt(counter, render, small, 200))
    assert untouched.truncation is None and untouched.prompt == render(small)


def rating(_messages: list[dict[str, Any]]) -> str:
    return json.dumps({c: {"score": 3, "explanation": "ok"} for c in ("accuracy", "completeness", "clarity")})


def home_with(root: Path, url: str, kind: BackendKind, context_length: int = 2048) -> Home:
    home = Home(root)
    home.init()
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="judge", kind=kind, base_urls=[url], timeout_s=5.0,
                                       context_length=context_length))
    config.judges = ["judge"]
    config.runner = RunnerSettings(max_concurrency=4, max_retries=0, seed=0)
    home.save_config(config)
    return home


def long_instances() -> list[Instance]:
    note = " ".join(f"word{i}" for i in range(3000))  # far beyond the judge's context
    return [Instance(benchmark=BENCHMARK, id="long", fields={"question": f"NOTE-START {note} NOTE-END"},
                     references=["Take it with food."]),
            Instance(benchmark=BENCHMARK, id="short", fields={"question": "Can I take it with food?"},
                     references=["Yes."])]


def test_judge_prompt_is_fitted_with_the_judges_tokenizer(tmp_path: Path) -> None:
    context = JUDGE_MAX_TOKENS + 600
    with FakeOpenAIServer(responder=rating, tokenizer="vllm", context_length=context, record_bodies=True) as server:
        home = home_with(tmp_path / "home", server.base_url, BackendKind.VLLM)
        data = long_instances()
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "m", BENCHMARK, fingerprint, data, {i.id: f"ANSWER-{i.id}" for i in data})
            scores = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            judgments = {j.instance_id: j for j in get_judgments(store, run_id, BENCHMARK)}
            run = store.get_run(run_id)
    assert server.context_rejections == 0  # every judge request fitted the judge's context
    assert all(s.value == 0.5 for s in scores if s.metric == "jury")
    assert all(j.status == JudgmentStatus.OK for j in judgments.values())
    assert judgments["short"].truncation is None
    cut = judgments["long"].truncation
    assert cut is not None and set(cut["fields"]) == {"question"}
    assert cut["budget"] == context - JUDGE_MAX_TOKENS and cut["tokens_after"] <= cut["budget"]
    assert cut["fields"]["question"]["kept_chars"] < cut["fields"]["question"]["chars"]
    (sent,) = [b for b in server.bodies if "NOTE-START" in b["messages"][0]["content"]]
    prompt = sent["messages"][0]["content"]
    assert "NOTE-END" not in prompt and "ANSWER-long" in prompt and "Take it with food." in prompt
    assert fake_chat_tokens(sent["messages"]) + sent["max_tokens"] <= context
    assert run is not None
    entry = run.manifest["jury"]["judges"]["judge"]
    assert entry["context_length"] == context and entry["reply_tokens"] == JUDGE_MAX_TOKENS
    assert entry["token_counting"]["method"] == "vllm" and entry["truncated"] == 1


def test_without_fitting_the_judge_refuses_the_prompt(tmp_path: Path) -> None:
    """The fake enforces the context like vLLM: the same long prompt, unfitted, is refused (the test above can fail)."""
    context = JUDGE_MAX_TOKENS + 600
    with FakeOpenAIServer(responder=rating, tokenizer="vllm", context_length=context) as server:
        from medhelm_local.inference.client import ChatClient
        from medhelm_local.records import InferenceRequest

        prompt = " ".join(f"word{i}" for i in range(3000))
        request = InferenceRequest(benchmark="b", instance_id="i", max_tokens=JUDGE_MAX_TOKENS,
                                   messages=[ChatMessage(role="user", content=prompt)])

        async def send() -> Any:
            async with ChatClient([server.base_url], "m", ["http://127.0.0.1"]) as client:
                return await client.complete(request, max_retries=0)

        assert asyncio.run(send()).error == "http_400" and server.context_rejections == 1


def test_prompt_that_cannot_fit_is_a_recorded_failure(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=rating, tokenizer="vllm", context_length=JUDGE_MAX_TOKENS + 50) as server:
        home = home_with(tmp_path / "home", server.base_url, BackendKind.VLLM)
        data = long_instances()
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "m", BENCHMARK, fingerprint, data, {i.id: "answer" for i in data})
            scores = score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            judgments = get_judgments(store, run_id, BENCHMARK)
    assert server.requests_seen == 0  # nothing was sent: the rubric alone exceeds the room
    assert {j.error for j in judgments} == {"prompt_too_long"}
    assert all(j.status == JudgmentStatus.REQUEST_FAILED and not j.ratings for j in judgments)
    assert all(s.value is None for s in scores if s.metric == "jury")
    assert "context" in failure_hint("prompt_too_long")


def test_a_transient_tokenizer_failure_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A count that times out (the embedded llama.cpp server answers one request at a time: a count waits behind a
    long judgement) is asked again, as a run's prompt fitting does, instead of failing the judgement unsent."""
    from medhelm_local.inference.client import RequestFailed
    from medhelm_local.scoring import jury_fit

    real = jury_fit.fit_judge_prompt
    failures: list[dict[str, str]] = []

    async def flaky(counter: TokenCounter, render: Any, values: dict[str, str], budget: int) -> Any:
        if not failures:
            failures.append(values)
            raise RequestFailed("timeout", retryable=True)
        return await real(counter, render, values, budget)

    monkeypatch.setattr(jury_fit, "fit_judge_prompt", flaky)
    with FakeOpenAIServer(responder=rating, tokenizer="vllm", context_length=JUDGE_MAX_TOKENS + 600) as server:
        home = home_with(tmp_path / "home", server.base_url, BackendKind.VLLM)
        config = home.config.model_copy(deep=True)
        config.runner = RunnerSettings(max_concurrency=4, max_retries=2, seed=0)
        home.save_config(config)
        data = long_instances()
        with Store.open(home) as store:
            fingerprint = register(store, BENCHMARK, data)
            run_id = add_run(store, "m", BENCHMARK, fingerprint, data, {i.id: f"ANSWER-{i.id}" for i in data})
            score_benchmark(store, SHIPPED, run_id, BENCHMARK, config=home.config)
            judgments = get_judgments(store, run_id, BENCHMARK)
    assert len(failures) == 1
    assert [(j.status, j.error) for j in judgments] == [(JudgmentStatus.OK, None)] * 2
