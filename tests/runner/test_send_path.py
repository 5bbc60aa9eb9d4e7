"""The send path's pacing (issue 14 §1): the limiter reaches the server's capacity within 3 round trips, and the
group committer's last round does not wait out the interval between rounds."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.records import ChatMessage, InferenceRequest, InferenceResult
from medhelm_local.runner import execute
from medhelm_local.runner.concurrency import AdaptiveLimiter
from medhelm_local.store.runs import Outcome
from tests.conftest import Cli
from tests.runner.helpers import Clock


async def _round_trips_to(limiter: AdaptiveLimiter, clock: Clock, *, slots: int, latency: float, target: int,
                          most: int = 20) -> int:
    """A server with ``slots`` slots and a fixed latency, and a runner with more work than slots: every freed or
    added slot is taken at once by the next request, which completes one round trip later. Returns the round
    trips taken until the limit first reached ``target``."""
    while limiter.in_flight < limiter.limit:
        await limiter.acquire()
    for trip in range(1, most + 1):
        this_trip = min(limiter.in_flight, slots)  # requests beyond the slots wait in the server's queue
        for _ in range(this_trip):
            clock.now += latency / this_trip
            limiter.release(None)
            while limiter.in_flight < limiter.limit:
                await limiter.acquire()
        if limiter.limit >= target:
            return trip
    return most + 1


@pytest.mark.parametrize(("cap", "initial"), [(256, None), (256, 64), (1024, None), (512, 64)])
def test_limiter_reaches_the_servers_capacity_within_three_round_trips(cap: int, initial: int | None) -> None:
    clock = Clock()
    limiter = AdaptiveLimiter(cap, initial=initial, clock=clock)
    trips = asyncio.run(_round_trips_to(limiter, clock, slots=cap, latency=0.4, target=cap))
    assert trips <= 3, limiter.history
    assert limiter.peak_limit == cap


def _outcome(i: int) -> Outcome:
    request = InferenceRequest(benchmark="b", instance_id=str(i), max_tokens=1,
                               messages=[ChatMessage(role="user", content="q")])
    return Outcome(request, InferenceResult(text="yes"), None)


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """The commit rounds the group committer makes (when, how many outcomes), the store's commit stubbed."""
    made: list[tuple[float, int]] = []

    def commit_outcomes(store: Any, run_id: str, session_id: str, wall_s: float, outcomes: list[Outcome], *,
                        replace_errors: bool) -> None:
        made.append((time.monotonic(), len(outcomes)))

    monkeypatch.setattr(execute.runs_db, "commit_outcomes", commit_outcomes)
    return made


def _committer() -> tuple[execute.StoreThread, execute.GroupCommitter]:
    """A committer whose next round, after the first, would wait 30 s."""
    db = execute.StoreThread()
    return db, execute.GroupCommitter(db, None, "run", "session", replace_errors=False,  # type: ignore[arg-type]
                                      max_batch=512, started=time.monotonic(), interval_s=30.0)


def test_closing_the_committer_commits_at_once_not_after_the_interval(rounds: list[tuple[float, int]]) -> None:

    async def scenario() -> float:
        db, committer = _committer()
        committer.submit(_outcome(0))
        while not rounds:  # the first round goes at once
            await asyncio.sleep(0.01)
        committer.submit(_outcome(1))  # the next round would wait 30 s ...
        await asyncio.sleep(0.1)
        assert len(rounds) == 1
        started = time.monotonic()
        await committer.close()  # ... but closing commits what is left now
        db.close()
        return time.monotonic() - started

    waited = asyncio.run(scenario())
    assert [n for _, n in rounds] == [1, 1]
    assert waited < 2.0


