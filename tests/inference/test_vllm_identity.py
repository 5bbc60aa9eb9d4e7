"""`serve vllm` reads the started server's identity (its version and served models) or refuses it: a server
that does not report them is never described as if it had, and the served-model check is never skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.errors import ConfigError
from medhelm_local.inference import vllm as v
from medhelm_local.testing.asgi_thread import free_port
from medhelm_local.testing.fake_openai import FakeOpenAIServer


def _process(port: int, *, api_key: str | None, served: str = "llama-3-8b") -> v.VllmProcess:
    spec = v.VllmSpec(weights=Path("/models/llama"), served_model_name=served, port=port)
    return v.VllmProcess(spec, ["vllm", "serve"], {}, api_key)


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
