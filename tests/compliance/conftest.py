"""Compliance fixtures: a home with a finished run against fake OpenAI servers, policies, canary extracts."""

from __future__ import annotations

import csv
import json
import os
import subprocess
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

REQUESTER = "alice-informatics"
APPROVER = "carol-compliance"
QUESTION = "Should this patient be referred to hospice care? A. Yes B. No"


@dataclass(frozen=True)
class Signer:
    """A person's own OpenSSH Ed25519 key pair, made by ssh-keygen as they would make it."""

    name: str
    private: Path

    @property
    def public(self) -> str:
        return self.private.with_suffix(".pub").read_text(encoding="ascii").strip()

    def sign(self, digest: str, namespace: str = "medhelm-export", *, newline: bool = False) -> Path:
        """``printf %s DIGEST | ssh-keygen -Y sign -f KEY -n NAMESPACE > FILE`` (what the approver runs)."""
        out = self.private.parent / f"{self.name}-{digest[:12]}-{namespace}.sig"
        proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(self.private), "-n", namespace],
                              input=(digest + ("\n" if newline else "")).encode(), capture_output=True, check=True)
        out.write_bytes(proc.stdout)
        return out


def signer(folder: Path, name: str) -> Signer:
    key = folder / name
    if not key.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return Signer(name=name, private=key)


def signers(home: Path) -> dict[str, Signer]:
    """The people of a test site (keys outside the home): a requester, an approver, an outsider."""
    folder = home.parent / "people"
    return {name: signer(folder, name) for name in (REQUESTER, APPROVER, "mallory")}


def write_policy(home: Path, **overrides: Any) -> Path:
    """The site's export policy OUTSIDE the home, named by $MEDHELM_EXPORT_POLICY (set in this process; the
    autouse fixture below restores the environment after each test). Lists REQUESTER and APPROVER by key."""
    from medhelm_local.export.policy import POLICY_ENV, default_policy_bytes

    people = signers(home)
    policy = yaml.safe_load(default_policy_bytes())
    policy["approval"]["requesters"] = [{"name": REQUESTER, "key": people[REQUESTER].public}]
    policy["approval"]["approvers"] = [{"name": APPROVER, "key": people[APPROVER].public}]
    for key, value in overrides.items():
        policy[key] = value
    path = home.parent / "site-policy" / "export-policy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    os.environ[POLICY_ENV] = str(path)
    return path


@pytest.fixture(autouse=True)
def _export_policy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from medhelm_local.export.policy import POLICY_ENV

    monkeypatch.delenv(POLICY_ENV, raising=False)  # restored (unset) after the test, whatever write_policy set


@contextmanager
def site_policy(home: Path, **overrides: Any) -> Iterator[Path]:
    """``write_policy`` for fixtures outside this package (session-scoped ones included): $MEDHELM_EXPORT_POLICY
    is set inside the block and restored after it."""
    from medhelm_local.export.policy import POLICY_ENV

    before = os.environ.get(POLICY_ENV)
    try:
        yield write_policy(home, **overrides)
    finally:
        if before is None:
            os.environ.pop(POLICY_ENV, None)
        else:
            os.environ[POLICY_ENV] = before


def request_export(cli: InProcessCli, *run_ids: str) -> dict[str, Any]:
    """``export request`` by the site's requester (``write_policy`` or ``site_policy`` first); returns the request
    (ready or blocked)."""
    result = cli("export", "request", "--runs", ",".join(run_ids), "--key", str(signers(cli.home)[REQUESTER].private),
                 "--json")
    assert result.code in (0, 1), result.stderr
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def approve_args(home: Path, who: str = APPROVER) -> list[str]:
    return ["--key", str(signers(home)[who].private)]


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