def test_once_everything_is_sent_what_is_queued_commits_while_the_last_replies_are_awaited(
        rounds: list[tuple[float, int]]) -> None:
    """The round after the last reply holds only the replies in flight when the last request went out, not every
    outcome since the previous round (which made the run wait, after its last reply, for a round of thousands)."""

    async def scenario() -> None:
        db, committer = _committer()
        committer.submit(_outcome(0))
        while not rounds:
            await asyncio.sleep(0.01)
        for i in range(1, 4):  # the next round would wait 30 s
            committer.submit(_outcome(i))
        committer.drain()  # the last request went out
        for _ in range(200):
            if len(rounds) > 1:
                break
            await asyncio.sleep(0.01)
        assert [n for _, n in rounds] == [1, 3]  # committed while the last replies are awaited
        committer.submit(_outcome(4))  # the last reply: its round waits for close, not the interval
        committer.submit(_outcome(5))
        await asyncio.sleep(0.1)
        assert [n for _, n in rounds] == [1, 3]
        await committer.close()
        db.close()

    asyncio.run(scenario())
    assert [n for _, n in rounds] == [1, 3, 2]


def test_drain_with_nothing_queued_adds_no_round(rounds: list[tuple[float, int]]) -> None:

    async def scenario() -> None:
        db, committer = _committer()
        committer.submit(_outcome(0))
        while not rounds:
            await asyncio.sleep(0.01)
        committer.drain()
        committer.submit(_outcome(1))  # arrives after the drain: waits for close
        await asyncio.sleep(0.1)
        assert [n for _, n in rounds] == [1]
        await committer.close()
        db.close()

    asyncio.run(scenario())
    assert [n for _, n in rounds] == [1, 1]


@pytest.mark.parametrize(("kind", "requested", "expected"), [
    ("vllm", None, 256),  # vLLM queues what exceeds its batch: no round trip is spent below the cap
    ("embedded", None, None),  # answers one request at a time: a queue of the cap's size only waits
    ("openai-compatible", None, None),  # maybe a rate-limited gateway: the limiter's own start (half the cap)
    ("openai-compatible", 32, 32),
    ("vllm", 1000, 256),  # never above the cap
])
def test_the_limiter_starts_at_the_cap_only_for_servers_that_queue(kind: str, requested: int | None,
                                                                   expected: int | None) -> None:
    from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint, RunnerSettings
    from medhelm_local.runner.options import Sending
    from medhelm_local.runner.session import execution_settings

    endpoint = ModelEndpoint(name="m", kind=BackendKind(kind),
                             base_urls=[] if kind == "embedded" else ["http://127.0.0.1:9/v1"])
    config = ApplianceConfig(runner=RunnerSettings(max_concurrency=256))
    settings = execution_settings(config, Sending(initial_concurrency=requested), endpoint, errors_only=False)
    assert settings.concurrency == 256
    assert settings.initial_concurrency == expected
    limiter = AdaptiveLimiter(settings.concurrency, initial=settings.initial_concurrency)
    assert limiter.limit == (expected or 128)


@pytest.mark.parametrize(("kind", "given", "expected"), [
    ("embedded", None, 2),  # one request at a time: two keep it busy, more only wait towards the timeout
    ("embedded", 8, 8),  # --concurrency still sets another
    ("vllm", None, 256),
    ("openai-compatible", None, 256),
])
def test_the_embedded_model_is_sent_two_requests_at_a_time_unless_told_otherwise(
        tmp_path: Path, kind: str, given: int | None, expected: int) -> None:
    """`run --model smollm2-135m-embedded` without --concurrency kept up to 128 requests in flight (half the
    config's cap of 256) to the embedded llama.cpp server, which answers one at a time: each waited behind the
    others, and on a CPU every request past the first few dozen timed out (120 s) and was recorded as failed."""
    from medhelm_local.home import Home
    from medhelm_local.home.config import BackendKind, ModelEndpoint
    from medhelm_local.runner.options import Sending
    from medhelm_local.runner.session import Target, execution_settings, sending_for
    from medhelm_local.store import Store

    home = Home(tmp_path / "home")
    home.init()
    endpoint = ModelEndpoint(name="m", kind=BackendKind(kind),
                             base_urls=[] if kind == "embedded" else ["http://127.0.0.1:9/v1"])
    with Store.open(home) as store:
        chosen = sending_for(store, home.config, Target(endpoint=endpoint, mode="new", run_id="run-x", seed=0),
                             Sending(concurrency=given))
    assert chosen.sending.concurrency == expected and chosen.record["concurrency"] == expected  # kept with the run
    settings = execution_settings(home.config, chosen.sending, endpoint, errors_only=False)
    assert AdaptiveLimiter(settings.concurrency, initial=settings.initial_concurrency).limit <= expected


