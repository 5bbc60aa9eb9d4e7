"""Identity, standalone login, the store lock, and the rating sample: the console's rules, each checked against
the running console (its own process) or the functions that implement them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium.webdriver.common.by import By

from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole, ConsoleSettings
from medhelm_local.store import Store
from medhelm_local.store.ratings import ClinicianRating
from medhelm_local.store.store import utcnow
from medhelm_local.webconsole import rating
from medhelm_local.webconsole.data import RatableResponse
from medhelm_local.webconsole.identity import NotTrusted, RefusedSubject, StandaloneSessions, identity_from_proxy
from tests.conftest import cli_env
from tests.console.conftest import ConsoleHome, screenshot, start_console, stop_console
from tests.console.proxy import HeaderProxy

SETTINGS = ConsoleSettings(trusted_proxies=["10.0.0.0/24", "::1"], roles={
    ConsoleRole.INFORMATICS: ["informatics"], ConsoleRole.COMPLIANCE: ["compliance", "privacy-office"]})


def test_proxy_headers_are_believed_only_from_trusted_addresses() -> None:
    headers = {"x-forwarded-user": "alice@hospital.org", "x-forwarded-groups": "privacy-office, staff"}
    who = identity_from_proxy("10.0.0.7", headers, SETTINGS)
    assert who.user == "alice@hospital.org" and who.roles == frozenset({ConsoleRole.COMPLIANCE})
    assert identity_from_proxy("::1", headers, SETTINGS).user == "alice@hospital.org"
    for peer in ("10.0.1.7", "127.0.0.1", None, "not-an-address"):
        with pytest.raises(NotTrusted):
            identity_from_proxy(peer, headers, SETTINGS)
    for no_user in ("", "   "):
        with pytest.raises(NotTrusted):
            identity_from_proxy("10.0.0.7", {**headers, "x-forwarded-user": no_user}, SETTINGS)
    # A user the audit trail cannot record is refused sign-in, with the reason (tests/security/test_actor_identity).
    for bad_user in ("alice\nadmin", "x" * 200, "Ada Quillonby 1960-03-04"):
        with pytest.raises(RefusedSubject):
            identity_from_proxy("10.0.0.7", {**headers, "x-forwarded-user": bad_user}, SETTINGS)
    nobody = identity_from_proxy("10.0.0.7", {"x-forwarded-user": "bob"}, SETTINGS)
    assert nobody.roles == frozenset()


def test_console_settings_refuse_a_bad_proxy_address() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not an IP address"):
        ConsoleSettings(trusted_proxies=["oauth2-proxy.medhelm.svc"])
    with pytest.raises(ValidationError):
        ConsoleSettings(roles={"superuser": ["x"]})
    # Trusting the identity headers from every address lets anyone name themselves a compliance officer.
    for everyone in (["0.0.0.0/0"], ["::/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["2000::/3"]):
        with pytest.raises(ValidationError, match="broader than"):
            ConsoleSettings(trusted_proxies=everyone)
    assert ConsoleSettings(trusted_proxies=["10.0.0.0/8", "fd00:10::/32", "127.0.0.1"]).trusted_proxies


def test_login_tokens_work_once() -> None:
    sessions = StandaloneSessions(user="it-admin", roles=frozenset({ConsoleRole.IT}))
    token = sessions.new_login_token()
    session = sessions.redeem(token)
    assert session is not None and sessions.identity(session) is not None
    assert sessions.redeem(token) is None  # spent
    assert sessions.redeem("guessed") is None
    assert sessions.identity("guessed") is None
    sessions.end(session)
    assert sessions.identity(session) is None


def _items(run: str, n: int) -> list[RatableResponse]:
    return [RatableResponse(run, f"model-{run}", "medication_qa", f"q{i}", i) for i in range(n)]


def test_rating_sample_is_stratified_blind_ordered_per_rater_and_reaches_two_raters() -> None:
    frame = _items("r1", 10) + _items("r2", 4)
    sample = rating.stratified_sample(frame, 3)
    assert [sum(1 for i in sample if i.run_id == r) for r in ("r1", "r2")] == [3, 3]
    assert sample == rating.stratified_sample(list(reversed(frame)), 3)  # the same whoever asks

    first = rating.queue(sample, [], "cleo", 2)
    other = rating.queue(sample, [], "chris", 2)
    assert sorted(map(rating.item_key, first)) == sorted(map(rating.item_key, other))
    assert first != other  # each clinician has an order of their own

    def rated(item: RatableResponse, rater: str) -> ClinicianRating:
        return ClinicianRating(run_id=item.run_id, benchmark=item.benchmark, instance_id=item.instance_id,
                               rater=rater, ratings={"accuracy": 3}, rated_at=utcnow())

    given = [rated(first[0], "cleo")]
    assert rating.item_key(first[0]) not in map(rating.item_key, rating.queue(sample, given, "cleo", 2))
    assert rating.queue(sample, given, "chris", 2)[0] == first[0]  # a started item comes first for others
    given.append(rated(first[0], "chris"))
    assert first[0] not in rating.queue(sample, given, "dana", 2)  # two clinicians: complete
    done = rating.progress(sample, given, "cleo", 2)
    assert (done.items, done.complete, done.mine, done.clinicians) == (6, 1, 1, 2)


def test_stored_ratings_feed_jury_validate_and_a_run_without_them_is_refused(console_home: ConsoleHome) -> None:
    run_a = console_home.runs["model-a"]
    result = console_home.cli("jury", "validate", "--run", run_a, "--benchmark", "hospice_referral")
    assert result.code == 2 and "not scored by the jury" in result.stderr
    # Ratings stored for a run that has none: a clear error naming both ways to give them.
    with Store.open(Home(console_home.home)) as store:
        store.conn.execute("DELETE FROM clinician_ratings WHERE run_id = ?", [run_a])
    result = console_home.cli("jury", "validate", "--run", run_a, "--benchmark", "medication_qa")
    assert result.code == 2
    assert "no clinician ratings are stored" in result.stderr and "--ratings" in result.stderr


def test_a_page_says_a_run_is_in_progress_while_the_store_is_locked(
        proxies: dict[str, HeaderProxy], console_home: ConsoleHome) -> None:
    informatics, it = proxies["ines.informatics"], proxies["ivan.it"]
    with Store.open(Home(console_home.home)):  # a writer holds the store, as a run does
        reply = httpx.get(informatics.url + "/runs", timeout=60)
        assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
        assert "A run is in progress" in reply.text
        system = httpx.get(it.url + "/system", timeout=60)  # the IT page still shows disk and audit state
        assert system.status_code == 200 and "writing to the store right now" in system.text
    assert httpx.get(informatics.url + "/runs", timeout=60).status_code == 200


def _standalone_env(console_home: ConsoleHome, tmp_path: Path) -> dict[str, str]:
    config = yaml.safe_load(Home(console_home.home).config_path.read_text(encoding="utf-8"))
    config["console"]["trusted_proxies"] = []
    path = tmp_path / "standalone.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return {**cli_env(), "MEDHELM_CONFIG": str(path)}


def test_standalone_console_binds_loopback_and_admits_a_one_time_link(
        browser: Any, console_home: ConsoleHome, tmp_path: Path, shots: Path) -> None:
    env = _standalone_env(console_home, tmp_path)
    from tests.conftest import Cli

    refused = Cli(home=console_home.home, env=env)("serve", "console", "--host", "0.0.0.0", "--port", "0")
    assert refused.code == 2 and "loopback only" in refused.stderr

    console = start_console(console_home.home, "--role", "compliance", env=env)
    try:
        assert console.start["mode"] == "standalone" and console.start["host"] == "127.0.0.1"
        link = str(console.start["login_url"])
        assert link.startswith(console.url + "/login?token=")
        # Proxy headers mean nothing here; without the session cookie there is nothing.
        forged = httpx.get(console.url + "/audit", headers={"X-Forwarded-User": "carl", "X-Forwarded-Groups": "x"})
        assert forged.status_code == 401 and "one-time login link" in forged.text

        browser.get(link)
        assert "it-admin" in browser.find_element(By.TAG_NAME, "header").text
        assert "Compliance" in browser.find_element(By.TAG_NAME, "header").text
        cookie = browser.get_cookie("medhelm_console")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        browser.get(console.url + "/audit")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Audit trail"
        screenshot(browser, shots, "standalone-audit")
        browser.get(console.url + "/leaderboard")  # --role compliance only
        assert browser.find_element(By.TAG_NAME, "h1").text == "Not allowed"

        again = httpx.get(link, follow_redirects=False)  # the link was spent
        assert again.status_code == 403 and "works once" in again.text
        logins = [r for r in console_home.audit_records() if r.get("action") == "console.login"]
        assert logins and logins[-1]["actor"].endswith("it-admin")
        assert logins[-1]["objects"]["roles"] == ["compliance"]
    finally:
        stop_console(console)
    trail = console_home.audit_records()
    starts = [i for i, r in enumerate(trail) if r.get("action") == "console.start"]
    assert trail[starts[-1]]["objects"]["mode"] == "standalone"
    assert any(r.get("action") == "console.stop" for r in trail[starts[-1]:])  # a SIGTERM stop is on record


def test_an_unexpected_error_shows_its_type_only(console_home: ConsoleHome, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from starlette.testclient import TestClient

    from medhelm_local.webconsole import data
    from medhelm_local.webconsole.app import create_app

    secret = "Patient Quillon-Marrowby, MRN 4471"

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError(secret)

    monkeypatch.setattr(data, "runs", broken)
    sessions = StandaloneSessions(user="ines", roles=frozenset({ConsoleRole.INFORMATICS}))
    client = TestClient(create_app(Home(console_home.home), sessions), raise_server_exceptions=False)
    assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
    reply = client.get("/runs")
    assert reply.status_code == 500 and "ValueError" in reply.text
    assert reply.headers["content-type"].startswith("text/html") and "<title>Internal error</title>" in reply.text
    assert secret not in reply.text and secret not in caplog.text
    assert reply.headers["content-security-policy"].startswith("default-src 'none'")


def test_an_oversized_form_is_refused_before_it_is_parsed(console_home: ConsoleHome,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Any signed-in user, even one without a role, could post a form of any size: the form parser holds up to a
    thousand 1 MiB fields in memory and spools an uploaded file to disk without limit. A body over the console's
    limit is refused (413) before anything of it is parsed, declared or chunked; an ordinary form still works."""
    import starlette.formparsers
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app

    MAX_BODY_BYTES = 64 * 1024  # the console's limit; the largest form, a pasted signature, is 16 KiB at most
    spooled: list[int] = []
    real_spool = starlette.formparsers.SpooledTemporaryFile

    def spy(*args: Any, **kwargs: Any) -> Any:
        spooled.append(1)
        return real_spool(*args, **kwargs)

    monkeypatch.setattr(starlette.formparsers, "SpooledTemporaryFile", spy)
    sessions = StandaloneSessions(user="nora", roles=frozenset())
    client = TestClient(create_app(Home(console_home.home), sessions), raise_server_exceptions=False,
                        follow_redirects=False)
    assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 303
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/").text)
    assert token is not None
    big = b"A" * (4 * MAX_BODY_BYTES)
    upload = client.post("/logout", data={"csrf": token.group(1)}, files={"signature_file": ("approval.sig", big)})
    assert upload.status_code == 413 and not spooled
    assert "<title>Request too large</title>" in upload.text and "at most 64 KiB" in upload.text
    assert upload.headers["content-security-policy"].startswith("default-src 'none'")
    fields = client.post("/logout", data={"csrf": token.group(1), "filler": "x" * (4 * MAX_BODY_BYTES)})
    assert fields.status_code == 413

    def chunks() -> Any:  # no Content-Length: cut off while it is read
        for _ in range(8):
            yield b"A" * MAX_BODY_BYTES

    chunked = client.post("/logout", content=chunks(),
                          headers={"content-type": "application/x-www-form-urlencoded"})
    assert chunked.status_code == 413 and "<title>Request too large</title>" in chunked.text
    assert client.post("/logout", data={"csrf": token.group(1)}).status_code == 303


