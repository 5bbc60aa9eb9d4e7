"""Token counting with the serving engine's own tokenizer, and fitting a prompt into a model's context.

No tokenizer is downloaded or loaded here: the server that will read the prompt counts it.

* vLLM serves ``POST /tokenize`` (at the server root, beside ``/v1``); given chat ``messages`` and
  ``add_generation_prompt`` it applies the model's chat template, so its ``count`` is exactly what a chat
  completion will read, and it reports ``max_model_len``.
* llama-cpp-python's server (the embedded model) serves ``POST /extras/tokenize/count`` (and
  ``/extras/tokenize``) over plain text only. The messages' contents are counted by it, exactly, and a fixed margin
  is added for the chat template's role markers (:data:`TEMPLATE_MARGIN_TOKENS`, :data:`MESSAGE_MARGIN_TOKENS`).
* A server with neither falls back to a conservative estimate from the UTF-8 length
  (:data:`ESTIMATE_BYTES_PER_TOKEN`); :func:`describe` says so, for the run's manifest.

Counting is skipped where it cannot matter: no tokenizer in use makes more tokens than the prompt has UTF-8 bytes
(each token decodes to at least one byte, special tokens aside: :func:`byte_bound`), so a prompt whose byte
bound fits needs no request.

A tokenize request carries prompt text to the same allowlisted server the prompt goes to anyway; its failures
are categories (``tokenize_http_503``, ``timeout``) and never carry a body.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from medhelm_local.home.config import BackendKind
from medhelm_local.inference.backends import server_root
from medhelm_local.inference.client import MAX_TOKEN_COUNT, RETRYABLE_STATUS, ChatClient, RequestFailed
from medhelm_local.inference.server_text import recorded_status
from medhelm_local.records import ChatMessage

# Chat-template margins where only plain text can be counted (llama.cpp) or estimated: per message (role
# markers: ChatML spends 5 tokens on "<|im_start|>user\n...<|im_end|>\n", Llama 3 spends 5) and once (BOS, the
# assistant header that opens the reply, a template's default system preamble).
MESSAGE_MARGIN_TOKENS = 8
TEMPLATE_MARGIN_TOKENS = 32
# The estimate without a tokenizer: tokens = ceil(UTF-8 bytes / this) + margins. Conservative (over-counts) on
# the public clinical benchmark files with SmolLM2's tokenizer; see bench/README.md ("token estimate").
ESTIMATE_BYTES_PER_TOKEN = 2.5
PROBE_TEXT = "medhelm-local tokenizer probe"

Method = Literal["vllm", "llama.cpp", "estimate"]


class PromptTooLong(RequestFailed):
    """Even with its long field emptied, the prompt and the reply do not fit the model's context."""

    def __init__(self) -> None:
        super().__init__("prompt_too_long", retryable=False)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _margins(messages: Sequence[ChatMessage]) -> int:
    return TEMPLATE_MARGIN_TOKENS + MESSAGE_MARGIN_TOKENS * len(messages)


def byte_bound(messages: Sequence[ChatMessage]) -> int:
    """An upper bound on any tokenizer's count: one token per UTF-8 byte, plus the template margins."""
    return sum(utf8_len(m.content) for m in messages) + _margins(messages)


def estimate(messages: Sequence[ChatMessage]) -> int:
    """The conservative estimate used when the server has no tokenize endpoint."""
    return sum(math.ceil(utf8_len(m.content) / ESTIMATE_BYTES_PER_TOKEN) for m in messages) + _margins(messages)


class TokenCounter:
    """Counts the tokens a chat request's messages take in the model's context."""

    method: Method = "estimate"
    exact = False  # True: the engine applied the chat template itself (vLLM); no margin was added
    server_context_length: int | None = None  # what the server says its context is (vLLM's max_model_len)

    async def count(self, messages: Sequence[ChatMessage]) -> int:
        return estimate(messages)

    async def upper_bound(self, messages: Sequence[ChatMessage]) -> int:
        """A cheap bound that is never below :meth:`count`; no request when the byte bound already says enough."""
        return byte_bound(messages)

    def describe(self) -> dict[str, Any]:
        """For the run's manifest: how tokens were counted."""
        notes = {
            "vllm": "counted by the vLLM server's /tokenize with the model's chat template",
            "llama.cpp": (f"contents counted by the llama.cpp server's /extras/tokenize/count, plus "
                          f"{TEMPLATE_MARGIN_TOKENS} + {MESSAGE_MARGIN_TOKENS} per message for the chat template"),
            "estimate": (f"the server has no tokenize endpoint: estimated as UTF-8 bytes / "
                         f"{ESTIMATE_BYTES_PER_TOKEN} plus {TEMPLATE_MARGIN_TOKENS} + {MESSAGE_MARGIN_TOKENS} per "
                         "message (conservative, not exact)"),
        }
        return {"method": self.method, "exact": self.exact, "server_context_length": self.server_context_length,
                "note": notes[self.method]}


