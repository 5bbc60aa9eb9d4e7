"""A server's reply of JSON nested deeper than Python's parser recurses (``[[[...]]]``, a few kilobytes) is no JSON
document, as malformed JSON is: before, the parser's RecursionError escaped every reader of a server's reply, and a
run (its completions, /v1/models, /version, a tokenizer), `serve vllm` and the console's System page ended with
'internal error (RecursionError)'."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm_local.home.config import ModelEndpoint
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.vllm import VllmError, VllmProcess, VllmSpec
from medhelm_local.records import ChatMessage, InferenceRequest
from medhelm_local.webconsole.pages_it import NOT_A_MODELS_REPLY, _probe
from tests.httpstub import QuietHandler, stub_server

NESTED = b"[" * 100_000 + b"]" * 100_000
LOCAL = ["http://127.0.0.1"]


class NestedHandler(QuietHandler):
    """Answers every request, GET or POST, with 200 and ``NESTED``."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(NESTED)))
        self.end_headers()
        self.wfile.write(NESTED)

    do_GET = do_POST = _answer


@pytest.fixture
def nested_base() -> Iterator[str]:
    with stub_server(NestedHandler) as base:
        yield base


def test_a_run_reads_nested_json_as_no_json(nested_base: str) -> None:
    request = InferenceRequest(benchmark="b", instance_id="1", max_tokens=1,
                               messages=[ChatMessage(role="user", content="question")])

    async def scenario() -> tuple[str | None, object, tuple[int, object, float | None]]:
        async with ChatClient([nested_base], "m", LOCAL) as client:
            result = await client.complete(request, max_retries=0)
            return (result.error, await client.get_json(nested_base, "/models"),
                    await client.post_json(nested_base.removesuffix("/v1"), "/tokenize", {"prompt": "x"}))

    assert asyncio.run(scenario()) == ("invalid_json", None, (200, None, None))


def test_the_console_probe_and_serve_vllm_read_nested_json_as_no_json(nested_base: str, tmp_path: Path) -> None:
    endpoint = ModelEndpoint(name="m", base_urls=[nested_base])
    probe = _probe(EgressPolicy.of(LOCAL), "m", nested_base, endpoint)
    assert (probe.healthy, probe.detail) == (False, NOT_A_MODELS_REPLY)
    port = int(nested_base.removesuffix("/v1").rsplit(":", 1)[1])
    served = VllmProcess(VllmSpec(weights=tmp_path, served_model_name="m", port=port), [], {}, None)
    with pytest.raises(VllmError, match="is not JSON"):
        served.describe()
