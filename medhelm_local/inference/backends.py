"""From a configured model to a ready client: start the embedded server if needed, resolve the API key."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from medhelm_local.errors import ConfigError
from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.embedded import EMBEDDED_SERVED_MODEL, EmbeddedServer


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


@asynccontextmanager
async def open_client(
    config: ApplianceConfig, endpoint: ModelEndpoint, *, max_connections: int = 256
) -> AsyncIterator[ChatClient]:
    """Yield a client for ``endpoint``; an embedded model's server lives exactly as long as the client."""
    if endpoint.kind == BackendKind.EMBEDDED:
        with EmbeddedServer(n_ctx=endpoint.context_length) as server:
            client = ChatClient(
                [server.base_url], EMBEDDED_SERVED_MODEL, ["http://127.0.0.1"], api_key=server.api_key,
                timeout_s=endpoint.timeout_s, max_connections=max_connections,
            )
            async with client:
                yield client
        return
    client = ChatClient(
        endpoint.base_urls, endpoint.model_id, config.allowlist, api_key=resolve_api_key(endpoint),
        timeout_s=endpoint.timeout_s, max_connections=max_connections,
    )
    async with client:
        yield client
