"""A fake OpenAI-compatible chat-completions server, served for real by uvicorn on 127.0.0.1.

Behaviour is configurable: a responder function (messages -> text), latency, a number of concurrent slots
(requests beyond it queue, like a GPU server's batch), a prefix cache that rewards shared prompt prefixes
(uncached prefix blocks cost prefill time; an LRU of block hashes like vLLM's automatic prefix caching), and
injected faults (HTTP 5xx, 429, timeouts, dropped connections, invalid JSON bodies) at given rates, drawn from
a seeded RNG. ``backend`` makes it validate the request's ``response_format`` as a real engine does (see
:func:`check_response_format`): a shape the engine refuses gets the engine's own error status, so a client that
sends the wrong shape fails here as it would in production. A tokenizer can be served the way vLLM
(``POST /tokenize``) or llama-cpp-python (``POST /extras/tokenize``, ``/extras/tokenize/count``) serve theirs, and
a context length enforced like vLLM does (HTTP 400 when prompt + ``max_tokens`` exceed it); its tokens are words
and punctuation marks (:func:`fake_tokens`), and its chat template adds :data:`FAKE_MESSAGE_TOKENS` per message and
:data:`FAKE_REPLY_TOKENS` once. ``python -m medhelm_local.testing.fake_openai`` serves it from the command line
(benchmarks, the fake ``vllm`` executable of the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from medhelm_local.testing.asgi_thread import free_port, serve_in_thread

Responder = Callable[[list[dict[str, Any]]], str]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


TOKENIZER_STYLES = ("vllm", "llama.cpp")
FAKE_MESSAGE_TOKENS = 4  # "<|role|>", role, "\n" ... "<|end|>"
FAKE_REPLY_TOKENS = 3  # BOS, and "<|assistant|>" "\n" opening the reply
_TOKEN = re.compile(r"\w+|[^\w\s]")


def fake_tokens(text: str) -> list[int]:
    """The fake tokenizer: a token per word and per punctuation mark, each with a stable id."""
    return [int.from_bytes(hashlib.blake2b(t.encode(), digest_size=3).digest(), "big") for t in _TOKEN.findall(text)]


def fake_chat_tokens(messages: list[dict[str, Any]]) -> int:
    """What the fake's chat template makes of ``messages`` (with the reply's opening): its prompt tokens."""
    return sum(FAKE_MESSAGE_TOKENS + len(_TOKEN.findall(str(m.get("content") or ""))) for m in messages) + (
        FAKE_REPLY_TOKENS)


def constant_responder(text: str) -> Responder:
    return lambda _messages: text


def hash_responder(choices: tuple[str, ...] = ("yes", "no", "maybe")) -> Responder:
    """A deterministic answer per prompt: the same request always gets the same text."""

    def respond(messages: list[dict[str, Any]]) -> str:
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
        return choices[digest[0] % len(choices)]

    return respond


@dataclass
class Faults:
    http_5xx: float = 0.0
    http_429: float = 0.0
    timeout: float = 0.0
    drop: float = 0.0
    invalid_json: float = 0.0
    # replies naming another model than the one asked for, as from a router in front of the server that sends some
    # requests to another model (``misrouted_to``)
    wrong_model: float = 0.0
    misrouted_to: str = "other-model"
    hang_s: float = 30.0  # how long a "timeout" fault stalls before dropping
    retry_after: str | None = None  # a Retry-After header sent, as given (hostile values too), with 429s and 503s
    tokenize_429_first: int = 0  # the first this many tokenize requests are answered 429 (with ``retry_after``)

    def retry_after_headers(self) -> list[tuple[bytes, bytes]]:
        return [] if self.retry_after is None else [(b"retry-after", self.retry_after.encode("latin-1"))]


@dataclass
class PrefixCache:
    """An LRU of chained prefix-block hashes: a request pays ``per_block_s`` for each leading block not cached."""

    capacity_blocks: int = 0
    block_chars: int = 256
    per_block_s: float = 0.0
    hits: int = 0
    misses: int = 0
    _blocks: OrderedDict[bytes, None] = field(default_factory=OrderedDict)

    def cost_s(self, text: str) -> float:
        if self.capacity_blocks <= 0:
            return 0.0
        digest = hashlib.blake2b(digest_size=8)
        uncached = 0
        hit_run = True
        for start in range(0, len(text), self.block_chars):
            digest.update(text[start:start + self.block_chars].encode())
            key = digest.copy().digest()
            if hit_run and key in self._blocks:
                self._blocks.move_to_end(key)
                self.hits += 1
                continue
            hit_run = False
            uncached += 1
            self.misses += 1
            self._blocks[key] = None
            if len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
        return uncached * self.per_block_s


BACKENDS = ("vllm", "llama.cpp", "no-response-format", "permissive")


def _llama_cpp_error(loc: list[str], msg: str) -> tuple[int, dict[str, Any]]:
    # llama-cpp-python's server wraps its pydantic request-validation error in an HTTP 500
    detail = [{"type": "literal_error", "loc": ["body", *loc], "msg": msg}]
    return 500, {"error": {"message": str(detail), "type": "internal_server_error", "param": None, "code": None}}


def _vllm_error(msg: str) -> tuple[int, dict[str, Any]]:
    return 400, {"object": "error", "message": msg, "type": "BadRequestError", "param": None, "code": 400}


def check_response_format(backend: str, response_format: Any) -> tuple[int, dict[str, Any]] | None:
    """The error (status, body) the ``backend`` answers a request's ``response_format`` with; None: accepted.

    * ``vllm``: ``text``, ``json_object``, ``json_schema`` (with ``json_schema.name`` and ``json_schema.schema``)
      or ``structural_tag``; anything else is a 400 request-validation error.
    * ``llama.cpp`` (llama-cpp-python's server): ``text`` or ``json_object``, an optional ``schema`` object beside
      the type; anything else (``json_schema`` included) is an HTTP 500 wrapping the validation error.
    * ``no-response-format``: a server without structured output: the field itself is refused (422, FastAPI).
    * ``permissive``: anything goes.
    """
    if response_format is None or backend == "permissive":
        return None
    if backend == "no-response-format":
        return 422, {"detail": [{"type": "extra_forbidden", "loc": ["body", "response_format"],
                                 "msg": "Extra inputs are not permitted"}]}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if backend == "llama.cpp":
        if kind not in ("text", "json_object"):
            return _llama_cpp_error(["response_format", "type"], "Input should be 'text' or 'json_object'")
        if "schema" in response_format and not isinstance(response_format["schema"], dict | bool):
            return _llama_cpp_error(["response_format", "schema"], "Input should be a valid JSON object")
        return None
    if backend == "vllm":
        if kind not in ("text", "json_object", "json_schema", "structural_tag"):
            return _vllm_error("response_format.type: Input should be 'text', 'json_object', 'json_schema' or "
                               "'structural_tag'")
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) \
                    or not isinstance(spec.get("schema"), dict):
                return _vllm_error("response_format.json_schema: 'name' and 'schema' are required when "
                                   "type is 'json_schema'")
        return None
    raise ValueError(f"unknown backend {backend!r}; one of {BACKENDS}")


@dataclass
class FakeOpenAIServer:
    responder: Responder = field(default_factory=lambda: constant_responder("yes"))
    latency_s: float = 0.0
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    model_id: str = "fake-model"
    api_key: str | None = None
    slots: int | None = None  # concurrent requests served; more wait in a queue
    prefix_cache: PrefixCache = field(default_factory=PrefixCache)
    version: str = "0.0.0-fake"
    tokenizer: str | None = None  # "vllm" or "llama.cpp": serve that engine's tokenize endpoint(s); None: 404
    context_length: int | None = None  # prompt + max_tokens beyond it is refused (HTTP 400), like vLLM
    tokenize_requests: int = 0
    context_rejections: int = 0
    backend: str = "vllm"  # whose response_format validation to apply (BACKENDS)
    requests_seen: int = 0
    rejected: int = 0  # requests refused for their response_format
    completions_sent: int = 0
    max_in_flight: int = 0
    in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    record_bodies: bool = False
    hold_after: int | None = None  # chat requests beyond this many (requests_seen) wait unanswered for release_held()
    held: int = 0
    port: int = 0
    _rng: random.Random = field(init=False)
    _slots: asyncio.Semaphore | None = field(init=False, default=None)
    _server: uvicorn.Server | None = field(init=False, default=None)
    _thread: threading.Thread | None = field(init=False, default=None)
    _release: asyncio.Event | None = field(init=False, default=None)
    _loop: asyncio.AbstractEventLoop | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; one of {BACKENDS}")
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
        needs_key = path.startswith("/v1/") or (path.startswith("/extras/") and self.tokenizer == "llama.cpp")
        if self.api_key is not None and needs_key:  # like vLLM: /health, /version, /tokenize stay open
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
        if path == "/version":
            await _respond(send, 200, {"version": self.version})
            return
        if path == "/stats":
            await _respond(send, 200, self.stats())
            return
        if self.tokenizer is not None and scope["method"] == "POST" and path in (
                "/tokenize", "/extras/tokenize", "/extras/tokenize/count"):
            await self._tokenize(path, body, send)
            return
        if path != "/v1/chat/completions" or scope["method"] != "POST":
            await _respond(send, 404, {"error": "not found"})
            return
        request = json.loads(body)
        if self.slots is None:
            await self._chat(request, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        async with self._slots:
            await self._chat(request, send)

    def stats(self) -> dict[str, Any]:
        return {"requests_seen": self.requests_seen, "completions_sent": self.completions_sent,
                "rejected": self.rejected,
                "max_in_flight": self.max_in_flight, "prefix_cache_hits": self.prefix_cache.hits,
                "prefix_cache_misses": self.prefix_cache.misses, "tokenize_requests": self.tokenize_requests,
                "context_rejections": self.context_rejections}

    async def _tokenize(self, path: str, body: bytes, send: Send) -> None:
        """vLLM: ``/tokenize`` with ``prompt`` or chat ``messages``; llama.cpp: ``/extras/tokenize[/count]`` with
        ``input`` (plain text, BOS added). The wrong engine's path is a 404, as on the real servers."""
        vllm_path = path == "/tokenize"
        if vllm_path != (self.tokenizer == "vllm"):
            await _respond(send, 404, {"error": "not found"})
            return
        self.tokenize_requests += 1
        if self.tokenize_requests <= self.faults.tokenize_429_first:
            await _respond(send, 429, {"error": "rate limited"}, self.faults.retry_after_headers())
            return
        try:
            request = json.loads(body)
            if vllm_path and isinstance(request.get("messages"), list):
                count = fake_chat_tokens(request["messages"])
                tokens = list(range(count))
            elif vllm_path:
                tokens = fake_tokens(str(request["prompt"]))
                if request.get("add_special_tokens", True):
                    tokens = [1, *tokens]
            else:
                tokens = [1, *fake_tokens(str(request["input"]))]
        except (ValueError, KeyError, TypeError, AttributeError):
            await _respond(send, 422, {"error": "invalid request"})
            return
        if vllm_path:
            await _respond(send, 200, {"count": len(tokens), "max_model_len": self.context_length or 4096,
                                       "tokens": tokens})
        elif path.endswith("/count"):
            await _respond(send, 200, {"count": len(tokens)})
        else:
            await _respond(send, 200, {"tokens": tokens})

    async def _chat(self, request: dict[str, Any], send: Send) -> None:
        self.requests_seen += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold_after is not None and self.requests_seen > self.hold_after:
                await self._wait_for_release()
            await self._chat_inner(request, send)
        finally:
            self.in_flight -= 1

    async def _chat_inner(self, request: dict[str, Any], send: Send) -> None:
        if self.record_bodies:
            self.bodies.append(request)
        refusal = check_response_format(self.backend, request.get("response_format"))
        if refusal is not None:
            self.rejected += 1
            await _respond(send, *refusal)
            return
        if self.context_length is not None:
            needed = fake_chat_tokens(request["messages"]) + int(request.get("max_tokens") or 0)
            if needed > self.context_length:
                self.context_rejections += 1
                await _respond(send, 400, {"object": "error", "type": "BadRequestError", "message": (
                    f"This model's maximum context length is {self.context_length} tokens. However, you "
                    f"requested {needed} tokens.")})
                return
        roll = self._rng.random()
        f = self.faults
        prompt = "\x1e".join(f"{m.get('role')}\x1f{m.get('content')}" for m in request["messages"])
        delay = self.latency_s + self.prefix_cache.cost_s(prompt)
        if delay:
            await asyncio.sleep(delay)
        edges = [(f.http_5xx, "5xx"), (f.http_429, "429"), (f.timeout, "timeout"), (f.drop, "drop"),
                 (f.invalid_json, "invalid_json"), (f.wrong_model, "wrong_model")]
        threshold = 0.0
        fault = None
        for rate, name in edges:
            threshold += rate
            if roll < threshold:
                fault = name
                break
        wait = f.retry_after_headers()
        if fault == "5xx":
            await _respond(send, 503, {"error": "overloaded"}, wait)
            return
        if fault == "429":
            await _respond(send, 429, {"error": "rate limited"}, wait)
            return
        if fault == "timeout":
            await asyncio.sleep(f.hang_s)
            raise ConnectionResetError("fake timeout")
        if fault == "drop":
            # Start the response, then die: the client sees the connection close mid-response.
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"1000")]})
            raise ConnectionResetError("fake dropped connection")
        if fault == "invalid_json":
            await _send_raw(send, 200, b'{"choices": [{"message": {"content": ')
            return
        text = self.responder(request["messages"])
        if self.tokenizer is not None:
            prompt_tokens = fake_chat_tokens(request["messages"])
        else:
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request["messages"])
        self.completions_sent += 1
        await _respond(send, 200, {
            "id": f"cmpl-{self.requests_seen}", "object": "chat.completion", "created": int(time.time()),
            # vLLM names the served model the request asked for
            "model": f.misrouted_to if fault == "wrong_model" else request.get("model", self.model_id),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())},
        })

    async def _wait_for_release(self) -> None:
        if self._release is None:
            self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
        if self.hold_after is None:  # released meanwhile, from another thread (which reads _loop after this)
            return
        self.held += 1
        try:
            await self._release.wait()
        finally:
            self.held -= 1

    def release_held(self) -> None:
        """Stop holding: the requests waiting are answered, and so are those that follow (any thread). A later
        ``hold_after`` holds again."""
        self.hold_after = None
        loop, release = self._loop, self._release
        if loop is not None and release is not None:
            loop.call_soon_threadsafe(self._open, release)

    def _open(self, release: asyncio.Event) -> None:
        release.set()
        if self._release is release:
            self._release = None

    def start(self) -> FakeOpenAIServer:
        if not self.port:
            self.port = free_port()
        self._server, self._thread = serve_in_thread(self, self.port, what="fake server", lifespan="on",
                                                     timeout_keep_alive=30)
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


