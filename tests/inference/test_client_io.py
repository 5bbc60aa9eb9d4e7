"""The completion lanes (inference/lane.py, their I/O in inference/netio.py): keep-alive, a connection the server
closed while idle, timeouts, TLS with certificate verification, and content codings."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import itertools
import json
import ssl
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.netio import AsyncioStream
from medhelm_local.records import ChatMessage, InferenceRequest
from medhelm_local.testing.asgi_thread import free_port, serve_in_thread
from medhelm_local.testing.fake_openai import FakeOpenAIServer

LOCAL = ["http://127.0.0.1"]
REPLY = json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


def _request(i: int) -> InferenceRequest:
    return InferenceRequest(benchmark="b", instance_id=str(i), max_tokens=1,
                            messages=[ChatMessage(role="user", content=f"question {i}")])


class RawServer:
    """A minimal HTTP/1.1 server that counts connections; ``close_after`` replies per connection, then it closes
    the connection without saying so (as a server with a short keep-alive timeout does); ``silent``: never
    answers."""

    def __init__(self, *, close_after: int | None = None, silent: bool = False, encoding: bytes | None = None,
                 reply: bytes = REPLY) -> None:
        self.close_after = close_after
        self.silent = silent
        self.encoding = encoding  # a content-encoding header to send with ``reply``
        self.reply = reply
        self.connections = 0
        self.requests = 0
        self.heads: list[bytes] = []
        self.port = 0

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                self.requests += 1
                self.heads.append(head)
                if self.silent:
                    await asyncio.sleep(3600)
                coding = b"content-encoding: " + self.encoding + b"\r\n" if self.encoding else b""
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + coding
                             + b"content-length: " + str(len(self.reply)).encode() + b"\r\n\r\n" + self.reply)
                await writer.drain()
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def test_lanes_keep_connections_alive_and_run_on_the_asyncio_backend() -> None:
    async def scenario() -> tuple[int, int, list[str | None]]:
        raw = RawServer()
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL) as client:
            sem = asyncio.Semaphore(4)

            async def one(i: int) -> str | None:
                async with sem:
                    result = await client.complete(_request(i), max_retries=0)
                    return result.text if result.ok else result.error

            texts = await asyncio.gather(*(one(i) for i in range(40)))
            lanes = [lane for lanes in client._lanes.values() for lane in lanes]
            connections = [lane._connection for lane in lanes if lane._connection is not None]
            assert connections and all(isinstance(c._network_stream, AsyncioStream) for c in connections), \
                "the lanes fell back to httpcore's default I/O (an httpcore upgrade?)"
            return raw.connections, raw.requests, texts

    connections, requests, texts = asyncio.run(scenario())
    assert texts == ["yes"] * 40 and requests == 40
    assert connections <= 4  # one keep-alive connection per request in flight, reused


def test_a_lanes_request_takes_no_turn_of_the_event_loop_for_httpcores_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore guards a connection's state with anyio's lock, whose every acquire yields to the event loop even
    when the lock is free; a lane, used by one request at a time, gives its connections a lock that does not."""
    from httpcore import _synchronization

    taken: list[object] = []
    enter = _synchronization.AsyncLock.__aenter__

    async def counted(self: _synchronization.AsyncLock) -> _synchronization.AsyncLock:
        taken.append(self)
        return await enter(self)

    monkeypatch.setattr(_synchronization.AsyncLock, "__aenter__", counted)

    async def scenario() -> list[str | None]:
        raw = RawServer()
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL) as client:
            texts = []
            for i in range(5):  # one lane: a new connection, then the same one kept alive
                result = await client.complete(_request(i), max_retries=0)
                texts.append(result.text if result.ok else result.error)
            return texts

    assert asyncio.run(scenario()) == ["yes"] * 5
    assert taken == []


def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed() -> None:
    async def scenario() -> tuple[int, list[str | None]]:
        raw = RawServer(close_after=1)  # every connection is closed after one reply
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL) as client:
            texts = []
            for i in range(5):  # one lane, used again after the server closed its connection
                result = await client.complete(_request(i), max_retries=0)
                texts.append(result.text if result.ok else result.error)
                await asyncio.sleep(0.05)  # the server's close arrives while the lane is idle
            return raw.connections, texts

    connections, texts = asyncio.run(scenario())
    assert texts == ["yes"] * 5
    assert connections == 5


async def _read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP request, its body included (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)