def test_a_form_without_the_users_token_is_refused_and_audited(console_home: ConsoleHome) -> None:
    """A POST forged by another site (a page the signed-in user visits) carries no valid form token: it is refused,
    and the refusal is an audit record naming the user, as every refusal is."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app

    sessions = StandaloneSessions(user="carl", roles=frozenset({ConsoleRole.COMPLIANCE, ConsoleRole.CLINICIAN}))
    client = TestClient(create_app(Home(console_home.home), sessions), raise_server_exceptions=False,
                        follow_redirects=False)
    assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 303
    request = console_home.export_request
    for path in ("/audit/verify", "/rate", f"/exports/{request}/approve", f"/exports/{request}/deny", "/logout"):
        before = len(console_home.audit_records())
        reply = client.post(path, data={"csrf": "forged", "signature": "-----BEGIN SSH SIGNATURE-----"})
        assert reply.status_code == 400 and "Bad form token" in reply.text, path
        # Mostly a form opened before the console restarted: it says nothing was done and leads back to the page.
        back = {"/audit/verify": "/audit", "/logout": "/", "/rate": "/rate"}.get(path, f"/exports/{request}")
        assert "This form has expired" in reply.text and f'id="back" href="{back}"' in reply.text, path
        refused = [r for r in console_home.audit_records()[before:] if r["action"] == "console.bad_form_token"]
        assert len(refused) == 1, path
        assert refused[0]["outcome"] == "denied" and refused[0]["actor"].endswith("carl")
        assert refused[0]["objects"]["page"] == path
    assert client.get("/audit").status_code == 200  # still signed in: the forged logout ended nothing


def _home_fingerprint(home: Path) -> str:
    import base64
    import hashlib

    from cryptography.hazmat.primitives import serialization

    from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key

    raw = load_public_key(Home(home).keys_dir / PUBLIC_KEY_FILE).public_bytes(serialization.Encoding.Raw,
                                                                             serialization.PublicFormat.Raw)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def _verify_page(console_home: ConsoleHome, env: dict[str, str]) -> httpx.Response:
    import re

    console = start_console(console_home.home, "--role", "compliance", env=env)
    try:
        with httpx.Client(base_url=console.url, timeout=60, follow_redirects=True) as client:
            assert client.get(str(console.start["login_url"])).status_code == 200  # the session cookie
            token = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/audit").text)
            assert token is not None
            return client.post("/audit/verify", data={"csrf": token.group(1)})
    finally:
        stop_console(console)


def test_verification_uses_the_key_pinned_outside_the_home(console_home: ConsoleHome, tmp_path: Path) -> None:
    env = _standalone_env(console_home, tmp_path)
    pinned = _verify_page(console_home, {**env, "MEDHELM_AUDIT_KEY_FINGERPRINT": _home_fingerprint(console_home.home)})
    assert pinned.status_code == 200 and ">INTACT<" in pinned.text and "pinned" in pinned.text
    # A pin naming another key: the trail is not reported intact, and the page says why.
    other = "SHA256:" + "A" * 43
    wrong = _verify_page(console_home, {**env, "MEDHELM_AUDIT_KEY_FINGERPRINT": other})
    assert wrong.status_code in (400, 409) and ">INTACT<" not in wrong.text and "pinned" in wrong.text


def test_runs_page_during_a_run(tmp_path: Path) -> None:
    """A run in progress: where the store lets readers in between a run's writes (attach/detach), the runs page
    shows it running with its progress; where a run holds the store throughout, the page says a run is in
    progress. Either way the page answers within its short wait, and shows the finished run afterwards."""
    import subprocess
    import sys
    import time

    from medhelm_local.home.config import ApplianceConfig
    from medhelm_local.store import connection
    from medhelm_local.testing.fake_openai import FakeOpenAIServer
    from tests.compliance.inproc import InProcessCli
    from tests.console.conftest import write_hospice_csv

    live = hasattr(connection, "EncryptedDatabase")
    cli = InProcessCli(home=tmp_path / "home")
    assert cli("init").code == 0
    with FakeOpenAIServer(responder=lambda _m: "A", latency_s=0.25, slots=1, model_id="slow") as server:
        home = Home(cli.home)
        data = home.config.model_dump()
        data["models"].append({"name": "slow", "base_urls": [server.base_url], "served_model": "slow"})
        home.save_config(ApplianceConfig.model_validate(data))
        assert cli("datasets", "register", "hospice_referral",
                   str(write_hospice_csv(tmp_path / "hospice.csv", 25))).code == 0
        console = start_console(cli.home, env=cli_env())
        run = subprocess.Popen([sys.executable, "-m", "medhelm_local.cli", "--home", str(cli.home), "run", "--model",
                                "slow", "--benchmarks", "hospice_referral", "--concurrency", "1", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        seen: list[int] = []
        try:
            with httpx.Client(base_url=console.url, timeout=60, follow_redirects=True) as client:
                assert client.get(str(console.start["login_url"])).status_code == 200
                while run.poll() is None:
                    started = time.monotonic()
                    page = client.get("/runs")
                    assert time.monotonic() - started < 20
                    seen.append(page.status_code)
                    if page.status_code == 503:
                        assert "A run is in progress" in page.text
                    elif "running" in page.text:
                        progress = re.search(r"(\d+) / 25</td>", page.text)
                        assert progress is not None and int(progress.group(1)) < 25
                        assert 'http-equiv="refresh"' in page.text  # the page reloads itself while a run goes
                    time.sleep(0.3)
                assert run.wait(timeout=120) == 0, run.stderr.read() if run.stderr else ""
                done = client.get("/runs")
                assert done.status_code == 200 and "finished" in done.text and "25 / 25" in done.text
        finally:
            if run.poll() is None:
                run.kill()
            stop_console(console)
    if live:
        assert 200 in seen  # readers got in between the run's writes
    else:
        assert 503 in seen  # the run held the store from start to end, and the page said so


def test_patient_level_views_are_audited_by_position_never_by_instance_id(console_home: ConsoleHome) -> None:
    """An instance id may be PHI (OMOP's is ``<person_id>:<prediction_date>``; a CSV's, the hospital's own id
    column): the audit trail records which items a user saw by their place in the dataset, never by their id."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole import data
    from medhelm_local.webconsole.app import create_app

    home = Home(console_home.home)
    run = console_home.runs["model-a"]
    shown, _ = data.instances(home, run, "medication_qa")
    ratable = data.ratable_responses(home)
    assert shown and ratable
    before = len(console_home.audit_records())
    for user, roles, path in (("ivy", ConsoleRole.INFORMATICS, f"/runs/{run}/medication_qa/instances"),
                              ("rhea", ConsoleRole.CLINICIAN, "/rate")):
        sessions = StandaloneSessions(user=user, roles=frozenset({roles}))
        client = TestClient(create_app(home, sessions), raise_server_exceptions=False, follow_redirects=False)
        assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 303
        assert client.get(path).status_code == 200, path
    new = console_home.audit_records()[before:]
    viewed = [r for r in new if r["action"] == "console.view_instances"]
    rated = [r for r in new if r["action"] == "console.rating.view"]
    assert len(viewed) == 1 and len(rated) == 1
    # Exactly these objects: nothing else (an id) rides along.
    assert viewed[0]["objects"] == {"run_id": run, "benchmark": "medication_qa", "page": 0, "failures_only": False,
                                    "positions": [row.position for row in shown], "via": "console-standalone"}
    assert set(rated[0]["objects"]) == {"run_id", "benchmark", "position", "via"}
    assert rated[0]["objects"]["position"] in {item.position for item in ratable}


