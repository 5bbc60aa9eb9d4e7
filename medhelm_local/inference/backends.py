"""From a configured model to a ready client: start the embedded server if needed, resolve the API key."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any

from medhelm_local.errors import ConfigError
from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.embedded import EMBEDDED_SERVED_MODEL, EmbeddedServer
from medhelm_local.inference.server_text import recorded_models, recorded_version


def resolve_api_key(endpoint: ModelEndpoint) -> str | None:
    if endpoint.api_key_env:
        value = os.environ.get(endpoint.api_key_env)
        if not value:
            raise ConfigError(
                f"model {endpoint.name}: environment variable {endpoint.api_key_env} (api_key_env) is not set"
            )
        return value
    if endpoint.api_key_file:
        try:
            return endpoint.api_key_file.read_text(encoding="utf-8").strip()
        except OSError:
            raise ConfigError(f"model {endpoint.name}: cannot read api_key_file {endpoint.api_key_file}") from None
    return None


def server_root(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000`` (vLLM serves ``/health`` and ``/version`` at the root)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def served_models(listing: Any) -> list[str] | None:
    """The model ids a ``/models`` reply lists, sorted; None when it is no list of models (not an object with a
    ``data`` array): what a broken server or proxy sends there is reported as such, never an exception."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    return sorted(str(m.get("id")) for m in data if isinstance(m, dict))


async def describe_servers(client: ChatClient, endpoint: ModelEndpoint) -> list[dict[str, Any]]:
    """What each replica says about itself: served model ids (``/v1/models``) and version (``/version``), in the
    order of the endpoint's URLs. Every replica is asked at once: a fleet costs one round trip, not two per
    replica. Both are the server's own text, recorded as ``server_text`` allows (a version shaped like one, the
    model names appliance.yaml configures; any other ``unrecognised``)."""

    async def version_of(url: str) -> str | None:
        if endpoint.kind == BackendKind.EMBEDDED:
            return _package_version("llama-cpp-python", "llama-cpp")
        info = await client.get_json(server_root(url), "/version")
        return recorded_version(info.get("version")) if isinstance(info, dict) else None

    async def describe(url: str) -> dict[str, Any]:
        models, version = await asyncio.gather(client.get_json(url, "/models"), version_of(url))
        return {"url": url if endpoint.kind != BackendKind.EMBEDDED else "embedded:127.0.0.1",
                "version": version, "models": recorded_models(served_models(models) or [], client.known_models),
                "reachable": models is not None}

    return list(await asyncio.gather(*(describe(url) for url in client.base_urls)))


def _package_version(dist: str, label: str) -> str | None:
    try:
        return f"{label} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return None


def configured_model_names(config: ApplianceConfig) -> set[str]:
    """The model names appliance.yaml gives (each model's id and reply name): a warning may show these."""
    return {name for endpoint in config.models for name in (endpoint.model_id, endpoint.replied_model)}


@asynccontextmanager
async def open_client(
    config: ApplianceConfig, endpoint: ModelEndpoint, *, max_connections: int = 256, timeout_s: float | None = None,
    egress: EgressPolicy | None = None,
) -> AsyncIterator[ChatClient]:
    """Yield a client for ``endpoint``; an embedded model's server lives exactly as long as the client.

    ``egress``: the caller's policy (``AppContext.egress``: the allowlist, a refusal audited); without one, the
    configuration's allowlist, a refusal raised but recorded nowhere."""
    if endpoint.kind == BackendKind.EMBEDDED:
        with EmbeddedServer(n_ctx=endpoint.context_tokens) as server:
            client = ChatClient(
                [server.base_url], EMBEDDED_SERVED_MODEL, ["http://127.0.0.1"], api_key=server.api_key,
                timeout_s=timeout_s or endpoint.timeout_s, max_connections=max_connections,
            )
            async with client:
                yield client
        return
    client = ChatClient(
        endpoint.base_urls, endpoint.model_id, egress or config.allowlist, api_key=resolve_api_key(endpoint),
        timeout_s=timeout_s or endpoint.timeout_s, max_connections=max_connections,
        reply_model=endpoint.replied_model, known_models=configured_model_names(config),
    )
    async with client:
        yield client