class EstimateCounter(TokenCounter):
    pass


def _failed(status: int, retry_after_s: float | None = None) -> RequestFailed:
    return RequestFailed(f"tokenize_http_{recorded_status(status)}", retryable=status in RETRYABLE_STATUS,
                         status=status, retry_after_s=retry_after_s)


def _int_field(payload: Any, key: str) -> int:
    """A tokenizer's count; ``tokenize_invalid_json`` where it is none: not an integer, negative, or beyond
    ``MAX_TOKEN_COUNT`` (no prompt is that long, and the run's records of a cut keep 32-bit counts)."""
    value = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise RequestFailed("tokenize_invalid_json", retryable=True)
    return value


class _EngineCounter(TokenCounter):
    """A counter that asks the serving engine's own tokenizer endpoint (at ``root_url``, for ``model_id``)."""

    def __init__(self, client: ChatClient, root_url: str, model_id: str) -> None:
        self._client = client
        self._root = root_url
        self._model = model_id


class VllmCounter(_EngineCounter):
    """vLLM's ``POST /tokenize`` with chat messages: exact, chat template included."""

    method: Method = "vllm"
    exact = True

    async def count(self, messages: Sequence[ChatMessage]) -> int:
        payload = {"model": self._model, "messages": [m.model_dump() for m in messages],
                   "add_generation_prompt": True}
        status, reply, retry_after_s = await self._client.post_json(self._root, "/tokenize", payload)
        if status != 200:
            raise _failed(status, retry_after_s)
        return _int_field(reply, "count")


class LlamaCppCounter(_EngineCounter):
    """llama-cpp-python's ``POST /extras/tokenize/count`` over the contents, plus the chat-template margins."""

    method: Method = "llama.cpp"
    exact = False

    async def count_text(self, text: str) -> int:
        status, reply, retry_after_s = await self._client.post_json(self._root, "/extras/tokenize/count",
                                                                    {"model": self._model, "input": text})
        if status != 200:
            raise _failed(status, retry_after_s)
        return _int_field(reply, "count")

    async def count(self, messages: Sequence[ChatMessage]) -> int:
        # One request for all contents; the newline between them stands for the template's separators.
        return await self.count_text("\n".join(m.content for m in messages)) + _margins(messages)


async def _probe_vllm(client: ChatClient, root: str, model_id: str) -> VllmCounter | None:
    counter = VllmCounter(client, root, model_id)
    try:
        status, reply, _ = await client.post_json(root, "/tokenize", {
            "model": model_id, "messages": [{"role": "user", "content": PROBE_TEXT}], "add_generation_prompt": True})
    except RequestFailed:
        return None
    if status != 200 or not isinstance(reply, dict) or not isinstance(reply.get("count"), int):
        return None
    counter.server_context_length = reported_context_length(reply.get("max_model_len"))
    return counter


