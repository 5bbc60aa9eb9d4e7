"""A fake OpenAI-compatible chat-completions server, served for real by uvicorn on 127.0.0.1.

Behaviour is configurable: a responder function (messages -> text), latency, and injected faults (HTTP 5xx,
429, timeouts, dropped connections, invalid JSON bodies) at given rates, drawn from a seeded RNG.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

Responder = Callable[[list[dict[str, Any]]], str]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def constant_responder(text: str) -> Responder:
    return lambda _messages: text


@dataclass
class Faults:
    http_5xx: float = 0.0
    http_429: float = 0.0
    timeout: float = 0.0
    drop: float = 0.0
    invalid_json: float = 0.0
    hang_s: float = 30.0  # how long a "timeout" fault stalls before dropping


@dataclass
class FakeOpenAIServer:
    responder: Responder = field(default_factory=lambda: constant_responder("yes"))
    latency_s: float = 0.0
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    model_id: str = "fake-model"
    api_key: str | None = None
    requests_seen: int = 0
    completions_sent: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    record_bodies: bool = False
    port: int = 0
    _rng: random.Random = field(init=False)
    _server: uvicorn.Server | None = field(init=False, default=None)
    _thread: threading.Thread | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if self.api_key is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {self.api_key}".encode():
                await _respond(send, 401, {"error": "unauthorized"})
                return
        if path == "/v1/models":
            await _respond(send, 200, {"object": "list", "data": [{"id": self.model_id, "object": "model"}]})
            return
        if path == "/health":
            await _respond(send, 200, {})
            return
        if path != "/v1/chat/completions" or scope["method"] != "POST":
            await _respond(send, 404, {"error": "not found"})
            return
        await self._chat(json.loads(body), send)

    async def _chat(self, request: dict[str, Any], send: Send) -> None:
        self.requests_seen += 1
        if self.record_bodies:
            self.bodies.append(request)
        roll = self._rng.random()
        f = self.faults
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        edges = [(f.http_5xx, "5xx"), (f.http_429, "429"), (f.timeout, "timeout"), (f.drop, "drop"),
                 (f.invalid_json, "invalid_json")]
        threshold = 0.0
        fault = None
        for rate, name in edges:
            threshold += rate
            if roll < threshold:
                fault = name
                break
        if fault == "5xx":
            await _respond(send, 503, {"error": "overloaded"})
            return
        if fault == "429":
            await _respond(send, 429, {"error": "rate limited"})
            return
        if fault == "timeout":
            await asyncio.sleep(f.hang_s)
            raise ConnectionResetError("fake timeout")
        if fault == "drop":
            raise ConnectionResetError("fake dropped connection")
        if fault == "invalid_json":
            await _send_raw(send, 200, b'{"choices": [{"message": {"content": ')
            return
        text = self.responder(request["messages"])
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request["messages"])
        self.completions_sent += 1
        await _respond(send, 200, {
            "id": f"cmpl-{self.requests_seen}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", self.model_id),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())},
        })

    def start(self) -> FakeOpenAIServer:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = uvicorn.Config(self, host="127.0.0.1", port=self.port, log_level="error", access_log=False,
                                lifespan="on", timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _respond(send: Send, status: int, payload: dict[str, Any]) -> None:
    await _send_raw(send, status, json.dumps(payload).encode())


async def _send_raw(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