def _streaming(head: bytes, pieces: Iterable[bytes], pause_s: float, *, read_body: bool = True
               ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A connection handler that reads the request, writes ``head``, then ``pieces`` with ``pause_s`` between them
    (a server trickling its reply, or sending without end), until the client goes away."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if read_body:
                await _read_request(reader)
            else:
                await reader.readuntil(b"\r\n\r\n")
            writer.write(head)
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(pause_s)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return handle


async def _one_attempt(port: int, timeout_s: float, index: int = 0) -> tuple[str | None, float]:
    """One request to 127.0.0.1:``port``, no retry: its error category (None: answered) and how long it took."""
    async with ChatClient([f"http://127.0.0.1:{port}/v1"], "m", LOCAL, timeout_s=timeout_s) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await client.complete(_request(index), max_retries=0)
        return result.error, loop.time() - started


def test_a_server_that_never_answers_is_a_timeout() -> None:
    async def scenario() -> tuple[str | None, float]:
        raw = RawServer(silent=True)
        server = await raw.start()
        async with server:
            return await _one_attempt(raw.port, 0.3)

    error, elapsed = asyncio.run(scenario())
    assert error == "timeout"
    assert 0.25 <= elapsed < 3


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_replica_is_verified_and_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    fake = FakeOpenAIServer()
    port = free_port()
    server, thread = serve_in_thread(fake, port, what="TLS fake server", ssl_certfile=str(cert),
                                     ssl_keyfile=str(key))
    base = f"https://127.0.0.1:{port}/v1"

    async def complete(n: int) -> list[str | None]:
        async with ChatClient([base], fake.model_id, ["https://127.0.0.1"]) as client:
            results = await asyncio.gather(*(client.complete(_request(i), max_retries=0) for i in range(n)))
            return [r.text if r.ok else r.error for r in results]

    try:
        # Without the certificate trusted, the connection is refused by verification: nothing is sent.
        assert asyncio.run(complete(1)) == ["connect_error"]
        assert fake.completions_sent == 0
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert asyncio.run(complete(12)) == ["yes"] * 12
        assert fake.completions_sent == 12
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_probes_trust_the_site_ca_the_requests_trust(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-house https server signed by the site's CA (SSL_CERT_FILE, the chart's runner.extraEnv): the chat
    client trusted it, but `models wait` (the runner's wait-for-models init container, `helm test`), the console's
    System page and `serve vllm`'s small replies made their own httpx client with trust_env=False, which also drops
    SSL_CERT_FILE: every probe failed verification (ConnectError) and each Job failed after waiting an hour for a
    server that was up. Every one of them now uses the client's TLS context."""
    from medhelm_local.home.config import BackendKind, ModelEndpoint
    from medhelm_local.inference.egress import EgressPolicy
    from medhelm_local.inference.readiness import wait_for_models
    from medhelm_local.inference.small_reply import get_small
    from medhelm_local.webconsole.pages_it import _probe

    cert, key = _self_signed(tmp_path)
    fake = FakeOpenAIServer()
    port = free_port()
    server, thread = serve_in_thread(fake, port, what="TLS fake server", ssl_certfile=str(cert),
                                     ssl_keyfile=str(key))
    base = f"https://127.0.0.1:{port}/v1"
    local = EgressPolicy.of(["https://127.0.0.1"])
    endpoints = [ModelEndpoint(name="site-llm", kind=kind, base_urls=[base], served_model=fake.model_id)
                 for kind in (BackendKind.OPENAI_COMPATIBLE, BackendKind.VLLM)]

    def probes() -> list[bool]:
        health = wait_for_models(endpoints, local, timeout_s=2, interval_s=0.2)
        return [h.ok for h in health]

    try:
        # Not trusted: refused by verification, as the chat client refuses it.
        assert probes() == [False, False]
        with pytest.raises(httpx.ConnectError, match=r"CERTIFICATE_VERIFY_FAILED"):
            get_small(f"{base}/models", timeout_s=5)
        assert _probe(local, "site-llm", base, endpoints[0]).detail == "unreachable (ConnectError)"
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert probes() == [True, True]
        assert get_small(f"{base}/models", timeout_s=5)[0] == 200
        assert _probe(local, "site-llm", base, endpoints[0]).healthy is True
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_a_plain_http_endpoint_gets_a_tls_context_that_trusts_nothing() -> None:
    from medhelm_local.inference.tls import tls_context

    plain = tls_context(["http://127.0.0.1:8000/v1"])
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0  # no CA bundle loaded: nothing could ever verify
    tls = tls_context(["http://127.0.0.1:8000/v1", "HTTPS://vllm.svc.cluster.local/v1"])
    assert tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname
    assert tls.cert_store_stats()["x509_ca"] > 0


@pytest.mark.parametrize(("encoding", "reply", "expected"), [
    (None, REPLY, "yes"),
    (b"gzip", gzip.compress(REPLY), "yes"),  # a proxy that compresses although identity was asked for
    (b"br", REPLY, "invalid_encoding"),  # never passed on undecoded, never retried
])
def test_a_lane_asks_for_identity_and_decodes_or_refuses_what_a_server_compresses(
        encoding: bytes | None, reply: bytes, expected: str) -> None:
    async def scenario() -> tuple[str | None, list[bytes], int]:
        raw = RawServer(encoding=encoding, reply=reply)
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL, api_key="k-1") as client:
            result = await client.complete(_request(0), max_retries=2, backoff_base_s=0.01)
            return (result.text if result.ok else result.error), raw.heads, raw.requests

    text, heads, requests = asyncio.run(scenario())
    assert text == expected
    assert requests == 1
    head = heads[0].lower()
    assert b"accept-encoding: identity\r\n" in head
    assert b"host: 127.0.0.1:" in head and b"authorization: bearer k-1\r\n" in head
    assert head.startswith(b"post /v1/chat/completions http/1.1\r\n")


def test_usage_that_is_not_a_token_count_is_unknown_never_coerced_and_the_answer_is_kept() -> None:
    """``usage`` from a broken server: negative, absurd, a string, a float, a boolean, not an object. Each count
    is unknown (None: the run's cost is then unknown, never computed from it); the answer itself is kept. A
    string like "ten" raised a validation error outside the client's error handling, negative counts made
    negative costs, and 1e12 was counted in the session's totals while the store kept NULL."""
    from medhelm_local.inference.client import parse_completion

    def usage_of(usage: object) -> tuple[str, int | None, int | None]:
        payload = json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}],
                              "usage": usage}).encode()
        completion = parse_completion(payload)
        return completion.text, completion.prompt_tokens, completion.completion_tokens

    assert usage_of({"prompt_tokens": 12, "completion_tokens": 0}) == ("yes", 12, 0)
    for bad in (-5, 1e12, 10**12, "10", "ten", 1.5, 10.0, True, None, [1], {"n": 1}):
        assert usage_of({"prompt_tokens": bad, "completion_tokens": bad}) == ("yes", None, None), bad
    for not_an_object in ([1, 2], "abc", 7):
        assert usage_of(not_an_object) == ("yes", None, None), not_an_object


