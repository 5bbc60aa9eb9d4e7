"""Waiting for model servers before a run: every replica of every model and judge answers its health check.

vLLM (and llama.cpp's server) answer ``GET /health`` with 200 once the model is loaded, without the API key.
Other OpenAI-compatible endpoints are probed with ``GET /v1/models`` and their API key. Embedded models are
started by the runner itself and are not probed. Every URL is checked against the allowlist before a
connection opens. Nothing here reads or sends prompts.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import httpx

from medhelm_local.home.config import BackendKind, ModelEndpoint
from medhelm_local.inference.backends import resolve_api_key, server_root
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.server_text import RECORDED_STATUSES, recorded_status
from medhelm_local.inference.tls import tls_context


@dataclass
class ReplicaHealth:
    """The last probe of one replica of one model."""

    model: str
    url: str
    ok: bool = False
    status: int | None = None
    error: str | None = None
    attempts: int = 0
    ready_after_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"model": self.model, "url": self.url, "ok": self.ok, "status": self.status, "error": self.error,
                "attempts": self.attempts, "ready_after_s": self.ready_after_s}


def health_url(endpoint: ModelEndpoint, base_url: str) -> str:
    """Where a replica is probed: ``/health`` at the server root for vLLM, ``/models`` under the API otherwise."""
    if endpoint.kind == BackendKind.VLLM:
        return f"{server_root(base_url)}/health"
    return f"{base_url}/models"


async def _probe_status(url: str, headers: dict[str, str], timeout_s: float, tls: ssl.SSLContext) -> int:
    """The status ``url`` answers a GET with. ``timeout_s`` bounds the whole probe: httpx bounds each read only,
    and a server trickling its reply a byte at a time would hold the probe (and ``models wait``) for as long as it
    trickles. The body is never read. ``tls``: the endpoint's :func:`.tls_context`, the one its requests use."""
    # No proxies from the environment: in-cluster names must never be sent to a proxy.
    async with (asyncio.timeout(timeout_s),
                httpx.AsyncClient(trust_env=False, verify=tls, follow_redirects=False) as client,
                client.stream("GET", url, headers=headers, timeout=timeout_s) as response):
        return response.status_code


def probed_endpoints(endpoints: Iterable[ModelEndpoint]) -> list[ModelEndpoint]:
    return [e for e in endpoints if e.kind != BackendKind.EMBEDDED]


def wait_for_models(
    endpoints: Iterable[ModelEndpoint],
    egress: EgressPolicy | Sequence[str],
    *,
    timeout_s: float,
    interval_s: float = 5.0,
    probe_timeout_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ReplicaHealth]:
    """Probe every replica until all answer 200 or ``timeout_s`` passes; return the last state of each.

    Replicas that answered stay answered (a later failure shows in the run's own per-replica health).
    """
    policy = EgressPolicy.of(egress)  # the caller's (AppContext.egress: refusals audited), or a bare allowlist
    targets: list[tuple[ssl.SSLContext, ReplicaHealth, dict[str, str]]] = []
    for endpoint in probed_endpoints(endpoints):
        headers: dict[str, str] = {}
        if endpoint.kind != BackendKind.VLLM:
            key = resolve_api_key(endpoint)
            if key:
                headers["Authorization"] = f"Bearer {key}"
        tls = tls_context(endpoint.base_urls)
        for base in endpoint.base_urls:
            url = health_url(endpoint, base)
            policy.check(url)  # refused before any connection opens
            targets.append((tls, ReplicaHealth(model=endpoint.name, url=url), headers))
    start = clock()
    deadline = start + timeout_s
    while True:
        for tls, health, headers in targets:
            if health.ok:
                continue
            health.attempts += 1
            remaining = max(0.1, deadline - clock())
            try:
                status = asyncio.run(_probe_status(health.url, headers, min(probe_timeout_s, remaining), tls))
            except (httpx.HTTPError, TimeoutError) as exc:
                health.status, health.error = None, type(exc).__name__
                continue
            # A status the appliance does not tell apart is the server's choice: shown by its class alone.
            health.status = status if status in RECORDED_STATUSES else None
            if status == 200:
                health.ok, health.error = True, None
                health.ready_after_s = round(clock() - start, 1)
            else:
                health.error = f"HTTP {recorded_status(status)}"
        if all(h.ok for _e, h, _h in targets) or clock() >= deadline:
            return [h for _e, h, _h in targets]
        sleep(min(interval_s, max(0.0, deadline - clock())))
