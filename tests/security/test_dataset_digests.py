"""A dataset version's digest of its instances (``dataset_readings``) is no digest of extract values anyone can
compute. An insider who writes a spec can read one row's one cell into a dataset of one instance (a DuckDB query
``... where mrn = 'X'``); with a plain sha256 of the instances, ``datasets list --json`` showed it, and a date of
birth was found by hashing each date of a century in a fraction of a second. The digest is now keyed by a random
salt kept in the (encrypted) store, and not listed; a version's fingerprint that covers a reading covers it
keyed too."""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

import duckdb
import yaml

from medhelm_local.records import Instance
from medhelm_local.store import Store
from medhelm_local.store.store import dataset_version, stored_form
from tests.conftest import Cli
from tests.scoring.helpers import make_home

DOB = "1950-01-02"


def public_digest(instances: list[Instance]) -> str:
    """The instances' digest as the open-source code frames it, without a key: what an insider can compute."""
    digest = hashlib.sha256()
    for instance_id, label, payload in map(stored_form, instances):
        digest.update(f"{json.dumps([instance_id, label])}\0{payload}\n".encode())
    return digest.hexdigest()


def guess(dob: str) -> Instance:
    return Instance(benchmark="probe", id="x", fields={"question": dob}, references=["A"], label="A")


def test_a_one_cell_dataset_lists_no_digest_its_cell_can_be_found_by(home_cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "ehr.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE patients (mrn VARCHAR, dob VARCHAR)")
    con.execute("INSERT INTO patients VALUES ('MRN001', ?), ('MRN002', '1961-07-30')", [DOB])
    con.close()
    spec = {
        "id": "probe",
        "name": "Probe",
        "description": "One cell.",
        "category": "Administration and Workflow",
        "subcategory": "Care Coordination and Planning",
        "input_format": "private_table",
        "loader_options": {
            "query": "select 'x' as id, dob as question, 'A' as answer from patients where mrn = 'MRN001'",
            "id_column": "id",
            "fields": {"question": "question"},
            "label_column": "answer",
        },
        "output_type": "choice_letter",
        "labels": ["A", "B"],
        "metric": "exact_match",
        "max_tokens": 8,
        "prompt": {"template": "{question}"},
        "source": "test",
        "license": "test",
    }
    spec_file = tmp_path / "probe.yaml"
    spec_file.write_text(yaml.safe_dump(spec), encoding="utf-8")
    registered = home_cli("datasets", "register", "probe", str(db), "--spec", str(spec_file), "--json")
    assert registered.code == 0, registered.stderr
    listed = home_cli("datasets", "list", "--json")
    assert listed.code == 0, listed.stderr
    shown = registered.stdout + listed.stdout
    assert public_digest([guess(DOB)]) not in shown
    assert "instances_sha256" not in listed.json()[0]
    day = datetime.date(1950, 1, 1)  # the search that found the date of birth: each day near it, hashed
    candidates = {public_digest([guess((day + datetime.timedelta(days=n)).isoformat())]) for n in range(10)}
    assert not any(candidate in shown for candidate in candidates)


def test_a_new_readings_fingerprint_covers_a_keyed_digest(tmp_path: Path) -> None:
    """The same source and loader settings read into other instances: a new version, whose fingerprint covers the
    reading. Covering a plain digest, it was as good as the digest for finding the cell."""
    home = make_home(tmp_path / "home")
    source, loader = "a" * 64, "loader-settings"
    with Store.open(home) as store:
        store.register_dataset("probe", source, loader, "ehr.duckdb", [], {})
        reread = store.register_dataset("probe", source, loader, "ehr.duckdb", [guess(DOB)], {})
        current = store.current_dataset("probe")
    assert reread.new and reread.reading_changed is not None
    assert reread.fingerprint != dataset_version(source, loader, public_digest([guess(DOB)]))
    assert current is not None and current.instances_sha256 != public_digest([guess(DOB)])
