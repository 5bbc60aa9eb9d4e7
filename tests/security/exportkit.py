"""Helpers for the export attack tests: a site (home, policy outside it, people's keys) and runs against the
fake OpenAI-compatible server. The attacker is an insider who can run the CLI, write the home and holds the
requester's key, but not an approver's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.export.policy import POLICY_ENV
from medhelm_local.home import ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import add_models, hospice_csv, run_json, write_policy
from tests.compliance.inproc import InProcessCli


@pytest.fixture(autouse=True)
def policy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(POLICY_ENV, raising=False)  # write_policy sets it; restored (unset) after each test
    yield


def site(tmp_path: Path, **policy: Any) -> InProcessCli:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    write_policy(cli.home, **policy)
    return cli


def evaluate(cli: InProcessCli, extract: Path, *, model: str = "eval-model", run_id: str | None = None,
             responder: Callable[[list[dict[str, Any]]], str] = lambda _m: "A", spec: Path | None = None,
             benchmark: str = "hospice_referral") -> str:
    """Register ``extract`` (again: a new dataset version) and run ``model`` on it; returns the run id."""
    register = ["datasets", "register", *(["--spec", str(spec)] if spec else []), benchmark, str(extract)]
    registered = cli(*register)
    assert registered.code == 0, registered.stderr
    with FakeOpenAIServer(responder=responder) as server:
        config = json.loads(cli("models", "list", "--json").stdout)
        if model not in {m["name"] for m in config}:
            add_models(cli.home, [ModelEndpoint(name=model, base_urls=[server.base_url])])
        else:  # the model's endpoint moves to this server
            from medhelm_local.home import Home
            from medhelm_local.home.config import ApplianceConfig

            home = Home(cli.home)
            data = home.config.model_dump()
            for entry in data["models"]:
                if entry["name"] == model:
                    entry["base_urls"] = [server.base_url]
            home.save_config(ApplianceConfig.model_validate(data))
        args = ["run", "--model", model, "--benchmarks", benchmark, *(["--run-id", run_id] if run_id else [])]
        return str(run_json(cli, *args)["run_id"])


def notes(path: Path, n: int, note: Callable[[int], str] | None = None) -> Path:
    return hospice_csv(path, n, note)


def failed(request: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    return {c["id"]: c["findings"] for c in request["checks"] if c["result"] == "fail"}