def reported_context_length(value: Any) -> int | None:
    """A server's ``max_model_len`` as the run records it (its manifest, ``runs show``): a context length from 1 to
    ``MAX_TOKEN_COUNT``; None (not reported) for anything else. A number is the server's own choice too: unbounded,
    it could spell a prompt it was sent in its digits (Python reads an integer of thousands of them)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TOKEN_COUNT:
        return None
    return value


async def _probe_llama_cpp(client: ChatClient, root: str, model_id: str) -> LlamaCppCounter | None:
    counter = LlamaCppCounter(client, root, model_id)
    try:
        await counter.count_text(PROBE_TEXT)
    except RequestFailed:
        return None
    return counter


async def open_counter(client: ChatClient, kind: BackendKind, *, context_length: int | None = None
                       ) -> TokenCounter:
    """The best counter the model's server offers: asked once, of the first replica (replicas serve one model).

    The embedded model is llama.cpp; vLLM is asked for ``/tokenize``; any other OpenAI-compatible server is asked
    for both, then estimated. ``context_length``: the embedded server's ``n_ctx`` (it does not report it).
    """
    root = server_root(client.base_urls[0])
    model_id = client.model_id
    probes: list[Callable[[ChatClient, str, str], Any]]
    if kind == BackendKind.EMBEDDED:
        probes = [_probe_llama_cpp]
    elif kind == BackendKind.VLLM:
        probes = [_probe_vllm]
    else:
        probes = [_probe_vllm, _probe_llama_cpp]
    for probe in probes:
        counter: TokenCounter | None = await probe(client, root, model_id)
        if counter is not None:
            if kind == BackendKind.EMBEDDED and context_length is not None:
                counter.server_context_length = context_length
            return counter
    return EstimateCounter()


# -- fitting a prompt ---------------------------------------------------------------------------------------

Keep = Literal["start", "end"]
SNAP_CHARS = 64  # a cut moves back to a whitespace at most this far, so words are not split


@dataclass(frozen=True)
class Fit:
    """A prompt fitted into a token budget by shortening one field.

    ``tokens``: the fitted prompt's count (None: not counted, its byte bound already fits); ``removed_tokens``:
    how many fewer than the whole prompt's count (0 when nothing was cut); ``removed_chars``: characters cut
    from the field; ``counts``: tokenize requests made.
    """

    messages: list[ChatMessage]
    tokens: int | None
    truncated: bool
    removed_tokens: int
    removed_chars: int
    field_chars: int
    counts: int


def _snap(text: str, k: int, keep: Keep) -> int:
    """Move a cut at ``k`` (characters kept) back to a line break, else a space, that keeps no more, if one is
    within :data:`SNAP_CHARS`; a cut already at a boundary stays."""
    if k <= 0 or k >= len(text):
        return max(0, min(k, len(text)))
    if keep == "start":
        if text[k].isspace():
            return k
        window = text[max(0, k - SNAP_CHARS):k]
        for mark in ("\n", " "):
            at = window.rfind(mark)
            if at > 0:
                return k - (len(window) - at)
        return k
    start = len(text) - k  # keep text[start:]
    if text[start - 1].isspace():
        return k
    window = text[start:start + SNAP_CHARS]
    for mark in ("\n", " "):
        at = window.find(mark)
        if at >= 0:
            return k - (at + 1)
    return k


def kept_piece(text: str, k: int, keep: Keep) -> str:
    """The ``k`` characters of ``text`` a cut keeps: its start (``keep="start"``) or its end."""
    return text[:k] if keep == "start" else text[len(text) - k:]


async def fit_field(counter: TokenCounter, render: Callable[[str], list[ChatMessage]], text: str, budget: int,
                    *, keep: Keep = "start", max_counts: int = 24) -> Fit:
    """The messages ``render(piece)`` with the longest piece of ``text`` whose count is within ``budget`` tokens.

    ``keep="start"`` keeps the beginning (a note), ``"end"`` the end (a timeline, most recent last). The search
    interpolates on counts, so a long field usually takes 3 to 6 tokenize requests; every accepted cut was
    counted and fits. Raises :class:`PromptTooLong` when even an empty field does not fit.
    """
    full = render(text)
    if await counter.upper_bound(full) <= budget:
        return Fit(full, None, False, 0, 0, len(text), 0)
    counts = 1
    full_tokens = await counter.count(full)
    if full_tokens <= budget:
        return Fit(full, full_tokens, False, 0, 0, len(text), counts)
    empty = render("")
    empty_tokens = await counter.count(empty)
    counts += 1
    if empty_tokens > budget:
        raise PromptTooLong()
    lo, lo_tokens, lo_messages = 0, empty_tokens, empty  # kept chars known to fit
    hi, hi_tokens = len(text), full_tokens  # kept chars known not to fit
    while hi - lo > 1 and counts < max_counts:
        # Interpolate the token count linearly between the bounds, aiming just under the budget.
        share = (budget - lo_tokens) / max(1, hi_tokens - lo_tokens)
        guess = lo + int((hi - lo) * share * 0.995)
        guess = _snap(text, min(max(guess, lo + 1), hi - 1), keep)
        if guess <= lo:  # the snap fell back onto a fitting cut: bisect without snapping
            guess = (lo + hi) // 2
        messages = render(kept_piece(text, guess, keep))
        tokens = await counter.count(messages)
        counts += 1
        if tokens <= budget:
            lo, lo_tokens, lo_messages = guess, tokens, messages
            if budget - tokens <= max(2, (hi_tokens - lo_tokens) // 64):
                break  # within a couple of tokens of the budget: close enough
        else:
            hi, hi_tokens = guess, tokens
    return Fit(lo_messages, lo_tokens, True, full_tokens - lo_tokens, len(text) - lo, len(text), counts)
