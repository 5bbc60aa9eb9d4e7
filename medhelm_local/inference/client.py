"""An async OpenAI-compatible chat-completions client on httpx: vLLM, llama.cpp, any allowlisted endpoint.

Failures become categories (``http_503``, ``timeout``, ``connect_error``, ``invalid_json``, ``model_mismatch``)
and never carry a response body, which may echo the prompt; a status the appliance does not tell apart is only its
class (``http_4xx_other``, ``http_5xx_other``, ``http_other``: ``server_text.recorded_status``).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar

import httpcore
import httpx

from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.lane import Lane, ResponseTooLarge, UnsupportedEncoding
from medhelm_local.inference.server_text import (
    UNRECOGNISED,
    recorded_finish_reason,
    recorded_model_name,
    recorded_status,
)
from medhelm_local.inference.small_reply import read_small
from medhelm_local.inference.structured import is_format_rejection
from medhelm_local.inference.tls import tls_context
from medhelm_local.jsontext import loads_strict
from medhelm_local.logs import get_logger
from medhelm_local.records import InferenceRequest, InferenceResult

log = get_logger(__name__)

POOL_CONNECTIONS = 16  # connections of the client for small requests (see ChatClient)
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# The server refused the request's structured-output shape (``response_format``): a request-validation error,
# the same for every retry (see inference/structured.py).
FORMAT_REJECTED = "format_rejected"
# The reply names another model than the one the request asked for (a router or proxy in front of the server
# that sent it elsewhere): the answer is not the evaluated model's, never scored. Not retried: a server that
# answers for another model is misconfigured, and a retry that happened to reach the right one would hide it.
MODEL_MISMATCH = "model_mismatch"
# Failures that say "this replica is unreachable or wedged", as opposed to "this request went wrong".
ENDPOINT_FAILURES = frozenset({"connect_error", "connection_dropped", "timeout", "http_502", "http_503", "http_504"})
USER_AGENT = f"python-httpx/{httpx.__version__}".encode()  # the small-request client's, on every request alike
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_TOKEN_COUNT = 2**31 - 1  # a usage count above this is no measurement (and no store column holds it)
# A reply with one of these statuses may say, in ``Retry-After``, when to ask again (RFC 9110, 10.2.3); the next
# attempt then waits at least that long, but never longer than the backoff cap or the request's timeout.
RETRY_AFTER_STATUS = frozenset({429, 503})
MAX_RETRY_AFTER_CHARS = 64  # a longer header is no delay or date: ignored, the client's own backoff applies
_DELAY_SECONDS = re.compile(r"[0-9]+")


def parse_retry_after(value: bytes | str | None, now: float) -> float | None:
    """The seconds a ``Retry-After`` header asks a client to wait: delay-seconds (``120``) or an HTTP-date
    (``Wed, 21 Oct 2026 07:28:00 GMT``; a date in the past is 0), ``now`` being the wall clock (``time.time()``).
    None when absent, malformed or absurd (negative, fractional, longer than ``MAX_RETRY_AFTER_CHARS``, a date
    that is no date): the caller then keeps its own backoff. Never raises."""
    if value is None:
        return None
    if isinstance(value, bytes):
        if len(value) > MAX_RETRY_AFTER_CHARS:
            return None
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    text = value.strip()
    if not text or len(text) > MAX_RETRY_AFTER_CHARS:
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError, OSError):
        return None


def retry_delay(attempt: int, *, base_s: float, cap_s: float, retry_after_s: float | None = None,
                limit_s: float | None = None, uniform: Callable[[float, float], float] = random.uniform) -> float:
    """How long to wait before attempt ``attempt + 1``: exponential backoff with full jitter (uniform in 0 to
    ``min(cap_s, base_s * 2 ** (attempt - 1))``); a server's ``Retry-After`` (``retry_after_s``) is a lower bound,
    itself bounded by ``cap_s`` and ``limit_s`` (the request's whole-attempt timeout), so that a server asking
    for an hour, or for ever, holds a request no longer than its own backoff or one attempt could."""
    delay = uniform(0.0, min(cap_s, base_s * 2 ** min(attempt - 1, 64)))
    if retry_after_s is not None:
        bound = cap_s if limit_s is None else min(cap_s, limit_s)
        delay = max(delay, min(retry_after_s, bound))
    return delay


T = TypeVar("T")


async def retry_transient(call: Callable[[], Awaitable[T]], *, max_retries: int, base_s: float = 0.5,
                          cap_s: float = 30.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
    """``call()``, made again after a retryable :class:`RequestFailed` (a tokenizer that timed out or answered 503)
    up to ``max_retries`` times, waiting :func:`retry_delay` (a 429's or 503's ``Retry-After`` the least) between
    attempts; a failure that is not retryable, or the last one, is raised."""
    attempt = 0
    while True:
        try:
            return await call()
        except RequestFailed as failure:
            attempt += 1
            if not failure.retryable or attempt > max_retries:
                raise
            await sleep(retry_delay(attempt, base_s=base_s, cap_s=cap_s, retry_after_s=failure.retry_after_s))


class AttemptGate(Protocol):
    """Admits each attempt (e.g. the runner's adaptive concurrency limiter) and learns from its outcome."""

    async def acquire(self) -> None: ...

    def release(self, category: str | None) -> None: ...


class RequestFailed(Exception):
    """One attempt failed; ``category`` is safe to log and store."""

    def __init__(self, category: str, *, retryable: bool, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(category)
        self.category = category
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s  # the server's Retry-After, in seconds (None: it sent none we read)


@dataclass(frozen=True)
class _Target:
    """A replica's completion URL, parsed once: where a lane connects and the headers every completion carries."""

    url: httpcore.URL
    origin: httpcore.Origin
    headers: list[tuple[bytes, bytes]]


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    model: str | None = None  # the model the reply names (None: it names none)


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
    if request.stop:
        body["stop"] = request.stop
    return body


def _token_count(value: Any, limit: int = MAX_TOKEN_COUNT) -> int | None:
    """A usage count as the server reported it, or None (unknown) when it is not a count: not an integer (a
    string, a float, a boolean), negative, or beyond ``limit`` (what the store keeps, a 32-bit INTEGER column; for
    the reply's tokens, the request's ``max_tokens``, which no server generates past), never coerced or assumed."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= min(limit, MAX_TOKEN_COUNT):
        return None
    return value


def _finish_reason(value: Any) -> str | None:
    """The reply's ``finish_reason`` as the server reported it where the OpenAI API defines it; None (unknown) when
    it is not a string: a number or an object is no reason, and is never kept; ``unrecognised`` for any other
    string (the server's own text: the store keeps it unencrypted)."""
    return recorded_finish_reason(value)


def parse_completion(payload: bytes, max_tokens: int = MAX_TOKEN_COUNT) -> Completion:
    """The completion in a 200 reply to a request for at most ``max_tokens``; ``invalid_json`` when it is not one
    (a ``model`` that is not a string included, JSON nested past the parser's recursion limit), or holds a string
    the store cannot keep (an unpaired surrogate escape: see ``jsontext``)."""
    try:
        data = loads_strict(payload)
        choice = data["choices"][0]
        text = choice["message"]["content"]
        if text is None:
            text = ""
        model = data.get("model")
        if not isinstance(text, str) or not (model is None or isinstance(model, str)):
            raise TypeError
        usage = data.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        return Completion(
            text=text,
            prompt_tokens=_token_count(usage.get("prompt_tokens")),
            completion_tokens=_token_count(usage.get("completion_tokens"), max_tokens),
            finish_reason=_finish_reason(choice.get("finish_reason")),
            model=model,
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
        raise RequestFailed("invalid_json", retryable=True) from None


@dataclass
class EndpointHealth:
    url: str
    in_flight: int = 0
    attempts: int = 0
    ok: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    times_down: int = 0
    down_until: float = 0.0
    failure_categories: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"url": self.url, "attempts": self.attempts, "ok": self.ok, "failures": self.failures,
                "times_marked_down": self.times_down, "failure_categories": dict(self.failure_categories)}


class EndpointPool:
    """Balances attempts over a model's replicas: least in flight first; a failing replica is avoided.

    After ``failure_threshold`` consecutive endpoint failures a replica is marked down for a cooldown that doubles
    each time (up to ``max_cooldown_s``); after it, the next attempt probes it again. With a single replica there
    is nowhere else to go, so only the request's own backoff applies.
    """

    def __init__(self, urls: Sequence[str], *, failure_threshold: int = 3, base_cooldown_s: float = 1.0,
                 max_cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ValueError("at least one base URL")
        self.endpoints = [EndpointHealth(u) for u in urls]
        self.failure_threshold = failure_threshold
        self.base_cooldown_s = base_cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._turn = 0

    def _get(self, url: str) -> EndpointHealth:
        for endpoint in self.endpoints:
            if endpoint.url == url:
                return endpoint
        raise KeyError(url)

    def choose(self) -> tuple[str, float]:
        """The replica to use and how long to wait before using it (0 unless every replica is down)."""
        now = self._clock()
        self._turn += 1
        n = len(self.endpoints)
        rotated = [self.endpoints[(self._turn + i) % n] for i in range(n)]
        up = [e for e in rotated if e.down_until <= now]
        if up:
            chosen = min(up, key=lambda e: e.in_flight)
            return chosen.url, 0.0
        soonest = min(rotated, key=lambda e: e.down_until)
        return soonest.url, soonest.down_until - now

    async def acquire(self) -> str:
        url, wait_s = self.choose()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        self._get(url).in_flight += 1
        return url

    def release(self, url: str, category: str | None) -> None:
        endpoint = self._get(url)
        endpoint.in_flight -= 1
        endpoint.attempts += 1
        if category is None:
            endpoint.ok += 1
            endpoint.consecutive_failures = 0
            return
        endpoint.failures += 1
        endpoint.failure_categories[category] = endpoint.failure_categories.get(category, 0) + 1
        if category not in ENDPOINT_FAILURES or len(self.endpoints) == 1:
            return
        endpoint.consecutive_failures += 1
        if endpoint.consecutive_failures >= self.failure_threshold:
            cooldown = min(self.max_cooldown_s, self.base_cooldown_s * 2 ** endpoint.times_down)
            endpoint.times_down += 1
            endpoint.consecutive_failures = 0
            endpoint.down_until = self._clock() + cooldown

    def summaries(self) -> list[dict[str, Any]]:
        return [e.summary() for e in self.endpoints]


class ChatClient:
    """Sends chat completions to one model served at one or more allowlisted base URLs (replicas).

    Each completion borrows a :class:`Lane`: one keep-alive connection to one replica, returned when the reply has
    been read. Lanes are made on demand (at most ``max_connections`` per replica) and reused most recent first, so
    only as many connections stay open as requests were in flight at once. A lane is httpcore's HTTP/1.1
    connection (the engine httpx itself sends through) used directly, its I/O on plain asyncio
    (``inference.netio``): what httpx's transport and models add on top of it for every request (a connection
    pool's scan and locks, request and response objects, content decoders) was about a third of the runner's
    CPU per request at hundreds in flight (bench/README.md, "Line rate"). Small requests (``get_json``,
    ``post_json``) share one ordinary httpx client.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        model_id: str,
        allowlist: Sequence[str] | EgressPolicy,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_connections: int = 256,
        reply_model: str | None = None,
        known_models: Collection[str] = (),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not base_urls:
            raise ValueError("at least one base URL")
        self.egress = EgressPolicy.of(allowlist)  # a bare allowlist: refusals are raised, recorded nowhere
        for url in base_urls:
            self.egress.check(url)
        self.base_urls = list(base_urls)
        self.model_id = model_id
        self.reply_model = reply_model or model_id  # the name replies must carry (None: the one asked for)
        # Model names a warning or a record may show: those appliance.yaml configures. A reply's, or a name the
        # servers list, is the server's own text, which may echo a prompt (``server_text``); it is never shown.
        self.known_models = frozenset({model_id, self.reply_model, *known_models})
        self.allowlist = list(self.egress.allowlist)
        self.timeout_s = timeout_s
        self.max_connections = max(1, max_connections)
        self.pool = EndpointPool(self.base_urls)
        self._mismatch_warned = False
        self._sleep = sleep  # waits out a retry's backoff (a test records the delays instead)
        self._wall_clock = wall_clock  # reads a Retry-After HTTP-date
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._tls = tls_context(self.base_urls)
        self._timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        self._client = self._make_client(POOL_CONNECTIONS)
        self._lane_extensions = {"timeout": self._timeout.as_dict()}
        self._targets: dict[str, _Target] = {}  # completion URLs, parsed once and checked against the allowlist
        self._lanes: dict[str, list[Lane]] = {}  # base URL -> every lane made for it
        self._idle: dict[str, list[Lane]] = {}  # base URL -> idle lanes, most recent last
        self._lane_waiters: dict[str, deque[asyncio.Future[Lane]]] = {}

    def _make_client(self, connections: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers=self._headers,
            verify=self._tls,
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            trust_env=False,  # never pick up a proxy from the environment: egress is the allowlist's alone
            follow_redirects=False,
        )

    async def _lease(self, base_url: str, target: _Target) -> Lane:
        idle = self._idle.setdefault(base_url, [])
        if idle:
            return idle.pop()
        lanes = self._lanes.setdefault(base_url, [])
        if len(lanes) < self.max_connections:
            lane = Lane(target.origin, self._tls)
            lanes.append(lane)
            return lane
        # Every lane is busy (more attempts than max_connections, e.g. without a gate): wait for one.
        future: asyncio.Future[Lane] = asyncio.get_running_loop().create_future()
        self._lane_waiters.setdefault(base_url, deque()).append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed a lane just before the cancellation
                self._give_back(base_url, future.result())
            raise

    def _give_back(self, base_url: str, lane: Lane) -> None:
        waiters = self._lane_waiters.get(base_url)
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(lane)
                return
        self._idle.setdefault(base_url, []).append(lane)

    async def aclose(self) -> None:
        await self._client.aclose()
        for lanes in self._lanes.values():
            for lane in lanes:
                await lane.aclose()

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _small(self, method: str, url: str, timeout_s: float, **kwargs: Any
                     ) -> tuple[int, bytes, str | None]:
        """A small request's status, body and ``Retry-After`` header (None: none), bounded by ``timeout_s`` as a
        whole and ``MAX_RESPONSE_BYTES`` (``small_reply``). Raises TimeoutError, ResponseTooLarge and httpx's
        errors."""
        return await read_small(self._client, method, url, timeout_s, **kwargs)

    def _retry_after_s(self, status: int, header: bytes | str | None) -> float | None:
        """The seconds a 429's or 503's ``Retry-After`` asks for (None: another status, no header, or malformed)."""
        return parse_retry_after(header, self._wall_clock()) if status in RETRY_AFTER_STATUS else None

    def pick_endpoint(self) -> str:
        return self.pool.choose()[0]

    async def get_json(self, base_url: str, path: str, *, timeout_s: float = 10.0) -> Any:
        """GET a small JSON document (``/v1/models``, ``/version``); None when unavailable or not JSON (nested past
        the parser's recursion limit included)."""
        url = f"{base_url}{path}"
        self.egress.check(url)
        try:
            status, content, _ = await self._small("GET", url, timeout_s)
            if status != 200:
                return None
            return json.loads(content)
        except (httpx.HTTPError, ValueError, RecursionError, TimeoutError, ResponseTooLarge):
            return None

    async def post_json(self, base_url: str, path: str, payload: dict[str, Any], *, timeout_s: float = 30.0
                        ) -> tuple[int, Any, float | None]:
        """POST a small JSON request (a tokenizer endpoint); the status, the parsed reply (None if not JSON, nested
        past the parser's recursion limit included) and, for a 429 or 503, the seconds its ``Retry-After`` asks for
        (None: none, or malformed).

        Raises RequestFailed (a category, never a body) when no HTTP reply came back.
        """
        url = f"{base_url}{path}"
        self.egress.check(url)
        try:
            status, content, retry_after = await self._small("POST", url, timeout_s, json=payload)
        except (httpx.TimeoutException, TimeoutError):
            raise RequestFailed("timeout", retryable=True) from None
        except ResponseTooLarge:
            raise RequestFailed("response_too_large", retryable=False) from None
        except httpx.ConnectError:
            raise RequestFailed("connect_error", retryable=True) from None
        except httpx.HTTPError:
            raise RequestFailed("connection_dropped", retryable=True) from None
        wait_s = self._retry_after_s(status, retry_after)
        try:
            return status, json.loads(content), wait_s
        except (ValueError, RecursionError):
            return status, None, wait_s

    def _target(self, base: str) -> _Target:
        target = self._targets.get(base)
        if target is None:
            text = f"{base}/chat/completions"
            self.egress.check(text)
            url = httpx.URL(text)
            headers = [(b"host", url.netloc), (b"accept", b"application/json"),
                       (b"accept-encoding", b"identity"),  # a lane undoes gzip or deflate only (inference/lane.py)
                       (b"connection", b"keep-alive"), (b"user-agent", USER_AGENT),
                       (b"content-type", b"application/json")]
            headers += [(k.lower().encode(), v.encode()) for k, v in self._headers.items()]
            target = self._targets[base] = _Target(
                url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
                origin=httpcore.Origin(url.raw_scheme, url.raw_host, url.port or DEFAULT_PORTS[url.scheme]),
                headers=headers)
        return target

    async def complete_once(self, request: InferenceRequest, base_url: str | None = None) -> Completion:
        base = base_url or self.pick_endpoint()
        target = self._target(base)
        body = json.dumps(request_body(self.model_id, request), separators=(",", ":")).encode()
        prepared = httpcore.Request(b"POST", target.url,
                                    headers=[*target.headers, (b"content-length", str(len(body)).encode())],
                                    content=body, extensions=self._lane_extensions)
        lane = await self._lease(base, target)
        try:
            # The timeout bounds the whole attempt: httpcore's bounds each read only, and a server that trickles
            # its reply (a byte before each read times out) would hold the attempt for as long as it trickles.
            async with asyncio.timeout(self.timeout_s):
                status, content, retry_after = await lane.post(prepared)
        except TimeoutError:
            raise RequestFailed("timeout", retryable=True) from None
        except UnsupportedEncoding:
            raise RequestFailed("invalid_encoding", retryable=False) from None
        except ResponseTooLarge:
            raise RequestFailed("response_too_large", retryable=False) from None
        except httpcore.TimeoutException:
            raise RequestFailed("timeout", retryable=True) from None
        except httpcore.ConnectError:
            raise RequestFailed("connect_error", retryable=True) from None
        except (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError):
            raise RequestFailed("connection_dropped", retryable=True) from None
        except httpcore.ProtocolError:  # the connection layer itself refused (a local protocol error)
            raise RequestFailed("http_error", retryable=True) from None
        except httpcore.NetworkError:
            raise RequestFailed("connection_dropped", retryable=True) from None
        except httpcore.UnsupportedProtocol:
            raise RequestFailed("http_error", retryable=False) from None
        finally:
            self._give_back(base, lane)
        if status != 200:
            if request.response_format is not None and is_format_rejection(status, content):
                raise RequestFailed(FORMAT_REJECTED, retryable=False, status=status)
            wait_s = self._retry_after_s(status, retry_after)
            # The category keeps the status only where the appliance tells it apart (server_text): the server
            # chooses it. Retrying goes by the status itself.
            raise RequestFailed(f"http_{recorded_status(status)}", retryable=status in RETRYABLE_STATUS, status=status,
                                retry_after_s=wait_s)
        completion = parse_completion(content, request.max_tokens)
        # vLLM and the embedded llama.cpp server name the model the request asked for (others, the endpoint's
        # reply_model); a reply without a name (servers that leave it out) says nothing either way and is kept.
        if completion.model is not None and completion.model != self.reply_model:
            self._warn_mismatch(base, completion.model)
            raise RequestFailed(MODEL_MISMATCH, retryable=False)
        return completion

    def _warn_mismatch(self, base_url: str, replied: str) -> None:
        """Say once per client that another model answered: its name where appliance.yaml configures it, never
        another (the server sees the prompts: it may be one's text, in a reply or in its /v1/models), nor its
        length."""
        if not self._mismatch_warned:
            self._mismatch_warned = True
            shown = recorded_model_name(replied, self.known_models)
            known = shown != UNRECOGNISED
            log.warning("inference.model_mismatch", url=base_url, expected_model=self.reply_model,
                        replied_model=shown if known else None, replied_model_known=known)

    async def complete(
        self, request: InferenceRequest, *, max_retries: int = 4, backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0, gate: AttemptGate | None = None, slot_held: bool = False,
    ) -> InferenceResult:
        """Send with jittered exponential backoff; after the last attempt the error is returned, not raised.

        A 429 or 503 reply's ``Retry-After`` (seconds or an HTTP-date) is the least the next attempt waits, up to
        ``backoff_cap_s`` and the client's ``timeout_s`` (:func:`retry_delay`); a malformed one is ignored.

        ``gate`` admits every attempt (a request waiting out its backoff holds no slot); ``slot_held``: the
        caller already acquired the gate for the first attempt.
        """
        started = time.perf_counter()
        attempt = 0
        holding = slot_held
        while True:
            attempt += 1
            if gate is not None and not holding:
                await gate.acquire()
            holding = False
            endpoint = await self.pool.acquire()
            category: str | None = None
            try:
                completion = await self.complete_once(request, endpoint)
            except RequestFailed as failure:
                category = failure.category
                self.pool.release(endpoint, category)
                if gate is not None:
                    gate.release(category)
                if not failure.retryable or attempt > max_retries:
                    return InferenceResult(
                        error=failure.category, latency_s=time.perf_counter() - started, attempts=attempt,
                        endpoint=endpoint,
                    )
                await self._sleep(retry_delay(attempt, base_s=backoff_base_s, cap_s=backoff_cap_s,
                                              retry_after_s=failure.retry_after_s, limit_s=self.timeout_s))
                continue
            except BaseException:
                self.pool.release(endpoint, "cancelled")
                if gate is not None:
                    gate.release("cancelled")
                raise
            self.pool.release(endpoint, None)
            if gate is not None:
                gate.release(None)
            return InferenceResult(
                text=completion.text,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                finish_reason=completion.finish_reason,
                latency_s=time.perf_counter() - started,
                attempts=attempt,
                endpoint=endpoint,
            )
