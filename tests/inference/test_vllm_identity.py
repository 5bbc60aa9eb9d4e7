"""`serve vllm` reads the started server's identity (its version and served models) or refuses it: a server
that does not report them is never described as if it had, and the served-model check is never skipped."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from medhelm_local.errors import ConfigError
from medhelm_local.inference import vllm as v
from medhelm_local.inference.lane import MAX_RESPONSE_BYTES
from medhelm_local.testing.asgi_thread import free_port
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.httpstub import streaming_handler, stub_server, trickling_head_handler


def _process(port: int, *, api_key: str | None, served: str = "llama-3-8b") -> v.VllmProcess:
    spec = v.VllmSpec(weights=Path("/models/llama"), served_model_name=served, port=port)
    return v.VllmProcess(spec, ["vllm", "serve"], {}, api_key)


def _port(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1].split("/")[0])


def test_describe_reports_the_version_and_the_served_models() -> None:
    with FakeOpenAIServer(model_id="llama-3-8b", api_key="k3y", version="0.11.0") as server:
        described = _process(server.port, api_key="k3y").describe()
    assert described == {"base_url": f"http://127.0.0.1:{server.port}/v1", "version": "0.11.0",
                         "models": ["llama-3-8b"]}


def test_a_model_list_refused_fails_instead_of_skipping_the_check() -> None:
    # The server is up (its /health and /version are open) but refuses our key on /v1/models: the models it
    # serves are unknown, so the check that it serves ours cannot be made.
    with FakeOpenAIServer(model_id="other-model", api_key="right", version="0.11.0") as server, \
            pytest.raises(v.VllmError, match=r"model list .* answered HTTP 401 .*API key") as raised:
        _process(server.port, api_key="wrong").describe()
    assert "right" not in str(raised.value) and "wrong" not in str(raised.value)


def test_a_server_that_does_not_answer_fails_instead_of_reporting_no_version() -> None:
    with pytest.raises(v.VllmError, match=r"version could not be read .*ConnectError"):
        _process(free_port(), api_key=None).describe()


def test_a_server_serving_another_model_is_refused() -> None:
    with FakeOpenAIServer(model_id="other-model", version="0.11.0") as server, \
            pytest.raises(ConfigError, match="not 'llama-3-8b'"):
        _process(server.port, api_key=None).describe()


CHUNK = b" " * (1 << 20)


def test_an_endless_identity_reply_is_refused_not_read_into_memory() -> None:
    """``serve vllm`` read /version and /v1/models whole: a server streaming without end filled the memory (some
    3 GiB in 6 s on loopback) and never returned. Now a reply is read up to MAX_RESPONSE_BYTES."""
    endless, sent = streaming_handler(CHUNK, 256)
    with stub_server(endless) as base, pytest.raises(v.VllmError, match=r"version .* is longer than 16 MiB"):
        _process(_port(base), api_key=None).describe()
    assert sent[0] < MAX_RESPONSE_BYTES + 32 * len(CHUNK)  # what the sockets' buffers hold beyond it, not 256 MiB


def test_a_trickled_identity_reply_is_bounded_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server sending its status line and headers a byte at a time held ``serve vllm`` for as long as it
    trickled (httpx bounds each read, 10 s, not the reply). Now the whole read is bounded."""
    monkeypatch.setattr(v, "IDENTITY_TIMEOUT_S", 1.0)

    with stub_server(trickling_head_handler(1000)) as base, \
            pytest.raises(v.VllmError, match=r"version .* not read within 1s"):
        started = time.monotonic()
        _process(_port(base), api_key=None).describe()
    assert time.monotonic() - started < 5


def test_an_endless_health_reply_is_not_health(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's /health was read whole while it started: a body without end held the start for ever."""
    with stub_server(streaming_handler(CHUNK, 256)[0]) as base:
        process = _process(_port(base), api_key=None)
        process.proc = subprocess.Popen(["sleep", "30"])
        try:
            with pytest.raises(v.VllmError, match="did not become healthy within 2s"):
                process.wait_healthy(2.0)
        finally:
            process.proc.kill()
            process.proc.wait()
