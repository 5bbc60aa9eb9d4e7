"""The System page probes every configured model server (/v1/models, /version). A server that streams its reply
without end was read whole into the console's memory (about 250 MiB a second on loopback, until the console ran
out of it), and one that trickles it held the page for as long as it trickled: httpx bounds each read, not the
reply. Now a probe reads at most MAX_RESPONSE_BYTES, for PROBE_TIMEOUT_S in all."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

from medhelm_local.home.config import ModelEndpoint
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.lane import MAX_RESPONSE_BYTES
from medhelm_local.webconsole.pages_it import NOT_A_MODELS_REPLY, PROBE_TIMEOUT_S, _probe
from tests.httpstub import streaming_handler, stub_server, trickling_head_handler

CHUNK = b" " * (1 << 20)


def _probed(handler: type[BaseHTTPRequestHandler]) -> tuple[bool | None, str, float]:
    with stub_server(handler) as base:
        started = time.monotonic()
        probe = _probe(EgressPolicy.of(["http://127.0.0.1"]), "m", base, ModelEndpoint(name="m", base_urls=[base]))
        return probe.healthy, probe.detail, time.monotonic() - started


def test_a_models_reply_longer_than_any_is_not_read_whole() -> None:
    handler, sent = streaming_handler(CHUNK, 96, 0.0)
    assert _probed(handler)[:2] == (False, NOT_A_MODELS_REPLY)
    assert sent[0] < MAX_RESPONSE_BYTES + 32 * len(CHUNK)  # what the sockets' buffers hold beyond it, not 96 MiB


def test_a_trickled_models_reply_is_bounded_by_the_probe_timeout() -> None:
    handler, _ = streaming_handler(b" ", 40, 0.5)  # 20 s of a byte each half second
    healthy, detail, elapsed = _probed(handler)
    assert (healthy, detail) == (False, NOT_A_MODELS_REPLY)
    assert elapsed < PROBE_TIMEOUT_S + 3


def test_a_trickled_status_line_and_headers_are_bounded_by_the_probe_timeout() -> None:
    """The deadline was checked as body chunks came: a server sending its status line and headers a byte at a time
    held the page for as long as it trickled (30 s here). Now the whole exchange is bounded."""

    healthy, detail, elapsed = _probed(trickling_head_handler(300))
    assert (healthy, detail) == (False, NOT_A_MODELS_REPLY)
    assert elapsed < PROBE_TIMEOUT_S + 3