def test_more_reply_tokens_than_the_request_allowed_is_no_measurement() -> None:
    """A server claiming more completion tokens than the request's ``max_tokens`` (2**31 - 1 for a one-token
    reply) reports no measurement: the count is unknown, and the run's cost with it, never priced from it. It was
    kept, and the run's measured tokens and token-priced cost were whatever the server said."""
    async def usage_of(completion_tokens: int) -> tuple[str | None, int | None, int | None]:
        raw = RawServer(reply=json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "length"}],
                                          "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens}})
                        .encode())
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL) as client:
            result = await client.complete(_request(0), max_retries=0)  # max_tokens=1
            return result.text, result.prompt_tokens, result.completion_tokens

    assert asyncio.run(usage_of(1)) == ("yes", 3, 1)
    for absurd in (2, 2**31 - 1):
        assert asyncio.run(usage_of(absurd)) == ("yes", 3, None), absurd


def test_a_finish_reason_that_is_not_a_string_is_unknown_and_the_answer_is_kept() -> None:
    """A broken server's ``finish_reason`` (a number, an object echoing the prompt, a list): unknown (None), the
    answer kept. It raised pydantic's ValidationError out of ``complete`` (its message quoting the value), which
    ended the run as an internal error, and every resume met the same reply again."""
    async def finish_reason_of(value: object) -> tuple[str | None, str | None, str | None]:
        raw = RawServer(reply=json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": value}]})
                        .encode())
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "m", LOCAL) as client:
            result = await client.complete(_request(0), max_retries=0)
            return result.text, result.error, result.finish_reason

    assert asyncio.run(finish_reason_of("length")) == ("yes", None, "length")
    for bad in (123, {"echo": "question 0"}, ["stop"], True):
        assert asyncio.run(finish_reason_of(bad)) == ("yes", None, None), bad


