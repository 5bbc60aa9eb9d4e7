"""Console fixtures: a home holding real runs (two models through fake OpenAI-compatible servers, a judge, the
real runner and jury), a console served by `medhelm-local serve console` in its own process, one stand-in
authenticating proxy per user, and headless Chromium driven by Selenium."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.compliance.conftest as compliance_fixtures
from medhelm_local.home import Home, ModelEndpoint
from medhelm_local.home.config import ApplianceConfig, ConsoleRole, Pricing
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.inproc import InProcessCli
from tests.conftest import cli_env
from tests.console.proxy import HeaderProxy

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
QUESTION = "Should this patient be referred to hospice care? A. Yes B. No"
MEDICATION_SECRET = "Vexomarin"  # an invented drug name: shows up only in patient-level views

USERS = {  # user -> groups the identity provider asserts
    "ines.informatics": ["medhelm-informatics"],
    "carl.compliance": ["medhelm-compliance"],
    "cleo.clinician": ["medhelm-clinicians"],
    "chris.clinician": ["medhelm-clinicians"],
    "ivan.it": ["medhelm-it"],
    "nora.noroles": ["cafeteria"],
}
ROLES = {"informatics": ["medhelm-informatics"], "compliance": ["medhelm-compliance"],
         "clinician": ["medhelm-clinicians"], "it": ["medhelm-it"]}


def judge_reply(messages: list[dict[str, Any]]) -> str:
    """Ratings that vary by item (a digest of the prompt), so agreement statistics have variance."""
    digest = hashlib.sha256(messages[-1]["content"].encode()).digest()
    a, b, c = (1 + digest[i] % 5 for i in range(3))
    return json.dumps({"accuracy": {"score": a, "explanation": "ok"}, "completeness": {"score": b, "explanation": "ok"},
                       "clarity": {"score": c, "explanation": "ok"}})


def model_b(messages: list[dict[str, Any]]) -> str:
    """Right on notes 0-12, wrong on 13-24: 13 of 25, exactly 0.52, so no count the score implies is below the
    export's minimum cell size; a varied free-text answer otherwise."""
    content = messages[-1]["content"]
    note = re.search(r"Synthetic note (\d+):", content)
    if note is not None:
        i = int(note.group(1))
        right = "A" if i % 2 else "B"
        return right if i < 13 else ("B" if right == "A" else "A")
    digest = hashlib.sha256(content.encode()).digest()
    return f"Take it with food; ask your pharmacist about {MEDICATION_SECRET} interactions ({digest[0]})."


def write_medication_xlsx(path: Path, n: int) -> Path:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Question", "Answer", "Focus (Drug)", "Question Type"])
    for i in range(n):
        sheet.append([f"Can I take {MEDICATION_SECRET} {i} mg with grapefruit juice?",
                      f"Avoid grapefruit with dose {i}.", MEDICATION_SECRET, "Interaction"])
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(path)
    return path


def write_hospice_csv(path: Path, n: int) -> Path:
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context", "label"])
        for i in range(n):
            writer.writerow([QUESTION, f"Synthetic note {i}: stable, routine follow up.", "A" if i % 2 else "B"])
    return path


@dataclass
class ConsoleHome:
    home: Path
    cli: InProcessCli
    runs: dict[str, str]  # model -> run id
    export_request: str
    export_policy: Path | None = None  # the site's export policy outside the home, where requests are signed
    servers: list[FakeOpenAIServer] = field(default_factory=list)

    def audit_records(self) -> list[dict[str, Any]]:
        from medhelm_local.audit import AuditTrail

        return AuditTrail(Home(self.home).audit_path).records()


def _json(cli: InProcessCli, *args: str) -> Any:
    result = cli(*args, "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="session")
def console_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleHome]:
    root = tmp_path_factory.mktemp("console-home")
    cli = InProcessCli(home=root / "home")
    assert cli("init").code == 0
    # Requests signed with the requester's own key (sec-export's flow) need the site's policy listing people by key.
    signed_requests = hasattr(compliance_fixtures, "request_export")
    policy = compliance_fixtures.write_policy(cli.home) if signed_requests else None
    with FakeOpenAIServer(responder=lambda _m: "A", model_id="model-a") as a, \
            FakeOpenAIServer(responder=model_b, model_id="model-b") as b, \
            FakeOpenAIServer(responder=judge_reply, model_id="judge") as judge:
        home = Home(cli.home)
        data = home.config.model_dump()
        data["models"] += [
            ModelEndpoint(name="model-a", base_urls=[a.base_url], served_model="model-a",
                          pricing=Pricing(input_per_million=0.5, output_per_million=1.5)).model_dump(),
            ModelEndpoint(name="model-b", base_urls=[b.base_url], served_model="model-b",
                          pricing=Pricing(input_per_million=2.0, output_per_million=6.0)).model_dump(),
            ModelEndpoint(name="judge-1", base_urls=[judge.base_url], served_model="judge",
                          pricing=Pricing(input_per_million=0.1, output_per_million=0.1)).model_dump(),
            # Configured, but its server is gone: the IT page must say so.
            ModelEndpoint(name="retired-model", base_urls=["http://127.0.0.1:9/v1"]).model_dump(),
        ]
        data["judges"] = ["judge-1"]
        data["console"] = {"trusted_proxies": ["127.0.0.2/32"], "roles": ROLES, "sample_per_stratum": 3,
                           "read_wait_s": 1.0}
        home.save_config(ApplianceConfig.model_validate(data))
        hospice = write_hospice_csv(root / "extracts" / "hospice.csv", 25)
        meds = write_medication_xlsx(root / "extracts" / "medication_qa.xlsx", 6)
        assert cli("datasets", "register", "hospice_referral", str(hospice)).code == 0
        result = cli("datasets", "register", "medication_qa", str(meds))
        assert result.code == 0, result.stderr
        runs = {}
        for model in ("model-a", "model-b"):
            run = _json(cli, "run", "--model", model, "--benchmarks", "hospice_referral,medication_qa")
            runs[model] = str(run["run_id"])
        if signed_requests:
            request = compliance_fixtures.request_export(cli, *runs.values())
        else:
            request = _json(cli, "export", "request", "--runs", ",".join(runs.values()))
        yield ConsoleHome(home=cli.home, cli=cli, runs=runs, export_request=str(request["request_id"]),
                          export_policy=policy, servers=[a, b, judge])


