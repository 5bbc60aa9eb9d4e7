"""A model's replicas are asked who they are all at once (``describe_servers``), and listed in the endpoint's
order: a fleet of replicas costs one round trip before a run, not two per replica."""

from __future__ import annotations

import asyncio
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