def test_a_reply_from_another_model_is_a_failed_request_never_an_answer() -> None:
    """A reply naming another model than the one asked for (a router or proxy in front of vLLM sending some
    requests elsewhere) is ``model_mismatch``: no answer kept, not retried (a retry reaching the right model would
    hide the misrouting). One without a model name is kept (servers that leave it out say nothing either way); a
    name that is not a string is no reply (``invalid_json``). The reply was kept and scored as the model's."""
    async def reply_naming(model: object, *, omit: bool = False) -> tuple[str | None, str | None, int, int]:
        body: dict[str, object] = {"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}]}
        if not omit:
            body["model"] = model
        raw = RawServer(reply=json.dumps(body).encode())
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "served-m", LOCAL) as client:
            result = await client.complete(_request(0), max_retries=3, backoff_base_s=0.001)
            return result.text, result.error, result.attempts, raw.requests

    assert asyncio.run(reply_naming("served-m")) == ("yes", None, 1, 1)
    assert asyncio.run(reply_naming(None, omit=True)) == ("yes", None, 1, 1)
    assert asyncio.run(reply_naming(None)) == ("yes", None, 1, 1)
    for other in ("other-model", "served-m ", "Served-M", ""):
        assert asyncio.run(reply_naming(other)) == (None, "model_mismatch", 1, 1), other
    for not_a_name in (7, ["served-m"], {"id": "served-m"}, True):
        assert asyncio.run(reply_naming(not_a_name)) == (None, "invalid_json", 4, 4), not_a_name


