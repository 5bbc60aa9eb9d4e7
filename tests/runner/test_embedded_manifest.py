"""The embedded model's run manifest carries its GGUF file's sha256, as every run's manifest carries its weights'
hash (README: "weights sha256"), though the embedded model is configured without ``weights_path``: the file is
the one the appliance itself starts the server with."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.home.config import EMBEDDED_MODEL_NAME
from medhelm_local.runner import session
from medhelm_local.store import Store
from tests.runner.helpers import make_home


def test_an_embedded_run_records_the_gguf_files_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF fake weights")
    monkeypatch.setattr(session, "smollm2_gguf_path", lambda: gguf, raising=False)

    async def servers(_client: Any, _endpoint: Any) -> list[dict[str, Any]]:
        return [{"url": "embedded:127.0.0.1", "version": "llama-cpp 0.3.36", "models": [], "reachable": True}]

    monkeypatch.setattr(session, "describe_servers", servers)
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    endpoint = home.config.model(EMBEDDED_MODEL_NAME)
    assert endpoint.weights_path is None  # as `init` configures it
    with Store.open(home) as store:
        _, weights = asyncio.run(session.describe(store, None, endpoint))  # type: ignore[arg-type]
    assert weights is not None
    assert weights["files"] == [{"file": gguf.name, "size": gguf.stat().st_size,
                                 "sha256": hashlib.sha256(b"GGUF fake weights").hexdigest()}]
    assert weights["sha256"]
