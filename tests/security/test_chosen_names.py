"""Names a user chooses that the audit trail records as written (a custom benchmark's id, a ``--run-id``): like the
actor, they may hold no date, PHI pattern or encoded text. The refusal (exit 2) never quotes the name, and nothing
is recorded or stored."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from tests.conftest import Cli

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))
# A patient's name, record number and birth date, and a name in hex, as an insider would spell them in an id.
PHI_IDS = {
    "dob_and_mrn": "quillonby_ada_mrn7730019942_dob_1960_03_04",
    "compact_date": "quillonby_ada_19600304",
    "record_number": "quillonby_ada_a7730019942",
    "hex_name": "note_4164612051756f6c6c6f6e6279",
}


def _spec_with_id(tmp_path: Path, benchmark_id: str) -> Path:
    spec = tmp_path / f"{benchmark_id}.yaml"
    spec.write_text((SAMPLES / "followup_needed.yaml").read_text().replace("id: followup_needed",
                                                                          f"id: {benchmark_id}"))
    return spec


def _trail(cli: Cli) -> str:
    return (cli.home / "audit" / "audit.jsonl").read_text()


@pytest.mark.parametrize("benchmark_id", PHI_IDS.values(), ids=PHI_IDS.keys())
def test_a_custom_benchmark_id_holding_phi_is_refused_unquoted_and_unrecorded(
        home_cli: Cli, tmp_path: Path, benchmark_id: str) -> None:
    spec = _spec_with_id(tmp_path, benchmark_id)
    refused = home_cli("datasets", "register", benchmark_id, str(SAMPLES / "followup_needed.csv"), "--spec", str(spec))
    assert refused.code == 2, refused.stderr
    assert "field id" in refused.stderr and "a benchmark id is recorded in the audit trail" in refused.stderr
    assert benchmark_id not in refused.stderr.replace(str(spec), "")
    assert "quillonby" not in _trail(home_cli) and benchmark_id not in _trail(home_cli)
    assert not (home_cli.home / "benchmarks" / f"{benchmark_id}.yaml").exists()


def test_a_phi_benchmark_id_written_into_the_home_by_hand_is_refused_too(home_cli: Cli, tmp_path: Path) -> None:
    """The toolbox's shell can write the home: a spec file put under benchmarks/ is read with the same check."""
    benchmark_id = PHI_IDS["dob_and_mrn"]
    folder = home_cli.home / "benchmarks"
    folder.mkdir(exist_ok=True)
    (folder / f"{benchmark_id}.yaml").write_text(_spec_with_id(tmp_path, benchmark_id).read_text())
    refused = home_cli("datasets", "register", benchmark_id, str(SAMPLES / "followup_needed.csv"))
    assert refused.code == 2, refused.stderr
    assert "field id" in refused.stderr
    assert "quillonby" not in _trail(home_cli)


def test_a_benchmark_id_in_words_is_registered(home_cli: Cli, tmp_path: Path) -> None:
    spec = _spec_with_id(tmp_path, "followup_after_discharge_v2")
    registered = home_cli("datasets", "register", "followup_after_discharge_v2",
                          str(SAMPLES / "followup_needed.csv"), "--spec", str(spec))
    assert registered.code == 0, registered.stderr
    assert "followup_after_discharge_v2" in _trail(home_cli)