def test_a_replied_model_name_reaches_the_log_only_where_the_appliance_knows_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The server sees every prompt, and a reply's ``model`` is text the server chose: a hostile server (or a proxy
    echoing part of the request) put patient text there, and the ``inference.model_mismatch`` warning logged it
    (id-shaped, so the log's guard let it through). The name is shown where the appliance already knows it (a
    model configured in appliance.yaml, or one the servers' /v1/models listed before the first request); any
    other is said to be unlisted, never shown, nor its length."""
    from medhelm_local.logs import configure_logging

    phi = "Doe_Jane_MRN00123456_DOB1950-01-02"

    async def warning_for(replied: str, *, known: tuple[str, ...] = (), listed: tuple[str, ...] = ()
                          ) -> dict[str, object]:
        body = {"model": replied, "choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}]}
        raw = RawServer(reply=json.dumps(body).encode())
        server = await raw.start()
        async with server, ChatClient([f"http://127.0.0.1:{raw.port}/v1"], "served-m", LOCAL,
                                      known_models=known) as client:
            client.listed_models = frozenset(listed)
            assert (await client.complete(_request(0), max_retries=0)).error == "model_mismatch"
        records = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
        (record,) = [r for r in records if r.get("event") == "inference.model_mismatch"]
        return record

    configure_logging("WARNING", json_lines=True, force=True)
    try:
        capsys.readouterr()
        unknown = asyncio.run(warning_for(phi, known=("judge-m",), listed=("served-m",)))
        assert "Jane" not in json.dumps(unknown) and len(phi) not in unknown.values()
        assert unknown["replied_model_known"] is False and unknown["expected_model"] == "served-m"
        # a name the servers' /v1/models listed is the server's own text too (it saw earlier runs' prompts)
        listed = asyncio.run(warning_for("served-m-v2", listed=("served-m", "served-m-v2")))
        assert (listed["replied_model"], listed["replied_model_known"]) == (None, False)
        configured = asyncio.run(warning_for("judge-m", known=("judge-m",)))
        assert (configured["replied_model"], configured["replied_model_known"]) == ("judge-m", True)
    finally:
        configure_logging(force=True)


def test_a_reply_without_content_is_an_empty_answer_scored_as_given() -> None:
    """``content: null`` (an OpenAI-style refusal, or a reasoning model cut off while thinking, its text in
    ``reasoning_content``): the model gave no answer. It is an empty answer, kept with its finish reason and
    scored (unparsed, wrong), never a failed request: a retry would ask again for what the model declined, and
    leaving it out would score the model on the questions it chose to answer."""
    from medhelm_local.benchmarks.registry import shipped_spec
    from medhelm_local.inference.client import parse_completion
    from medhelm_local.records import Instance
    from medhelm_local.scoring.engine import score_outputs

    refusal = parse_completion(json.dumps({"choices": [{"message": {"content": None, "refusal": "I can't."},
                                                        "finish_reason": "stop"}]}).encode())
    thinking = parse_completion(json.dumps({"choices": [{"message": {"content": None,
                                                                     "reasoning_content": "The answer is yes"},
                                                         "finish_reason": "length"}]}).encode())
    assert (refusal.text, refusal.finish_reason) == ("", "stop")
    assert (thinking.text, thinking.finish_reason) == ("", "length")
    question = Instance(benchmark="pubmedqa", id="q1", fields={"question": "Q?", "context": "C."},
                        references=["yes"], label="yes")
    (scored,) = score_outputs(shipped_spec("pubmedqa"), [(question, thinking.text, None)])
    assert scored.value == 0.0 and scored.details["parsed"] is False


def test_a_server_that_trickles_its_reply_is_a_timeout_within_the_attempts_time() -> None:
    """The per-attempt timeout bounds the whole attempt, not each read: a server that sends its reply a byte at a
    time (every read gets something before the read timeout) held the attempt, and the run, for as long as it
    kept trickling."""

    trickle = _streaming(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(REPLY)).encode() + b"\r\n\r\n",
                         (REPLY[i:i + 1] for i in range(len(REPLY))), 0.1)  # about 10 s in all

    async def scenario() -> tuple[str | None, float]:
        server = await asyncio.start_server(trickle, "127.0.0.1", 0)
        async with server:
            return await _one_attempt(server.sockets[0].getsockname()[1], 0.5)

    error, elapsed = asyncio.run(scenario())
    assert error == "timeout"
    assert elapsed < 3


def test_a_reply_larger_than_any_completion_is_refused_not_read_into_memory() -> None:
    """An endless chunked body, and a small gzip body that decodes to gigabytes, were read (and decoded) whole:
    memory grew at line rate until the attempt timed out (or the process ran out of memory)."""
    chunk = b" " * (1 << 20)
    endless = _streaming(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
                         itertools.repeat(b"%x\r\n" % len(chunk) + chunk + b"\r\n"), 0.01)  # about 100 MiB/s

    async def scenario() -> tuple[str | None, float, str | None]:
        server = await asyncio.start_server(endless, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        raw = RawServer(encoding=b"gzip", reply=gzip.compress(b" " * (64 << 20)))  # 64 KiB sent
        bomb = await raw.start()
        async with server, bomb:
            error, elapsed = await _one_attempt(port, 3)
            decoded, _ = await _one_attempt(raw.port, 3, index=1)
            return error, elapsed, decoded

    error, elapsed, bomb_error = asyncio.run(scenario())
    assert error == "response_too_large" and elapsed < 2.5
    assert bomb_error == "response_too_large"


def test_a_trickled_models_or_tokenize_reply_is_bounded_by_its_timeout() -> None:
    """The small requests made before a run sends anything (``/v1/models``, ``/version``, a tokenizer) are bounded
    as a whole by their timeout: httpx's bounds each read, and a server trickling its reply held the run before
    its first completion for as long as it trickled."""
    from medhelm_local.inference.client import RequestFailed

    head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000
    trickle = _streaming(b"", (head[i:i + 1] for i in range(len(head))), 0.1, read_body=False)

    async def scenario() -> tuple[object, str, float]:
        server = await asyncio.start_server(trickle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        async with server, ChatClient([base], "m", LOCAL) as client:
            loop = asyncio.get_running_loop()
            started = loop.time()
            models = await client.get_json(base, "/models", timeout_s=0.5)
            try:
                await client.post_json(base, "/tokenize", {"prompt": "x"}, timeout_s=0.5)
                category = "none"
            except RequestFailed as failed:
                category = failed.category
            return models, category, loop.time() - started

    models, category, elapsed = asyncio.run(scenario())
    assert models is None and category == "timeout"
    assert elapsed < 5


def test_a_lane_handed_to_a_cancelled_waiter_is_not_lost() -> None:
    """With every lane busy a request waits for one; handed a lane just before it is cancelled (Ctrl-C, a shutdown),
    it kept it: the lane was never given back, and each such cancellation left one connection fewer."""

    async def scenario() -> bool:
        base = "http://127.0.0.1:9/v1"
        async with ChatClient([base], "m", LOCAL, max_connections=1) as client:
            target = client._target(base)
            lane = await client._lease(base, target)  # the only lane
            waiting = asyncio.create_task(client._lease(base, target))
            await asyncio.sleep(0)  # it waits for a lane
            client._give_back(base, lane)  # handed over...
            waiting.cancel()  # ...and cancelled before it runs again
            with pytest.raises(asyncio.CancelledError):
                await waiting
            again = await asyncio.wait_for(client._lease(base, target), 1)
            return again is lane

    assert asyncio.run(scenario())
