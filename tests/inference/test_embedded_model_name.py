"""The embedded llama.cpp server, started for real, names in its replies the model the client asks for (its
``--model_alias``): the client's check of a reply's ``model`` holds for it, and its answers are kept."""

from __future__ import annotations

import asyncio

from medhelm_local.home.config import (
    EMBEDDED_MODEL_NAME,
    EMBEDDED_SERVED_MODEL,
    ApplianceConfig,
    BackendKind,
    ModelEndpoint,
)
from medhelm_local.inference.backends import open_client
from medhelm_local.records import ChatMessage, InferenceRequest


def test_the_embedded_server_names_the_model_asked_for_and_its_answers_pass_the_check() -> None:
    endpoint = ModelEndpoint(name=EMBEDDED_MODEL_NAME, kind=BackendKind.EMBEDDED, context_length=512)
    request = InferenceRequest(
        benchmark="b",
        instance_id="1",
        max_tokens=2,
        temperature=0.0,
        messages=[ChatMessage(role="user", content="Say yes.")],
    )

    async def ask() -> tuple[str, object, str | None, str | None]:
        async with open_client(ApplianceConfig(), endpoint) as client:
            base = client.base_urls[0]
            status, reply, _ = await client.post_json(
                base,
                "/chat/completions",
                {
                    "model": client.model_id,
                    "max_tokens": 2,
                    "temperature": 0.0,
                    "messages": [{"role": "user", "content": "Say yes."}],
                },
            )
            assert status == 200 and isinstance(reply, dict)
            result = await client.complete(request, max_retries=0)
            return client.model_id, reply.get("model"), result.error, result.text

    model_id, replied, error, text = asyncio.run(ask())
    assert model_id == EMBEDDED_SERVED_MODEL
    assert replied == EMBEDDED_SERVED_MODEL  # not its GGUF path, which it names when a request names no model
    assert error is None and text is not None