async def _respond(send: Send, status: int, payload: dict[str, Any],
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await _send_raw(send, status, json.dumps(payload).encode(), headers)


async def _send_raw(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


RESPONDERS: dict[str, Callable[[], Responder]] = {
    "hash": hash_responder,
    "yes": lambda: constant_responder("yes"),
}


def main(argv: list[str] | None = None) -> None:
    """Serve a fake in the foreground until SIGTERM/SIGINT; prints ``READY <port>`` once it accepts requests."""
    parser = argparse.ArgumentParser(prog="fake_openai")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-id", default="fake-model")
    parser.add_argument("--api-key-env", default=None, help="require this environment variable's value as key")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--slots", type=int, default=None)
    parser.add_argument("--responder", choices=sorted(RESPONDERS), default="hash")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--version", default="0.0.0-fake")
    parser.add_argument("--backend", choices=BACKENDS, default="vllm",
                        help="whose response_format validation to apply")
    parser.add_argument("--prefix-cache-blocks", type=int, default=0)
    parser.add_argument("--prefix-block-chars", type=int, default=256)
    parser.add_argument("--per-block-s", type=float, default=0.0)
    parser.add_argument("--tokenizer", choices=TOKENIZER_STYLES, default=None,
                        help="serve this engine's tokenize endpoint(s)")
    parser.add_argument("--context-length", type=int, default=None)
    for name in ("http_5xx", "http_429", "timeout", "drop", "invalid_json", "wrong_model"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=0.0, dest=name)
    parser.add_argument("--hang-s", type=float, default=30.0)
    parser.add_argument("--retry-after", default=None, help="a Retry-After header sent with 429s and 503s")
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = FakeOpenAIServer(
        responder=RESPONDERS[args.responder](), latency_s=args.latency, seed=args.seed, model_id=args.model_id,
        api_key=api_key, slots=args.slots, version=args.version, backend=args.backend,
        prefix_cache=PrefixCache(args.prefix_cache_blocks, args.prefix_block_chars, args.per_block_s),
        tokenizer=args.tokenizer, context_length=args.context_length,
        faults=Faults(http_5xx=args.http_5xx, http_429=args.http_429, timeout=args.timeout, drop=args.drop,
                      invalid_json=args.invalid_json, wrong_model=args.wrong_model, hang_s=args.hang_s,
                      retry_after=args.retry_after),
        port=args.port,
    )
    config = uvicorn.Config(server, host="127.0.0.1", port=args.port or _free_port(), log_level="critical",
                            access_log=False, lifespan="on", timeout_keep_alive=60, backlog=4096)
    server.port = config.port
    uv = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(uv.serve())
        while not uv.started:
            if task.done():
                await task
                return
            await asyncio.sleep(0.01)
        sys.stdout.write(f"READY {server.port}\n")
        sys.stdout.flush()
        await task

    asyncio.run(serve())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
