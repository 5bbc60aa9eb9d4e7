"""An async OpenAI-compatible chat-completions client on httpx: vLLM, llama.cpp, any allowlisted endpoint.

Failures become categories (``http_503``, ``timeout``, ``connect_error``, ``invalid_json``) and never carry a
response body, which may echo the prompt.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from medhelm_local.inference.egress import check_egress
from medhelm_local.records import InferenceRequest, InferenceResult

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class RequestFailed(Exception):
    """One attempt failed; ``category`` is safe to log and store."""

    def __init__(self, category: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(category)
        self.category = category
        self.retryable = retryable
        self.status = status


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None


def request_body(model_id: str, request: InferenceRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model_id,
        "messages": [m.model_dump() for m in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "stream": False,
    }
    if request.seed is not None:
        body["seed"] = request.seed
    if request.response_format is not None:
        body["response_format"] = request.response_format
    return body


def parse_completion(payload: bytes) -> Completion:
    try:
        data = json.loads(payload)
        choice = data["choices"][0]
        text = choice["message"]["content"]
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise TypeError
        usage = data.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            finish_reason=choice.get("finish_reason"),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailed("invalid_json", retryable=True) from None


class ChatClient:
    """Sends chat completions to one model served at one or more allowlisted base URLs."""

    def __init__(
        self,
        base_urls: Sequence[str],
        model_id: str,
        allowlist: Sequence[str],
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_connections: int = 256,
    ) -> None:
        if not base_urls:
            raise ValueError("at least one base URL")
        for url in base_urls:
            check_egress(url, allowlist)
        self.base_urls = list(base_urls)
        self.model_id = model_id
        self.allowlist = list(allowlist)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            trust_env=False,  # never pick up a proxy from the environment: egress is the allowlist's alone
            follow_redirects=False,
        )
        self._next = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def pick_endpoint(self) -> str:
        url = self.base_urls[self._next % len(self.base_urls)]
        self._next += 1
        return url

    async def complete_once(self, request: InferenceRequest, base_url: str | None = None) -> Completion:
        url = f"{base_url or self.pick_endpoint()}/chat/completions"
        check_egress(url, self.allowlist)
        try:
            response = await self._client.post(url, json=request_body(self.model_id, request))
        except httpx.TimeoutException:
            raise RequestFailed("timeout", retryable=True) from None
        except httpx.ConnectError:
            raise RequestFailed("connect_error", retryable=True) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise RequestFailed("connection_dropped", retryable=True) from None
        except httpx.HTTPError:
            raise RequestFailed("http_error", retryable=True) from None
        if response.status_code != 200:
            status = response.status_code
            raise RequestFailed(f"http_{status}", retryable=status in RETRYABLE_STATUS, status=status)
        return parse_completion(response.content)

    async def complete(
        self, request: InferenceRequest, *, max_retries: int = 4, backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
    ) -> InferenceResult:
        """Send with jittered exponential backoff; after the last attempt the error is returned, not raised."""
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            endpoint = self.pick_endpoint()
            try:
                completion = await self.complete_once(request, endpoint)
            except RequestFailed as failure:
                if not failure.retryable or attempt > max_retries:
                    return InferenceResult(
                        error=failure.category, latency_s=time.perf_counter() - started, attempts=attempt,
                        endpoint=endpoint,
                    )
                delay = min(backoff_cap_s, backoff_base_s * 2 ** (attempt - 1))
                await asyncio.sleep(random.uniform(0, delay))  # full jitter
                continue
            return InferenceResult(
                text=completion.text,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                finish_reason=completion.finish_reason,
                latency_s=time.perf_counter() - started,
                attempts=attempt,
                endpoint=endpoint,
            )
