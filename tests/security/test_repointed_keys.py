"""The appliance's key files are never read as data, wherever its configuration now says its keys folder is.

Whoever writes ``appliance.yaml`` can point ``paths.keys``, ``paths.store`` and ``paths.audit`` at new folders and
run ``init`` there: the home's real keys folder was then none of "the appliance's own places", and a spec's
``sibling_text`` (or a model's ``api_key_file``) read the store's data key into every prompt (or sent it as a
bearer token to a listener on loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from medhelm_local.home.keys import DATA_KEY_FILE, SIGNING_KEY_FILE
from tests.conftest import Cli
from tests.security.test_model_key_file import _add_model, listener

SPEC = """\
id: leak
name: Leak
description: reads a file beside the extract into every prompt
subcategory: Care Coordination and Planning
input_format: private_table
loader_options:
  id_column: note_id
  fields: {{question: question}}
  label_column: followup
  sibling_text: {{context: "{secret}"}}
output_type: choice_letter
labels: ["A", "B"]
label_map: {{"yes": "A", "no": "B"}}
metric: exact_match
max_tokens: 8
prompt:
  template: "{{context}} {{question}}"
"""


def _repoint(home: Path) -> None:
    """A second appliance in the same home: new keys, store and trail folders, as appliance.yaml now says."""
    config = home / "appliance.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["paths"].update({"keys": "k2", "store": "s2/medhelm.duckdb", "audit": "a2/audit.jsonl"})
    config.write_text(yaml.safe_dump(data), encoding="utf-8")


@pytest.mark.parametrize("secret", [f"keys/{DATA_KEY_FILE}", f"keys/{SIGNING_KEY_FILE}"])
def test_a_spec_cannot_read_the_keys_the_configuration_moved_away_from(home_cli: Cli, tmp_path: Path,
                                                                       secret: str) -> None:
    home = home_cli.home
    _repoint(home)
    assert home_cli("init").code == 0
    (home / "notes.csv").write_text("note_id,question,followup\n1,Follow up?,yes\n2,Follow up?,no\n",
                                    encoding="utf-8")
    spec = tmp_path / "leak.yaml"
    spec.write_text(SPEC.format(secret=secret), encoding="utf-8")

    result = home_cli("datasets", "register", "--spec", str(spec), "leak", str(home / "notes.csv"))

    assert result.code == 2, result.stdout + result.stderr
    assert "never read from there" in result.stderr


def test_an_api_key_file_cannot_name_the_keys_the_configuration_moved_away_from(home_cli: Cli) -> None:
    home = home_cli.home
    _repoint(home)
    assert home_cli("init").code == 0
    with listener() as (base_url, seen):
        _add_model(home, base_url, home / "keys" / DATA_KEY_FILE)
        result = home_cli("models", "wait", "spy", "--timeout", "5")
    assert result.code == 2, result.stdout + result.stderr
    assert seen == [], "a request went out with the appliance's data key as its API key"
