"""Compliance fixtures: a home with a finished run against fake OpenAI servers, policies, canary extracts."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.home import Home, ModelEndpoint
from medhelm_local.home.config import Pricing
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.inproc import InProcessCli

APPROVER = "carol-compliance"
QUESTION = "Should this patient be referred to hospice care? A. Yes B. No"


def write_policy(home: Path, **overrides: Any) -> None:
    from medhelm_local.export.policy import default_policy_bytes

    policy = yaml.safe_load(default_policy_bytes())
    policy["approval"]["approvers"] = [APPROVER]
    for key, value in overrides.items():
        policy[key] = value
    path = home / "policies" / "export-policy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")


def hospice_csv(path: Path, n: int, note: Any = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context", "label"])
        for i in range(n):
            text = note(i) if note else f"Synthetic note {i}: stable condition, routine follow up."
            writer.writerow([QUESTION, text, "A" if i % 2 == 0 else "B"])
    return path


def add_models(home: Path, models: list[ModelEndpoint], judges: list[str] | None = None) -> None:
    h = Home(home)
    data = h.config.model_dump()
    data["models"] += [m.model_dump() for m in models]
    data["judges"] += judges or []
    from medhelm_local.home.config import ApplianceConfig

    h.save_config(ApplianceConfig.model_validate(data))


@dataclass
class EvaluatedHome:
    cli: InProcessCli
    run_id: str
    server: FakeOpenAIServer

    @property
    def home(self) -> Path:
        return self.cli.home


def run_json(cli: InProcessCli, *args: str) -> dict[str, Any]:
    result = cli(*args, "--json")
    assert result.code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


@pytest.fixture
def evaluated(tmp_path: Path) -> Iterator[EvaluatedHome]:
    """An initialised home with one finished run of ``eval-model`` on 24 synthetic hospice notes."""
    with evaluated_home(tmp_path) as home:
        yield home


@contextmanager
def evaluated_home(tmp_path: Path) -> Iterator[EvaluatedHome]:
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    write_policy(cli.home)
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        add_models(cli.home, [ModelEndpoint(name="eval-model", base_urls=[server.base_url],
                                            pricing=Pricing(input_per_million=0.5, output_per_million=1.5))])
        extract = hospice_csv(tmp_path / "extracts" / "notes.csv", 24)
        assert cli("datasets", "register", "hospice_referral", str(extract)).code == 0
        run = run_json(cli, "run", "--model", "eval-model", "--benchmarks", "hospice_referral")
        yield EvaluatedHome(cli=cli, run_id=str(run["run_id"]), server=server)
