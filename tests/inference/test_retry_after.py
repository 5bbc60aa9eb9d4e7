"""A server's ``Retry-After`` on 429 and 503: a lower bound for the next attempt's delay, bounded by the backoff
cap and the request's timeout; a malformed or hostile one neither stalls a run nor crashes it. Delays are
recorded through the client's injectable sleep, never timed."""

from __future__ import annotations

import asyncio
from email.utils import formatdate

import httpx
import pytest

from medhelm_local.inference.client import ChatClient, parse_retry_after, retry_delay
from medhelm_local.records import ChatMessage, InferenceRequest
from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults

NOW = 1_800_000_000.0  # a fixed wall clock for HTTP-dates


def _request() -> InferenceRequest:
    return InferenceRequest(benchmark="b", instance_id="1", max_tokens=1,
                            messages=[ChatMessage(role="user", content="question")])


def test_retry_after_is_read_as_seconds_or_an_http_date_and_anything_else_is_ignored() -> None:
    assert parse_retry_after(b"7", NOW) == 7.0
    assert parse_retry_after(" 12 ", NOW) == 12.0
    assert parse_retry_after(b"0", NOW) == 0.0
    assert parse_retry_after(formatdate(NOW + 30, usegmt=True).encode(), NOW) == pytest.approx(30.0)
    assert parse_retry_after(formatdate(NOW - 300, usegmt=True), NOW) == 0.0  # already past: no wait
    assert parse_retry_after(b"9" * 40, NOW) == pytest.approx(1e40)  # absurd but a number: bounded by the caller
    for bad in (None, b"", b"soon", b"-5", b"1.5", b"1e9", b"nan", b"inf", b"9" * 65, b"\xff\xfe",
                b"Wed, 99 Foo 2026 25:61:00 GMT", b"Fri, 31 Dec 99999 23:59:59 GMT", "\u0663"):
        assert parse_retry_after(bad, NOW) is None, bad


def test_retry_after_is_a_lower_bound_capped_by_the_backoff_cap_and_the_timeout() -> None:
    none = lambda low, high: low  # noqa: E731 (the jitter's draw at its lowest)
    most = lambda low, high: high  # noqa: E731 (at its highest)
    assert retry_delay(1, base_s=0.5, cap_s=30, retry_after_s=None, limit_s=120, uniform=none) == 0.0
    assert retry_delay(1, base_s=0.5, cap_s=30, retry_after_s=4.0, limit_s=120, uniform=none) == 4.0
    assert retry_delay(4, base_s=0.5, cap_s=30, retry_after_s=1.0, limit_s=120, uniform=most) == 4.0  # backoff longer
    assert retry_delay(1, base_s=0.5, cap_s=30, retry_after_s=1e40, limit_s=120, uniform=none) == 30.0
    assert retry_delay(1, base_s=0.5, cap_s=30, retry_after_s=1e40, limit_s=2.5, uniform=none) == 2.5
    assert retry_delay(1, base_s=0.5, cap_s=30, retry_after_s=1e40, uniform=none) == 30.0


async def _delays(faults: Faults, *, timeout_s: float = 10.0, max_retries: int = 3, backoff_cap_s: float = 30.0
                  ) -> tuple[str | None, int, list[float]]:
    """One request to a fake that always fails with ``faults``: its error, attempts and every delay it waited."""
    waited: list[float] = []

    async def record(seconds: float) -> None:
        waited.append(seconds)

    with FakeOpenAIServer(faults=faults) as server:
        async with ChatClient([server.base_url], server.model_id, ["http://127.0.0.1"], timeout_s=timeout_s,
                              sleep=record, wall_clock=lambda: NOW) as client:
            result = await client.complete(_request(), max_retries=max_retries, backoff_base_s=0.01,
                                           backoff_cap_s=backoff_cap_s)
    return result.error, result.attempts, waited


def test_a_429s_retry_after_in_seconds_is_waited_before_each_retry() -> None:
    error, attempts, waited = asyncio.run(_delays(Faults(http_429=1.0, retry_after="5")))
    assert error == "http_429" and attempts == 4
    assert waited == [5.0, 5.0, 5.0]  # the jitter alone would be under 0.08 s


