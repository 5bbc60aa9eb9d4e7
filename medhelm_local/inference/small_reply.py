"""A small reply from a model server (``/health``, ``/version``, ``/v1/models``, a tokenizer), read bounded in size and
in time.

httpx bounds each read, not a reply: a server streaming a body without end was read whole into memory, and one
trickling its reply (a byte before each read times out) held the caller for as long as it trickled. Here the whole
exchange, headers included, is bounded by ``timeout_s`` (TimeoutError beyond) and the body by
``MAX_RESPONSE_BYTES``, as sent and as decoded (ResponseTooLarge beyond). The chat client reads its small requests
so; :func:`get_small` does the same for callers that wait for it (``serve vllm``, the console's System page, the
embedded server's readiness probe).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from medhelm_local.inference.lane import MAX_RESPONSE_BYTES, ResponseTooLarge
from medhelm_local.inference.tls import tls_context


async def read_small(client: httpx.AsyncClient, method: str, url: str, timeout_s: float, **kwargs: Any
                     ) -> tuple[int, bytes, str | None]:
    """A request's status, body and ``Retry-After`` header (None: none). Raises TimeoutError, ResponseTooLarge and
    httpx's errors."""
    async with (asyncio.timeout(timeout_s),
                client.stream(method, url, timeout=timeout_s, **kwargs) as response):
        body = bytearray()
        async for chunk in response.aiter_bytes():  # decoded as it comes: the limit holds for both
            body += chunk
            if len(body) > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge
        return response.status_code, bytes(body), response.headers.get("retry-after")


def get_small(url: str, *, timeout_s: float, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` and wait for it: its status and body, read as :func:`read_small` reads them (no proxy from the
    environment, no redirect followed; the site's CA bundle, :func:`.tls_context`). Raises TimeoutError,
    ResponseTooLarge and httpx's errors."""

    async def get() -> tuple[int, bytes]:
        async with httpx.AsyncClient(trust_env=False, verify=tls_context([url]), follow_redirects=False) as client:
            status, body, _ = await read_small(client, "GET", url, timeout_s, headers=headers)
            return status, body

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(get())
    # A caller inside a running loop that blocks it anyway (the embedded server starts within the runner's loop):
    # the request gets a loop of its own, in a thread.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="small-reply") as pool:
        return pool.submit(asyncio.run, get()).result()
