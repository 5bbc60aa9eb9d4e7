"""A model's replicas are asked who they are all at once (``describe_servers``), and listed in the endpoint's
order: a fleet of replicas costs one round trip before a run, not two per replica."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from medhelm_local.home.config import BackendKind, ModelEndpoint
from medhelm_local.inference.backends import describe_servers
from medhelm_local.inference.client import ChatClient

URLS = [f"http://127.0.0.1:{8000 + i}/v1" for i in range(4)]
ROUND_TRIP_S = 0.25


def test_every_replica_is_asked_at_once_and_listed_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def get_json(self: ChatClient, base_url: str, path: str, *, timeout_s: float = 10.0) -> Any:
        asked.append(f"{base_url}{path}")
        await asyncio.sleep(ROUND_TRIP_S)
        port = base_url.split(":")[2][:4]
        if port == "8002":
            return None  # this replica does not answer: listed as unreachable, not left out
        return {"data": [{"id": "m"}]} if path == "/models" else {"version": f"0.9.{port}"}

    monkeypatch.setattr(ChatClient, "get_json", get_json)
    endpoint = ModelEndpoint(name="fleet", kind=BackendKind.VLLM, base_urls=URLS, served_model="m")

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        async with ChatClient(URLS, "m", ["http://127.0.0.1"]) as client:
            started = time.monotonic()
            servers = await describe_servers(client, endpoint)
            return servers, time.monotonic() - started

    servers, took = asyncio.run(scenario())
    assert len(asked) == 2 * len(URLS)
    assert took < 2 * ROUND_TRIP_S, f"{took:.2f}s: the replicas were asked one after the other"
    assert [s["url"] for s in servers] == URLS
    assert [s["reachable"] for s in servers] == [True, True, False, True]
    assert [s["version"] for s in servers] == ["0.9.8000", "0.9.8001", None, "0.9.8003"]
    assert servers[0]["models"] == ["m"]


@pytest.mark.parametrize("listing", [["m"], "m", 7, {"data": None}, {"data": 5}, {"data": {"id": "m"}}])
def test_a_models_reply_that_is_no_list_of_models_is_reported_never_raised(listing: Any) -> None:
    """A broken server or proxy's ``/v1/models`` (a bare array, a string, ``data`` null or not an array): the
    replica lists no model (reachable, its reply kept out), for the run and for the console's probe alike. It
    raised AttributeError or TypeError before any request: every run against it ended as an internal error, and
    the console's system page failed."""
    from http.server import BaseHTTPRequestHandler

    from medhelm_local.inference.egress import EgressPolicy
    from medhelm_local.webconsole.pages_it import _probe
    from tests.httpstub import QuietHandler, stub_server

    body = json.dumps(listing).encode()

    class Models(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    handler: type[BaseHTTPRequestHandler] = Models
    with stub_server(handler) as url:
        endpoint = ModelEndpoint(name="odd", kind=BackendKind.OPENAI_COMPATIBLE, base_urls=[url], served_model="m")

        async def scenario() -> list[dict[str, Any]]:
            async with ChatClient([url], "m", ["http://127.0.0.1"]) as client:
                return await describe_servers(client, endpoint)

        (server,) = asyncio.run(scenario())
        probe = _probe(EgressPolicy.of(["http://127.0.0.1"]), "odd", url, endpoint)
    assert server["reachable"] is True and server["models"] == []
    assert probe.healthy is False and probe.served == [] and probe.detail == "not an OpenAI-compatible /models reply"