def test_a_refused_page_is_recorded_without_the_patient_data_a_user_put_in_its_address(
        console_home: ConsoleHome) -> None:
    """A clinician opening `/runs/Okafor_Margaret_1960-03-04` (a page for informatics) was refused and the refusal
    recorded that path as typed: anyone signed in could write a patient's name and birth date into the trail, and a
    forged form's refusal likewise. A value in the address is kept only where it is an id the appliance generated
    or reads as no patient data; else the page is named as its route names it."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app

    sessions = StandaloneSessions(user="carl", roles=frozenset({ConsoleRole.CLINICIAN}))
    client = TestClient(create_app(Home(console_home.home), sessions), raise_server_exceptions=False,
                        follow_redirects=False)
    assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 303
    request = console_home.export_request
    for path in ("/runs/Okafor_Margaret_1960-03-04", "/runs/q3-discharge-review",
                 "/runs/mrn7730019942/medqa/instances", f"/exports/{request}"):
        assert client.get(path).status_code == 403, path
    officer = StandaloneSessions(user="olga", roles=frozenset({ConsoleRole.COMPLIANCE}))
    forging = TestClient(create_app(Home(console_home.home), officer), raise_server_exceptions=False,
                         follow_redirects=False)
    assert forging.get(f"/login?token={officer.new_login_token()}").status_code == 303
    assert forging.post("/exports/Okafor_1960-03-04/approve", data={"csrf": "forged"}).status_code == 400
    pages = [(r["action"], r["objects"]["page"]) for r in console_home.audit_records()
             if r["action"] in ("console.access_denied", "console.bad_form_token")]
    denied = "console.access_denied"
    assert pages[-5:] == [(denied, "/runs/[run_id]"), (denied, "/runs/q3-discharge-review"),
                          (denied, "/runs/[run_id]/medqa/instances"), (denied, f"/exports/{request}"),
                          ("console.bad_form_token", "/exports/[request_id]/approve")]
    assert not any(word in str(console_home.audit_records()) for word in ("Okafor", "7730019942", "1960"))
