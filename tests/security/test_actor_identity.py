"""The audit trail's actor is the account the command runs as, whatever the caller's environment says.

``getpass.getuser()`` reads ``LOGNAME``, ``USER``, ``LNAME`` and ``USERNAME`` before the password database: an
insider could record their actions (a denied export, a run, a key rotation) under a colleague's name by setting
one of them. ``--actor`` / ``$MEDHELM_ACTOR`` stay what they are documented to be, an identity recorded *beside*
the account, never instead of it.

That identity, and the user the console's proxy names, is written into every audit record, ``audit report`` and
its PDF: ``--actor "Ada Quillonby DOB 1960-03-04"`` put a patient's name and birth date in the trail. It must now
be a user name or sign-in subject; free text, dates and encodings are refused (exit 2, or no sign-in) and nothing
of them is written or echoed."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.actors import actor_problem
from tests.conftest import Cli

SPOOFED = {"LOGNAME": "mallory", "USER": "mallory", "LNAME": "mallory", "USERNAME": "mallory"}


def _account() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


def _actors(cli: Cli) -> list[str]:
    shown = cli("audit", "show", "--json")
    assert shown.code == 0, shown.stderr
    return [record["actor"] for record in json.loads(shown.stdout)]


def test_the_environment_cannot_name_the_actor(cli: Cli) -> None:
    cli.env.update(SPOOFED)
    assert cli("init").code == 0
    assert cli("models", "add", "m", "--kind", "vllm", "--base-url", "http://127.0.0.1:9/v1").code == 0
    actors = _actors(cli)
    assert len(actors) == 3 and set(actors) == {_account()}  # init, the add's intent and its success


def test_a_stated_actor_is_recorded_beside_the_account_not_instead_of_it(cli: Cli) -> None:
    cli.env.update(SPOOFED)
    assert cli("--actor", "alice@hospital", "init").code == 0
    assert _actors(cli) == [f"{_account()}:alice@hospital"]


# What a red team wrote, and what a patient's details become when written without spaces or in hex.
ATTACKS = [
    "root:Ada Quillonby DOB 1960-03-04",
    "Ada.Quillonby.1960.03.04",
    "AdaQuillonby19600304",
    "mrn_7730019942",
    "Ada.Quillonby.born.March.fourth.nineteen.sixty",
    "4164612051756966:6c6c6f6e62792031",  # "Ada Quillonby 1" in hex, split to slip under the length of one id
]
# Words of the attacks none of the messages or records may hold.
LEAKED = ("Quillonby", "1960", "7730019942", "March", "4164612051756966")
SUBJECTS = [
    "alice", "root:alice", "auth0|123", "alice@hospital.org", "jane.q.public@hospital.example.org",
    "system:serviceaccount:medhelm:runner", "system:serviceaccount:medhelm-prod:eval-runner",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",  # Keycloak
    "google-oauth2|110169484474386276334", "auth0|5f7c8ec7c33c6c004bbafe82", "00u1abcd2EFGH3ijk4l5",  # Auth0, Okta
    "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",  # an Entra ID pairwise subject
    "kubernetes-runner", "helm-test", "compose-operator", "jdoe@hospital", "uid1000",
]


def test_real_user_names_and_sign_in_subjects_are_accepted() -> None:
    assert [s for s in SUBJECTS if actor_problem(s) is not None] == []


@pytest.mark.parametrize("attack", [*ATTACKS, "", "x" * 129, "alice\nadmin", "j\u00fcrgen", "alice bob"])
def test_free_text_dates_and_encodings_cannot_name_an_actor(attack: str) -> None:
    assert actor_problem(attack) is not None


def test_a_free_text_actor_is_refused_before_anything_is_recorded(home_cli: Cli) -> None:
    trail = home_cli.home / "audit" / "audit.jsonl"
    before = trail.read_bytes()
    for attack in ATTACKS:
        refused = home_cli("--actor", attack, "models", "add", "m", "--kind", "vllm", "--base-url",
                           "http://127.0.0.1:9/v1")
        assert refused.code == 2, attack
        assert "--actor: not a user name or sign-in subject" in refused.stderr
        assert "expected a user name or sign-in subject" in refused.stderr
        assert not any(word in refused.stderr + refused.stdout for word in LEAKED), attack
    home_cli.env["MEDHELM_ACTOR"] = ATTACKS[0]
    refused = home_cli("audit", "verify")
    assert refused.code == 2 and "$MEDHELM_ACTOR: not a user name or sign-in subject" in refused.stderr
    assert not any(word in refused.stderr for word in LEAKED)
    assert trail.read_bytes() == before and "- name: m\n" not in home_cli.home.joinpath("appliance.yaml").read_text()


def test_a_free_text_actor_creates_no_home(cli: Cli) -> None:
    refused = cli("--actor", ATTACKS[0], "init")
    assert refused.code == 2 and not cli.home.exists()


def test_sign_in_subjects_are_recorded(cli: Cli) -> None:
    assert cli("--actor", "f47ac10b-58cc-4372-a567-0e02b2c3d479", "init").code == 0
    cli.env["MEDHELM_ACTOR"] = "system:serviceaccount:medhelm:runner"
    assert cli("audit", "verify").code == 0
    assert _actors(cli)[:1] == [f"{_account()}:f47ac10b-58cc-4372-a567-0e02b2c3d479"]
    assert f"{_account()}:system:serviceaccount:medhelm:runner" in _actors(cli)


def test_an_account_name_that_is_free_text_is_recorded_as_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container image with a writable /etc/passwd lets the process name its own uid."""
    from medhelm_local import context

    class Entry:
        pw_name = "Ada Quillonby 1960-03-04"

    monkeypatch.setattr(context.pwd, "getpwuid", lambda uid: Entry())
    assert context._os_user(lambda: None) == f"uid{os.getuid()}"


