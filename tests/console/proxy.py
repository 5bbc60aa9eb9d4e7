"""A stand-in for oauth2-proxy in tests: forwards every request to the console with the user and groups it
asserts, connecting from its own loopback address (127.0.0.2) so the console can tell it from anyone else.
Whatever identity headers the browser sent are dropped, as oauth2-proxy does."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import uvicorn

from medhelm_local.testing.asgi_thread import free_port, serve_in_thread

PROXY_ADDRESS = "127.0.0.2"
_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"x-forwarded-user",
        b"x-forwarded-groups", b"x-forwarded-email", b"x-forwarded-preferred-username"}
_DROP_OUT = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


class HeaderProxy:
    def __init__(self, upstream: str, user: str | None, groups: list[str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.user = user
        self.groups = groups
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k.lower() not in _HOP]
        if self.user is not None:
            headers += [("X-Forwarded-User", self.user), ("X-Forwarded-Groups", ",".join(self.groups))]
        query = scope.get("query_string", b"").decode()
        url = self.upstream + scope["path"] + (f"?{query}" if query else "")
        transport = httpx.AsyncHTTPTransport(local_address=PROXY_ADDRESS)
        async with httpx.AsyncClient(transport=transport, timeout=60) as client:
            reply = await client.request(scope["method"], url, headers=headers, content=body)
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.multi_items()
               if k.lower() not in _DROP_OUT]
        content = reply.content
        out.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": reply.status_code, "headers": out})
        await send({"type": "http.response.body", "body": content})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HeaderProxy:
        self.port = free_port()
        self._server, self._thread = serve_in_thread(self, self.port, what="proxy")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