def test_a_503s_retry_after_as_an_http_date_is_waited() -> None:
    date = formatdate(NOW + 3, usegmt=True)
    error, attempts, waited = asyncio.run(_delays(Faults(http_5xx=1.0, retry_after=date), max_retries=2))
    assert error == "http_503" and attempts == 3
    assert waited == [pytest.approx(3.0), pytest.approx(3.0)]


@pytest.mark.parametrize("hostile", ["86400", "9" * 60, "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_huge_retry_after_waits_no_longer_than_the_timeout_or_the_cap(hostile: str) -> None:
    error, attempts, waited = asyncio.run(_delays(Faults(http_429=1.0, retry_after=hostile), timeout_s=2.0))
    assert error == "http_429" and attempts == 4
    assert waited == [2.0, 2.0, 2.0]
    _, _, capped = asyncio.run(_delays(Faults(http_429=1.0, retry_after=hostile), max_retries=1, backoff_cap_s=7.0))
    assert capped == [7.0]


@pytest.mark.parametrize("malformed", ["soon", "-3", "1.5", "", "Thu, 45 Smarch 2026 99:00:00 GMT", "\u00e9"])
def test_a_malformed_retry_after_falls_back_to_the_clients_own_backoff(malformed: str) -> None:
    error, attempts, waited = asyncio.run(_delays(Faults(http_429=1.0, retry_after=malformed)))
    assert error == "http_429" and attempts == 4
    assert len(waited) == 3 and all(0 <= w <= 0.01 * 2 ** i for i, w in enumerate(waited))


def test_without_retry_after_the_backoff_is_unchanged() -> None:
    error, attempts, waited = asyncio.run(_delays(Faults(http_429=1.0)))
    assert error == "http_429" and attempts == 4
    assert all(0 <= w <= 0.01 * 2 ** i for i, w in enumerate(waited))


def test_the_fake_sends_retry_after_only_with_its_429s_and_503s() -> None:
    """The fault is the real header on the wire, and a success carries none."""
    with FakeOpenAIServer(faults=Faults(http_429=1.0, retry_after="5")) as limited, FakeOpenAIServer(
            faults=Faults(retry_after="5")) as healthy:
        payload = {"model": "m", "messages": [{"role": "user", "content": "question"}], "max_tokens": 1}
        refused = httpx.post(f"{limited.base_url}/chat/completions", json=payload, timeout=10)
        answered = httpx.post(f"{healthy.base_url}/chat/completions", json=payload, timeout=10)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
    assert answered.status_code == 200 and "retry-after" not in answered.headers


def test_a_tokenize_429s_retry_after_is_waited_by_the_prompt_fitter() -> None:
    """Prompt fitting asks the same server's tokenizer, and retries it with the same rule."""
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.inference.tokens import VllmCounter, server_root
    from medhelm_local.prompts.build import build_request
    from medhelm_local.records import Instance
    from medhelm_local.runner.fitting import PromptFitter

    spec = shipped_spec("medqa")
    instance = Instance(benchmark="medqa", id="1", fields={"question": "q " * 50, "options": "A. x\nB. y"})
    waited: list[float] = []

    async def record(seconds: float) -> None:
        waited.append(seconds)

    async def scenario(server: FakeOpenAIServer) -> None:
        async with ChatClient([server.base_url], server.model_id, ["http://127.0.0.1"]) as client:
            counter = VllmCounter(client, server_root(server.base_url), server.model_id)
            fitter = PromptFitter(counter, 4096, max_retries=3, backoff_base_s=0.01, sleep=record)
            fitted, cut = await fitter.fit(spec, instance, build_request(spec, instance))
            assert cut is None and fitted.messages

    with FakeOpenAIServer(tokenizer="vllm", faults=Faults(tokenize_429_first=2, retry_after="6")) as server:
        asyncio.run(scenario(server))
        assert server.stats()["tokenize_requests"] == 3
    assert waited == [6.0, 6.0]
