"""The embedded server's readiness probe (its ``/v1/models``) is a small reply read bounded in size and in time
(``small_reply``), as every other small reply from a model server is."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm_local.inference import embedded
from medhelm_local.inference.embedded import EmbeddedServer, EmbeddedServerError
from medhelm_local.inference.lane import MAX_RESPONSE_BYTES
from tests.httpstub import QuietHandler, streaming_handler, stub_server, trickling_head_handler

CHUNK = b" " * (1 << 20)
STARTUP_S = 3.0


@pytest.fixture
def child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A stand-in for llama.cpp's server that stays up and answers nothing; the probe is pointed at a stub."""
    monkeypatch.setattr(embedded, "server_command", lambda *_args: [sys.executable, "-c", "import time; "
                                                                     "time.sleep(120)"])
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(embedded.tempfile, "tempdir", None)
    yield


def _start_against(base_url: str, monkeypatch: pytest.MonkeyPatch) -> float:
    """Start an embedded server whose probe reaches ``base_url``; the seconds until it gave up."""
    monkeypatch.setattr(embedded, "_free_port", lambda: int(base_url.rsplit(":", 1)[1].split("/")[0]))
    server = EmbeddedServer(startup_timeout_s=STARTUP_S)
    started = time.monotonic()
    with pytest.raises(EmbeddedServerError, match=f"did not answer within {STARTUP_S:.0f}s"):
        server.start()
    assert server._proc is not None and server._proc.poll() is not None, "the child is stopped"
    return time.monotonic() - started


def test_an_endless_models_reply_is_not_ready_nor_read_into_memory(child: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``_wait_ready`` read /v1/models whole with httpx.get: a body without end (256 MiB here) was read into memory
    and, once it ended, taken for a server ready. It is read up to MAX_RESPONSE_BYTES now, and is no answer."""
    endless, sent = streaming_handler(CHUNK, 256)
    probes = [0]

    class Counted(endless):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:
            probes[0] += 1
            super().do_GET()

    with stub_server(Counted) as base:
        _start_against(base, monkeypatch)
    # Each probe reads up to the limit and what the sockets' buffers hold beyond it, not the 256 MiB sent.
    assert 0 < sent[0] < probes[0] * (MAX_RESPONSE_BYTES + 32 * len(CHUNK))


def test_a_trickled_models_reply_does_not_hold_the_start_past_its_timeout(child: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply trickled a byte every 0.1 s held the start for as long as it trickled (httpx bounds each read)."""
    with stub_server(trickling_head_handler(1000)) as base:
        assert _start_against(base, monkeypatch) < STARTUP_S + 4


def test_a_server_listing_its_models_is_ready(child: None, monkeypatch: pytest.MonkeyPatch) -> None:
    class Models(QuietHandler):
        def do_GET(self) -> None:
            body = b'{"object": "list", "data": []}'
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    async def started_in_the_runners_loop() -> str:  # as open_client starts it
        with EmbeddedServer(startup_timeout_s=STARTUP_S) as server:
            return server.base_url

    with stub_server(Models) as base:
        monkeypatch.setattr(embedded, "_free_port", lambda: int(base.rsplit(":", 1)[1].split("/")[0]))
        assert asyncio.run(started_in_the_runners_loop()) == base
