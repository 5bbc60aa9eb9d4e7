"""Prompts that fit the model: prompt + ``max_tokens`` within the model's context, counted by the serving engine.

The budget is the run's context length minus the request's ``max_tokens``. A prompt whose byte bound fits is sent
as built (no tokenize request: the common case for short closed-ended prompts on a large context). Otherwise the
spec's designated long field (``truncate``: the note, the timeline) is cut to fit with the server's own tokenizer
(:func:`medhelm_local.inference.tokens.fit_field`), and the cut is recorded per instance. A prompt that cannot fit
(no designated field, or too long even without it) is recorded as the error ``prompt_too_long`` and never sent.

The context length a run uses is decided once, when the run is created, and kept in its manifest
(``manifest["context"]``): the configured ``context_length`` (``models add`` or ``models update``), lowered to the
server's own limit where the server reports one (vLLM's ``max_model_len``); a model configured without
``context_length`` takes the server's limit, or, when the server reports none, the default 2,048 (``source:
default``, logged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.home.config import ModelEndpoint
from medhelm_local.inference.client import retry_transient
from medhelm_local.inference.tokens import PromptTooLong, TokenCounter, byte_bound, fit_field, kept_piece
from medhelm_local.prompts.build import build_request
from medhelm_local.records import ChatMessage, InferenceRequest, Instance, Truncated


def context_entry(endpoint: ModelEndpoint, counter: TokenCounter) -> dict[str, Any]:
    """``manifest["context"]``: the context length this run fits prompts into, where it came from, and how
    tokens are counted."""
    configured = endpoint.context_tokens
    explicit = endpoint.context_length is not None
    server = counter.server_context_length
    if server is None or (explicit and configured <= server):
        # Unset and not reported: the default (2,048), which may be far below the model's; said in the manifest
        # and logged, so that truncation by it is never mistaken for the model's own limit.
        length, source = configured, "config" if explicit else "default"
    else:
        length, source = server, "server"
    return {"context_length": length, "source": source, "configured": configured if explicit else None,
            "server_reported": server, "tokens": counter.describe()}


def run_context_length(manifest: Mapping[str, Any] | None) -> int | None:
    """The context length a run was created with (None for runs created before prompt fitting)."""
    value = ((manifest or {}).get("context") or {}).get("context_length")
    return value if isinstance(value, int) and value > 0 else None


class PromptFitter:
    """Builds each request of a run so that it fits ``context_length`` tokens with its reply."""

    def __init__(self, counter: TokenCounter, context_length: int, *, max_retries: int = 4,
                 backoff_base_s: float = 0.5, backoff_cap_s: float = 30.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.counter = counter
        self.context_length = context_length
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self._sleep = sleep  # waits out a retry's backoff (a test records the delays instead)
        self.counted = 0  # prompts that needed the tokenizer
        self.truncated = 0

    def fits_unchecked(self, request: InferenceRequest) -> bool:
        """True when no tokenizer could make the prompt too long: send it as built, without a count."""
        return byte_bound(request.messages) + request.max_tokens <= self.context_length

    async def fit(self, spec: BenchmarkSpec, instance: Instance, request: InferenceRequest
                  ) -> tuple[InferenceRequest, Truncated | None]:
        """``request`` (built from ``spec`` and ``instance``) fitted; retries transient tokenizer failures.

        Raises RequestFailed: ``prompt_too_long``, or the tokenizer's failure after the retries. A 429's or 503's
        ``Retry-After`` is the least a retry waits, up to ``backoff_cap_s`` (as for completions)."""
        return await retry_transient(lambda: self._fit_once(spec, instance, request), max_retries=self.max_retries,
                                     base_s=self.backoff_base_s, cap_s=self.backoff_cap_s, sleep=self._sleep)

    async def _fit_once(self, spec: BenchmarkSpec, instance: Instance, request: InferenceRequest
                        ) -> tuple[InferenceRequest, Truncated | None]:
        budget = self.context_length - request.max_tokens
        if budget <= 0:
            raise PromptTooLong()
        self.counted += 1
        truncate = spec.truncate
        if truncate is None or truncate.field not in instance.fields:
            if await self.counter.count(request.messages) > budget:
                raise PromptTooLong()
            return request, None
        field = truncate.field

        def render(piece: str) -> list[ChatMessage]:
            return with_field(spec, instance, request, field, piece).messages

        text = instance.fields[field]
        fit = await fit_field(self.counter, render, text, budget, keep=truncate.keep)
        if not fit.truncated:
            return request, None
        self.truncated += 1
        fitted = request.model_copy(update={"messages": fit.messages})
        return fitted, Truncated(field=field, field_chars=fit.field_chars, removed_chars=fit.removed_chars,
                                 removed_tokens=fit.removed_tokens, prompt_tokens=fit.tokens or 0)


def with_field(spec: BenchmarkSpec, instance: Instance, request: InferenceRequest, field: str, piece: str
               ) -> InferenceRequest:
    """``request`` with the instance's ``field`` replaced by ``piece`` in its prompt (a cut of the long field)."""
    fields = {**instance.fields, field: piece}
    messages = build_request(spec, instance.model_copy(update={"fields": fields}), seed=request.seed,
                             max_tokens=request.max_tokens).messages
    return request.model_copy(update={"messages": messages})


def sent_request(spec: BenchmarkSpec, instance: Instance, seed: int | None, truncated: Truncated | None
                 ) -> InferenceRequest:
    """The request an item was sent with, built again: from the run's frozen spec, the instance and the cut
    recorded for it (if its prompt was cut to fit). The store keeps this instead of a copy of each prompt (only
    its digest, ``InferenceRequest.digest``, to check the rebuild against): a run adds no copy of patient text."""
    request = build_request(spec, instance, seed=seed)
    if truncated is None:
        return request
    text = instance.fields[truncated.field]
    keep = spec.truncate.keep if spec.truncate is not None else "start"
    return with_field(spec, instance, request, truncated.field,
                      kept_piece(text, len(text) - truncated.removed_chars, keep))
