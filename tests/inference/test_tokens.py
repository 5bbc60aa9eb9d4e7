"""Token counting with the serving engine's own tokenizer endpoint, and fitting a long field into the context:
the fake server serving vLLM's and llama.cpp's tokenize endpoints (and enforcing a context length like vLLM),
and the real embedded llama.cpp server."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.home.config import BackendKind
from medhelm_local.inference.client import ChatClient, RequestFailed
from medhelm_local.inference.tokens import (
    ESTIMATE_BYTES_PER_TOKEN,
    EstimateCounter,
    LlamaCppCounter,
    PromptTooLong,
    VllmCounter,
    byte_bound,
    estimate,
    fit_field,
    open_counter,
)
from medhelm_local.records import ChatMessage, InferenceRequest
from medhelm_local.testing.fake_openai import FakeOpenAIServer, fake_chat_tokens

LOCAL = ["http://127.0.0.1"]
SYSTEM = "You are a careful clinician. Answer with one word."


def _render(note: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=f"Note:\n{note}\n\nDoes the patient need follow-up? Answer yes or no.")]


def _dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [m.model_dump() for m in messages]


def _request(messages: list[ChatMessage], max_tokens: int) -> InferenceRequest:
    return InferenceRequest(benchmark="t", instance_id="1", messages=messages, max_tokens=max_tokens)


def _long_note(public_data: Path, chars: int) -> str:
    """Real clinical prose: MTSamples reports from the shared public files, concatenated."""
    texts = []
    for path in sorted((public_data / "mtsamples_sample").rglob("*")):
        if path.is_file() and path.suffix in (".txt", ".csv", ".json", ".md"):
            texts.append(path.read_text(errors="replace"))
        if sum(map(len, texts)) > chars:
            break
    text = "\n".join(texts)
    assert len(text) >= chars, "not enough MTSamples text in the shared data"
    return text[:chars]


async def test_vllm_tokenize_counts_the_chat_template_exactly() -> None:
    with FakeOpenAIServer(tokenizer="vllm", context_length=1024, api_key="k") as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL, api_key="k") as client:
            counter = await open_counter(client, BackendKind.VLLM)
            assert isinstance(counter, VllmCounter) and counter.exact
            assert counter.server_context_length == 1024
            messages = _render("Seen for chest pain; troponin negative, ECG normal sinus rhythm.")
            assert await counter.count(messages) == fake_chat_tokens(_dicts(messages))
            assert counter.describe()["method"] == "vllm"


async def test_llama_cpp_count_endpoint_with_margin_never_undercounts() -> None:
    with FakeOpenAIServer(tokenizer="llama.cpp", api_key="k") as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL, api_key="k") as client:
            counter = await open_counter(client, BackendKind.OPENAI_COMPATIBLE)  # probes vLLM first: 404
            assert isinstance(counter, LlamaCppCounter) and not counter.exact
            messages = _render("Seen for chest pain; troponin negative, ECG normal sinus rhythm.")
            counted = await counter.count(messages)
            assert fake_chat_tokens(_dicts(messages)) <= counted <= fake_chat_tokens(_dicts(messages)) + 64
            assert "llama.cpp" in counter.describe()["note"]
        # Without the key the llama.cpp endpoints refuse, like the real server: no counter, the estimate instead.
        async with ChatClient([server.base_url], server.model_id, LOCAL) as keyless:
            assert isinstance(await open_counter(keyless, BackendKind.OPENAI_COMPATIBLE), EstimateCounter)


async def test_no_tokenize_endpoint_falls_back_to_the_estimate_and_says_so() -> None:
    with FakeOpenAIServer() as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL) as client:
            counter = await open_counter(client, BackendKind.OPENAI_COMPATIBLE)
    assert isinstance(counter, EstimateCounter)
    described = counter.describe()
    assert described["method"] == "estimate" and described["exact"] is False
    assert "no tokenize endpoint" in described["note"]
    messages = _render("x" * 1000)
    assert await counter.count(messages) == estimate(messages) >= 1000 / ESTIMATE_BYTES_PER_TOKEN
    assert byte_bound(messages) >= estimate(messages)


@pytest.mark.parametrize("style", ["vllm", "llama.cpp"])
async def test_long_note_is_truncated_to_fit_and_the_server_accepts_it(public_data: Path, style: str) -> None:
    context, max_tokens = 1024, 64
    note = _long_note(public_data, 20_000)
    with FakeOpenAIServer(tokenizer=style, context_length=context) as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL, max_connections=4) as client:
            counter = await open_counter(client, BackendKind.OPENAI_COMPATIBLE)
            # Unfitted, the server refuses it (the failure the issue reports).
            refused = await client.complete(_request(_render(note), max_tokens), max_retries=0)
            assert refused.error == "http_400"
            fit = await fit_field(counter, _render, note, context - max_tokens)
            assert fit.truncated and fit.removed_chars > 0 and fit.removed_tokens > 0
            assert fit.tokens is not None and fit.tokens <= context - max_tokens
            assert fit.counts <= 10
            kept = fit.messages[1].content
            assert kept.startswith("Note:\n" + note[:200]) and kept.endswith("Answer yes or no.")
            accepted = await client.complete(_request(fit.messages, max_tokens), max_retries=0)
            assert accepted.ok, accepted.error
            # Fitted close to the budget, not far below it: within 10% of the context for the exact count.
            true_tokens = fake_chat_tokens(_dicts(fit.messages))
            slack = context - max_tokens - true_tokens
            assert slack >= 0
            if style == "vllm":
                assert slack <= 0.1 * context
    assert server.context_rejections == 1


async def test_keep_end_keeps_the_most_recent_part() -> None:
    timeline = "\n".join(f"day {i}: creatinine {1 + i / 100:.2f} mg/dL" for i in range(2000))
    with FakeOpenAIServer(tokenizer="vllm", context_length=512) as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL) as client:
            counter = await open_counter(client, BackendKind.VLLM)
            fit = await fit_field(counter, _render, timeline, 512 - 16, keep="end")
    assert fit.truncated and fit.tokens is not None and fit.tokens <= 496
    kept = fit.messages[1].content
    assert "day 1999: creatinine 20.99 mg/dL" in kept and "day 0:" not in kept
    assert kept.split("\n")[1].startswith("day ")  # cut at a line/word boundary, not mid-token


async def test_short_prompt_needs_no_tokenize_request() -> None:
    with FakeOpenAIServer(tokenizer="vllm", context_length=4096) as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL) as client:
            counter = await open_counter(client, BackendKind.VLLM)
            probes = server.tokenize_requests
            fit = await fit_field(counter, _render, "BP 120/80.", 4096 - 64)
    assert not fit.truncated and fit.counts == 0 and fit.tokens is None
    assert server.tokenize_requests == probes


async def test_fixed_part_beyond_the_context_is_prompt_too_long() -> None:
    def render(note: str) -> list[ChatMessage]:
        return [ChatMessage(role="user", content="instruction " * 600 + note)]

    with FakeOpenAIServer(tokenizer="vllm", context_length=512) as server:
        async with ChatClient([server.base_url], server.model_id, LOCAL) as client:
            counter = await open_counter(client, BackendKind.VLLM)
            with pytest.raises(PromptTooLong) as raised:
                await fit_field(counter, render, "a note " * 100, 512 - 16)
    assert raised.value.category == "prompt_too_long" and not raised.value.retryable


async def test_tokenize_failure_is_a_category_without_body() -> None:
    server = FakeOpenAIServer(tokenizer="vllm").start()
    client = ChatClient([server.base_url], server.model_id, LOCAL)
    try:
        counter = await open_counter(client, BackendKind.VLLM)
        server.stop()
        with pytest.raises(RequestFailed) as raised:
            await counter.count(_render("note"))
        assert raised.value.category in ("connect_error", "connection_dropped") and raised.value.retryable
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_real_llama_cpp_server_counts_and_fits(public_data: Path) -> None:
    """The embedded SmolLM2 server: its /extras/tokenize/count plus the margin is never below the prompt tokens
    its own chat completion reports, and a note longer than its 2,048-token context fits after truncation."""
    from medhelm_local.inference.embedded import EMBEDDED_SERVED_MODEL, EmbeddedServer

    context, max_tokens = 2048, 8
    note = _long_note(public_data, 30_000)
    with EmbeddedServer(n_ctx=context) as server:
        async with ChatClient([server.base_url], EMBEDDED_SERVED_MODEL, LOCAL, api_key=server.api_key,
                              max_connections=2, timeout_s=600) as client:
            counter = await open_counter(client, BackendKind.EMBEDDED, context_length=context)
            assert isinstance(counter, LlamaCppCounter) and counter.server_context_length == context
            short = _render("Seen for chest pain; troponin negative, ECG normal sinus rhythm.")
            answered = await client.complete(_request(short, 1), max_retries=0)
            assert answered.ok and answered.prompt_tokens
            counted = await counter.count(short)
            assert answered.prompt_tokens <= counted <= answered.prompt_tokens + 64

            refused = await client.complete(_request(_render(note), max_tokens), max_retries=0)
            assert not refused.ok
            fit = await fit_field(counter, _render, note, context - max_tokens)
            assert fit.truncated and fit.tokens is not None and fit.tokens <= context - max_tokens
            assert fit.removed_tokens > 0 and fit.counts <= 10
            accepted = await client.complete(_request(fit.messages, max_tokens), max_retries=0)
            assert accepted.ok, accepted.error
            assert accepted.prompt_tokens is not None and accepted.prompt_tokens + max_tokens <= context
            # The margin costs little: the fitted prompt uses most of the context.
            assert accepted.prompt_tokens >= context - max_tokens - 128