@dataclass
class RunningConsole:
    url: str
    process: subprocess.Popen[str]
    start: dict[str, Any]


def start_console(home: Path, *args: str, env: dict[str, str] | None = None) -> RunningConsole:
    process = subprocess.Popen(
        [sys.executable, "-m", "medhelm_local.cli", "--home", str(home), "--actor", "it-admin", "serve", "console",
         "--port", "0", "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env())
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.rstrip() == "}":
            start = json.loads("".join(lines))
            return RunningConsole(url=f"http://127.0.0.1:{start['port']}", process=process, start=start)
    process.kill()
    raise AssertionError(f"console did not start: {''.join(lines)} {process.stderr.read() if process.stderr else ''}")


def stop_console(console: RunningConsole) -> None:
    console.process.terminate()
    try:
        console.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        console.process.kill()


@pytest.fixture(scope="session")
def proxied_console(console_home: ConsoleHome) -> Iterator[RunningConsole]:
    env = cli_env()
    if console_home.export_policy is not None:  # outside the home, as the chart mounts it
        env["MEDHELM_EXPORT_POLICY"] = str(console_home.export_policy)
    console = start_console(console_home.home, env=env)
    assert console.start["mode"] == "proxy"
    yield console
    stop_console(console)


@pytest.fixture(scope="session")
def proxies(proxied_console: RunningConsole) -> Iterator[dict[str, HeaderProxy]]:
    started = {user: HeaderProxy(proxied_console.url, user, groups).start() for user, groups in USERS.items()}
    started["(no identity)"] = HeaderProxy(proxied_console.url, None, []).start()
    yield started
    for proxy in started.values():
        proxy.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.fail("Debian packages chromium and chromium-driver are required (apt-get install -y chromium "
                    "chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    return folder


def screenshot(driver: Any, folder: Path, name: str) -> Path:
    """A full-page screenshot: the window grows to the page's height first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(800, min(int(height), 8000)))
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"screenshot {name} failed"
    assert path.stat().st_size > 5000
    driver.set_window_size(1400, 1000)
    return path


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MEDHELM_"):
            monkeypatch.delenv(key, raising=False)


def dump(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


@pytest.fixture
def signed_in(console_home: ConsoleHome) -> Iterator[Callable[..., Any]]:
    """A starlette TestClient signed in (standalone, one-time link) with the given role, on the console's home or
    on ``home``."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    opened: list[Any] = []

    def client(role: ConsoleRole, home: Path | None = None) -> Any:
        sessions = StandaloneSessions(user=f"{role.value}-user", roles=frozenset({role}))
        test_client = TestClient(create_app(Home(home or console_home.home), sessions), raise_server_exceptions=False)
        test_client.__enter__()
        opened.append(test_client)
        assert test_client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        return test_client

    yield client
    for test_client in opened:
        test_client.__exit__(None, None, None)


@contextmanager
def ready_export(console_home: ConsoleHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> Iterator[tuple[InProcessCli, Any, Path, str]]:
    """A copy of the console's home with its own export policy (its own requester and approver keys, beside it)
    and a ready export request: (its CLI, a client signed in as a compliance officer, the home, the request id)."""
    from starlette.testclient import TestClient

    from medhelm_local.export.policy import POLICY_ENV
    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    home = tmp_path / "home"
    shutil.copytree(console_home.home, home, symlinks=True)
    monkeypatch.setenv(POLICY_ENV, "unset")  # restored (unset) after the test, whatever write_policy sets
    compliance_fixtures.write_policy(home)
    cli = InProcessCli(home=home)
    request = compliance_fixtures.request_export(cli, *console_home.runs.values())
    assert request["status"] == "ready", request
    sessions = StandaloneSessions(user="carl", roles=frozenset({ConsoleRole.COMPLIANCE}))
    with TestClient(create_app(Home(home), sessions), raise_server_exceptions=False) as client:
        assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        yield cli, client, home, str(request["request_id"])