def test_run_initial_concurrency_flag_sets_where_the_limiter_starts(home_cli: Cli, tmp_path: Path) -> None:
    from medhelm_local.testing.fake_openai import FakeOpenAIServer
    from tests.test_pipeline import write_extract

    extract = write_extract(tmp_path / "extract.csv", n=12)
    assert home_cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        assert home_cli("models", "add", "fake", "--base-url", server.base_url).code == 0
        run = home_cli("run", "--model", "fake", "--benchmarks", "hospice_referral", "--initial-concurrency", "3",
                       "--concurrency", "8", "--json")
    assert run.code == 0, run.stderr
    assert run.json()["session"]["concurrency_steps"][0] == [0.0, 3, "start"]


def test_the_send_phase_leaves_long_lived_objects_to_rest_and_hands_them_back(tmp_path: Path) -> None:
    """While a run sends, what was alive before (modules, schemas, the plan) is frozen out of the collector's
    walks (its thresholds unchanged); afterwards the collector is as it was."""
    import gc

    from medhelm_local.application.evaluation import evaluate
    from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
    from tests.runner.helpers import app, make_home, quiet, register, synthetic_instances

    answer = hash_responder()
    seen: list[tuple[int, tuple[int, ...]]] = []

    def respond(messages: list[dict[str, Any]]) -> str:
        seen.append((gc.get_freeze_count(), gc.get_threshold()))
        return answer(messages)

    before = gc.get_threshold()
    with FakeOpenAIServer(responder=respond) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(20))
        outcome = evaluate(app(home), quiet())
    assert outcome.run.status == "finished"
    assert len(seen) == 20
    # frozen while sending; collected at the usual thresholds (a rarer youngest collection raised the peak RSS)
    assert all(frozen > 1000 and threshold == before for frozen, threshold in seen), seen[:3]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_the_first_page_is_read_before_the_store_is_first_released(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The send phase reads its first page from the store as planning left it attached: a release first (DuckDB
    checkpoints the plan then) and an attach again came before the first request."""
    from medhelm_local.application.evaluation import evaluate
    from medhelm_local.runner import session
    from medhelm_local.store import Store
    from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
    from tests.runner.helpers import app, make_home, quiet, register, synthetic_instances

    events: list[str] = []
    sending = False
    release, load_page, execute_run = Store.release, execute._load_page, session.execute_run

    def recorded_release(self: Store) -> None:
        if sending:
            events.append("release")
        release(self)

    def recorded_page(*args: Any, **kwargs: Any) -> Any:
        events.append("page")
        return load_page(*args, **kwargs)

    async def recorded_send(*args: Any, **kwargs: Any) -> Any:
        nonlocal sending
        sending = True
        try:
            return await execute_run(*args, **kwargs)
        finally:
            sending = False

    monkeypatch.setattr(Store, "release", recorded_release)
    monkeypatch.setattr(execute, "_load_page", recorded_page)
    monkeypatch.setattr(session, "execute_run", recorded_send)
    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url])
        register(home, synthetic_instances(30))
        outcome = evaluate(app(home), quiet())
    assert outcome.run.status == "finished" and outcome.results[0].n == 30
    assert events[:2] == ["page", "release"], events
