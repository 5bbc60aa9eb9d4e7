"""The audit trail's actor is the account the command runs as, whatever the caller's environment says.

``getpass.getuser()`` reads ``LOGNAME``, ``USER``, ``LNAME`` and ``USERNAME`` before the password database: an
insider could record their actions (a denied export, a run, a key rotation) under a colleague's name by setting
one of them. ``--actor`` / ``$MEDHELM_ACTOR`` stay what they are documented to be, a free-text identity recorded
*beside* the account, never instead of it."""

from __future__ import annotations

import json
import os
import pwd

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
