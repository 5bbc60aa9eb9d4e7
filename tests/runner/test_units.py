"""Unit behaviour of the runner's parts: limiter, replica pool, send order, manifest, cost."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from medhelm_local.analysis.cost import price, run_cost
from medhelm_local.application.evaluation import evaluate
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.home.config import ModelEndpoint, Pricing
from medhelm_local.inference.client import EndpointPool
from medhelm_local.runner import manifest as manifest_mod
from medhelm_local.runner.concurrency import AdaptiveLimiter
from medhelm_local.runner.plan import compute_plan, plan_items
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.store import RunInfo, utcnow
from medhelm_local.testing.fake_openai import FakeOpenAIServer, hash_responder
from tests.runner.helpers import Clock, app, make_home, quiet, register, synthetic_instances


async def _simulate(limiter: AdaptiveLimiter, clock: Clock, *, slots: int, latency: float, ticks: int,
                    category: str | None = None) -> None:
    """A server with ``slots`` parallel slots: each tick of ``latency`` completes min(limit, slots) requests."""
    for _ in range(ticks):
        while limiter.in_flight < limiter.limit:
            await limiter.acquire()
        served = min(limiter.in_flight, slots)
        for _ in range(served):
            clock.now += latency / served
            limiter.release(category)
        for _ in range(limiter.in_flight):  # the rest wait in the server's queue: released after another tick
            clock.now += latency / max(1, limiter.in_flight)
            limiter.release(category)


def test_limiter_grows_until_throughput_stops_rising_and_respects_the_cap() -> None:
    clock = Clock()
    limiter = AdaptiveLimiter(4096, initial=4, clock=clock)
    asyncio.run(_simulate(limiter, clock, slots=128, latency=0.1, ticks=60))
    assert 128 <= limiter.limit <= 1024, limiter.history
    capped = AdaptiveLimiter(50, initial=4, clock=(clock2 := Clock()))
    asyncio.run(_simulate(capped, clock2, slots=500, latency=0.1, ticks=40))
    assert capped.limit == 50 and capped.peak_limit == 50


def test_a_waiter_cancelled_as_a_slot_frees_leaves_cleanly() -> None:
    """Ctrl-C (or SIGTERM) cancels the run's main task while it waits for a slot: its waiting future is cancelled at
    once, and a request finishing before the task runs again frees a slot, whose wake-up drops that future from
    the queue. The task then removed it again: ValueError, an internal error instead of an interrupted run."""

    async def scenario() -> tuple[str, int, int]:
        limiter = AdaptiveLimiter(1, initial=1, clock=Clock())
        await limiter.acquire()  # the one slot is taken
        waiting = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)  # it waits for the slot
        waiting.cancel()  # the interrupt
        limiter.release(None)  # a request ends before the cancelled task runs again
        try:
            await waiting
            ended = "acquired"
        except asyncio.CancelledError:
            ended = "cancelled"
        await limiter.acquire()  # the slot is still there to take
        return ended, limiter.in_flight, len(limiter._waiters)

    assert asyncio.run(scenario()) == ("cancelled", 1, 0)


def test_limiter_halves_on_429_and_holds_on_5xx() -> None:
    clock = Clock()
    limiter = AdaptiveLimiter(1024, initial=64, clock=clock)
    asyncio.run(_simulate(limiter, clock, slots=1024, latency=0.1, ticks=1, category="http_429"))
    assert limiter.limit <= 32
    held = AdaptiveLimiter(1024, initial=16, clock=(clock2 := Clock()))
    asyncio.run(_simulate(held, clock2, slots=1024, latency=0.1, ticks=20, category="http_503"))
    assert held.limit == 16


def test_pool_avoids_a_dead_replica_and_retries_it_later() -> None:
    clock = Clock()
    pool = EndpointPool(["http://a", "http://b"], failure_threshold=2, base_cooldown_s=5.0, clock=clock)
    for _ in range(2):
        pool.endpoints[0].in_flight += 1
        pool.release("http://a", "connect_error")
    picks = {pool.choose()[0] for _ in range(20)}
    assert picks == {"http://b"}
    clock.now += 5.1
    assert "http://a" in {pool.choose()[0] for _ in range(4)}
    one = EndpointPool(["http://only"], clock=clock)
    for _ in range(10):
        one.endpoints[0].in_flight += 1
        one.release("http://only", "connect_error")
    assert one.choose() == ("http://only", 0.0)  # a single replica is never parked


def test_replicas_are_balanced_and_a_dead_one_is_avoided(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    with FakeOpenAIServer(responder=hash_responder()) as a, FakeOpenAIServer(responder=hash_responder()) as b:
        home = make_home(tmp_path / "home", [a.base_url, b.base_url, dead], max_retries=8)
        register(home, synthetic_instances(120))
        outcome = evaluate(app(home), quiet(backoff_base_s=0.01))
        assert a.stats()["completions_sent"] > 20 and b.stats()["completions_sent"] > 20
    assert outcome.errors == {}
    stats = {e["url"]: e for e in outcome.report.endpoints} if outcome.report else {}
    assert stats[dead]["ok"] == 0 and stats[dead]["times_marked_down"] >= 1
    assert stats[dead]["attempts"] < 60


def test_prefix_order_groups_shared_contexts(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    instances = synthetic_instances(60, contexts=6, context_chars=2000)
    register(home, instances)
    context_of = {i.id: i.fields["context"] for i in instances}
    with Store.open(home) as store:
        plans = {mode: compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0, order_mode=mode)
                 for mode in ("prefix", "shuffle")}
        again = compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0, order_mode="prefix")
        sent: dict[str, list[str]] = {}
        for mode, plan in plans.items():
            run = RunInfo(run_id=f"run-{mode}", model="fake", benchmarks=plan.benchmarks, created_at=utcnow(),
                          finished_at=None, status="planned", max_instances=None, seed=0, manifest={})
            runs_db.insert_plan(store, run, plan_items(store, plan), plan_key=plan.plan_key, order_mode=mode,
                                manifest_sha256="0" * 64)
            sent[mode] = [str(r[0]) for r in store.conn.execute(
                "SELECT instance_id FROM runner_item_order WHERE run_id = ? ORDER BY send_rank", [run.run_id]
            ).fetchall()]
    assert plans["prefix"].plan_key == again.plan_key and plans["prefix"].plan_key != plans["shuffle"].plan_key
    assert sorted(sent["prefix"]) == sorted(i.id for i in instances) == sorted(sent["shuffle"])

    def switches(order: list[str]) -> int:
        ordered = [context_of[i] for i in order]
        return sum(1 for x, y in itertools.pairwise(ordered) if x != y)

    assert switches(sent["prefix"]) == 5  # six contexts, each sent as one block
    assert switches(sent["shuffle"]) > 20


def test_manifest_hash_is_canonical_and_weights_are_hashed_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert manifest_mod.manifest_sha256({"b": 1, "a": [1, 2]}) == manifest_mod.manifest_sha256({"a": [1, 2], "b": 1})
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "a.bin").write_bytes(b"abc")
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    calls: list[Path] = []
    real = manifest_mod._file_sha256
    def counted(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(manifest_mod, "_file_sha256", counted)
    with Store.open(home) as store:
        first = manifest_mod.weights_fingerprint(store, weights)
        second = manifest_mod.weights_fingerprint(store, weights)
    assert first == second and len(calls) == 1
    assert first["files"][0]["sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    monkeypatch.setattr(manifest_mod, "__file__", str(tmp_path / "x" / "y" / "z.py"))
    monkeypatch.delenv("MEDHELM_GIT_COMMIT", raising=False)
    assert manifest_mod.git_commit() is None  # no repository: no commit, no failure


def test_cost_methods_and_session_union(tmp_path: Path) -> None:
    assert price(None, prompt_tokens=10, completion_tokens=5, wall_s=1, tokens_complete=True)[:2] == ("none", None)
    method, total, _, _ = price(Pricing(input_per_million=2.0, output_per_million=10.0), prompt_tokens=1_000_000,
                                completion_tokens=100_000, wall_s=1, tokens_complete=True)
    assert (method, total) == ("tokens", 3.0)
    assert price(Pricing(input_per_million=1.0), prompt_tokens=1, completion_tokens=1, wall_s=1,
                 tokens_complete=False)[1] is None  # missing usage: unknown, not cheaper
    method, total, gpu_hours, _ = price(Pricing(gpu_hour_rate=4.0, gpus=2), prompt_tokens=0, completion_tokens=0,
                                        wall_s=1800, tokens_complete=True)
    assert (method, total, gpu_hours) == ("gpu_time", 4.0, 1.0)

    with FakeOpenAIServer(responder=hash_responder()) as server:
        home = make_home(tmp_path / "home", [server.base_url], extra={"pricing": Pricing(gpu_hour_rate=3600.0)})
        register(home, synthetic_instances(10))
        outcome = evaluate(app(home), quiet())
    run_id = outcome.run.run_id
    with Store.open(home) as store:
        start = datetime(2026, 1, 1)
        store.conn.execute("DELETE FROM runner_sessions WHERE run_id = ?", [run_id])
        for sid, offset, wall in (("a", 0, 10.0), ("b", 5, 10.0), ("c", 100, 1.0)):  # a and b overlap
            store.conn.execute("INSERT INTO runner_sessions VALUES (?, ?, 'shard', NULL, ?, NULL, ?, 0, 0, 0, 0, 0, "
                               "'[]')", [run_id, sid, start + timedelta(seconds=offset), wall])
        cost = run_cost(store, run_id, home.config)
        endpoint: ModelEndpoint = home.config.model("fake")
        assert run_cost(store, run_id, endpoint).total == cost.total
    assert cost.method == "gpu_time" and cost.wall_s == pytest.approx(16.0) and cost.total == pytest.approx(16.0)
    assert cost.prompt_tokens > 0 and cost.completion_tokens == 10


def test_identity_a_resume_cannot_read_is_returned_unverified_and_a_change_is_refused() -> None:
    from medhelm_local.errors import BadInputError
    from medhelm_local.runner.session import check_identity

    endpoint = ModelEndpoint(name="m", base_urls=["http://127.0.0.1:9/v1"], served_model="m-served")
    servers = [{"url": "http://127.0.0.1:9/v1", "version": "0.31.0"}]
    manifest = {"model": {"served_model": "m-served", "weights": {"sha256": "ab" * 32}, "servers": servers}}
    run = RunInfo(run_id="run-x", model="m", benchmarks=["pubmedqa"], created_at=utcnow(), finished_at=None,
                  status="running", max_instances=None, seed=0, manifest=manifest)
    assert check_identity(run, endpoint, servers, {"sha256": "ab" * 32}) == []
    assert check_identity(run, endpoint, servers, None) == ["weights_sha256"]  # not silently "unchanged"
    with pytest.raises(BadInputError, match="weights_sha256"):
        check_identity(run, endpoint, servers, {"sha256": "cd" * 32})