def _proxied_console(home_cli: Cli) -> Any:
    from starlette.testclient import TestClient

    from medhelm_local.home import Home
    from medhelm_local.home.config import ApplianceConfig
    from medhelm_local.webconsole.app import create_app

    home = Home(home_cli.home)
    data = home.config.model_dump()
    data["console"] = {"trusted_proxies": ["10.0.0.0/24"], "roles": {"compliance": ["privacy-office"]}}
    home.save_config(ApplianceConfig.model_validate(data))
    return TestClient(create_app(home, None), raise_server_exceptions=False, client=("10.0.0.7", 50000))


def _trail(home: Path) -> list[dict[str, Any]]:
    lines = (home / "audit" / "audit.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["action"] != "audit.checkpoint"]


def test_the_console_refuses_sign_in_to_a_subject_the_trail_cannot_record(home_cli: Cli) -> None:
    """The proxy's user header is written into every record of that user. A refused one gets a page saying why
    and what IT must pass instead; the refusal is audited as the console, with the reason only."""
    client = _proxied_console(home_cli)
    for attack in ATTACKS:
        before = len(_trail(home_cli.home))
        page = client.get("/audit", headers={"X-Forwarded-User": attack, "X-Forwarded-Groups": "privacy-office"})
        assert page.status_code == 403 and "Your sign-in name cannot be used here" in page.text, attack
        assert "user name, email or subject id" in page.text
        assert not any(word in page.text for word in LEAKED), attack
        [refusal] = _trail(home_cli.home)[before:]
        assert refusal["action"] == "console.sign_in_refused" and refusal["outcome"] == "denied"
        assert refusal["actor"] == "console" and refusal["objects"]["reason"].startswith("actor_")
    trail = (home_cli.home / "audit" / "audit.jsonl").read_text()
    assert not any(word in trail for word in LEAKED)
    subject = "f47ac10b-58cc-4372-a567-0e02b2c3d479"
    page = client.get("/audit", headers={"X-Forwarded-User": subject, "X-Forwarded-Groups": "privacy-office"})
    assert page.status_code == 200
    assert client.get("/", headers={"X-Forwarded-User": "  "}).status_code == 401  # no user: as before


# Staff numbers as hospitals issue them, which have a record number's shape.
STAFF = ["e1234567", "E1234567@hospital.org", "u7654321", "github|1234567", "root:e1234567"]


def _site_form(home: Path, pattern: str) -> None:
    from medhelm_local.home import Home
    from medhelm_local.home.config import ApplianceConfig

    data = Home(home).config.model_dump()
    data["identity"] = {"staff_id_pattern": pattern}
    Home(home).save_config(ApplianceConfig.model_validate(data))


def test_staff_numbers_are_accepted_only_in_the_form_the_site_configured() -> None:
    import re

    site = re.compile(r"[eEu]\d{7}|\d{7}")
    assert [s for s in STAFF if actor_problem(s) != "phi_pattern"] == []
    assert [s for s in STAFF if actor_problem(s, site) is not None] == []
    # What is no staff number stays refused: another record number, the record-number words, a date, an SSN, free
    # text, a staff number with a record number beside it.
    for attack in ["MRN7730019942", "mrn:e1234567", "e1234567|7730019942", "e1234567.19600304",
                   "e1234567-123-45-6789", "Ada Quillonby e1234567", *ATTACKS]:
        assert actor_problem(attack, site) is not None, attack


def test_a_staff_number_signs_commands_where_the_site_names_its_form(home_cli: Cli) -> None:
    refused = home_cli("--actor", "e1234567", "audit", "verify")
    assert refused.code == 2 and "identity.staff_id_pattern" in refused.stderr
    assert "e1234567" not in refused.stderr
    _site_form(home_cli.home, r"e\d{7}")
    assert home_cli("--actor", "e1234567", "audit", "verify").code == 0
    home_cli.env["MEDHELM_ACTOR"] = "e1234567@hospital.org"
    assert home_cli("audit", "verify").code == 0
    assert _actors(home_cli)[-2:] == [f"{_account()}:e1234567", f"{_account()}:e1234567@hospital.org"]
    assert home_cli("--actor", "x1234567", "audit", "verify").code == 2  # not the site's form


def test_an_account_named_by_staff_number_is_recorded_in_the_sites_form(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from medhelm_local import context

    class Entry:
        pw_name = "e1234567"

    monkeypatch.setattr(context.pwd, "getpwuid", lambda uid: Entry())
    assert context._os_user(lambda: None) == f"uid{os.getuid()}"
    assert context._os_user(lambda: re.compile(r"e\d{7}")) == "e1234567"


@pytest.mark.parametrize("pattern", ["(", "\\d*", ""])
def test_a_staff_number_form_that_cannot_work_is_refused(pattern: str) -> None:
    from pydantic import ValidationError

    from medhelm_local.home.config import IdentitySettings

    with pytest.raises(ValidationError, match="staff_id_pattern"):
        IdentitySettings(staff_id_pattern=pattern)


def test_the_console_signs_in_a_staff_number_in_the_sites_form(home_cli: Cli) -> None:
    headers = {"X-Forwarded-User": "e1234567", "X-Forwarded-Groups": "privacy-office"}
    assert _proxied_console(home_cli).get("/audit", headers=headers).status_code == 403
    _site_form(home_cli.home, r"e\d{7}")
    assert _proxied_console(home_cli).get("/audit", headers=headers).status_code == 200
