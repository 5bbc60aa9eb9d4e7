"""Registering a dataset again after an upgrade whose loader reads the same file differently (a DuckDB BLOB note
read as ``b'...'`` by the release before, as text now). The store kept the old instances ("already registered")
and every later run used them. Now the registration stores a new version, current, whose fingerprint covers the
reading, and says so; the same reading registered again stays the version it was, with its fingerprint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from medhelm_local.application import datasets as datasets_app
from medhelm_local.benchmarks.registry import SpecRegistry, load_custom_spec, shipped_spec
from medhelm_local.errors import BadInputError
from medhelm_local.loaders.base import LoadResult
from medhelm_local.records import Instance
from medhelm_local.runner.plan import compute_plan
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from medhelm_local.store.store import dataset_version
from tests.analysis.test_leaderboard_cli import answers
from tests.conftest import Cli, cli_env
from tests.runner.helpers import app
from tests.scoring.helpers import add_run, make_home

SAMPLES = Path(__file__).resolve().parents[1] / "medhelm_local" / "data" / "samples"
NOTE = "Discharged home, stable. Note {}"


def _blob_extract(tmp_path: Path) -> tuple[Path, Path]:
    """A DuckDB extract whose note column is a BLOB of UTF-8 text, and the sample spec reading its table."""
    db = tmp_path / "notes.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE notes AS SELECT i AS note_id, encode(format(?, i)) AS note_text, "
                "'Follow-up within two weeks?' AS question, CASE WHEN i % 2 = 0 THEN 'yes' ELSE 'no' END AS followup "
                "FROM range(1, 7) t(i)", [NOTE])
    con.close()
    spec = tmp_path / "followup_needed.yaml"
    spec.write_text((SAMPLES / "followup_needed.yaml").read_text().replace("types: {note_id: int}", "table: notes"))
    return db, spec


def _as_released_before(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """The release before: the loader gave ``field`` as the repr of its bytes (what a BLOB column reached the
    prompt as)."""
    real = datasets_app.load_dataset

    def old_reading(spec: Any, path: Path) -> LoadResult:
        result = real(spec, path)
        read = [i.model_copy(update={"fields": {**i.fields, field: str(i.fields[field].encode())}})
                for i in result.instances]
        return LoadResult(instances=read, files=result.files, skipped=result.skipped)

    monkeypatch.setattr(datasets_app, "load_dataset", old_reading)


def _stored(home_root: Path, benchmark: str) -> list[Instance]:
    from medhelm_local.home import Home

    with Store.open(Home(home_root), read_only=True) as store:
        current = store.current_dataset(benchmark)
        assert current is not None
        return [i for chunk in store.iter_instances(benchmark, current.fingerprint, chunk=100) for i in chunk]


def test_registering_after_an_upgrade_that_reads_the_file_differently_stores_a_new_current_version(
        home_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medhelm_local.home import Home

    db, spec_file = _blob_extract(tmp_path)
    with monkeypatch.context() as old_release:
        _as_released_before(old_release, "context")
        before = datasets_app.register_dataset(app(Home(home_cli.home)), "followup_needed", db, spec_file=spec_file)
    assert before.new and before.reading_changed is None
    assert all(i.fields["context"].startswith("b'") for i in _stored(home_cli.home, "followup_needed"))
    spec = load_custom_spec(spec_file)
    assert before.fingerprint == dataset_version(before.source_sha256, spec.loader_sha256)  # as it always was

    again = home_cli("datasets", "register", "followup_needed", str(db), "--spec", str(spec_file))
    assert again.code == 0, again.stderr
    said = again.stdout + again.stderr
    assert "already registered" not in said
    assert (f"this release reads notes.duckdb differently from the one that registered version "
            f"{before.fingerprint[:16]} (6 of 6 instances differ)") in said
    assert "Discharged" not in said and "b'" not in said  # counts, never content
    stored = _stored(home_cli.home, "followup_needed")
    assert [i.fields["context"] for i in stored] == [NOTE.format(n) for n in range(1, 7)]

    listed = home_cli("datasets", "list", "--json").json()
    assert [(d["fingerprint"] == before.fingerprint, d["current"]) for d in listed] == [(False, True), (True, False)]
    new_version = listed[0]["fingerprint"]
    table = home_cli("datasets", "list")
    assert f"{new_version[:16]}\tyes" in table.stdout and f"{before.fingerprint[:16]}\t\t" in table.stdout

    trail = [json.loads(line) for line in (home_cli.home / "audit" / "audit.jsonl").read_text().splitlines()]
    registered = [{k: v for k, v in r["objects"].items() if k != "intent_seq"}  # the intent it closes
                  for r in trail if r["action"] == "dataset.register" and r["outcome"] == "success"]
    assert registered[-1] == {
        "benchmark": "followup_needed", "fingerprint": before.source_sha256, "version": new_version, "instances": 6,
        "skipped": 0, "new_version_reason": "reading_changed", "previous_version": before.fingerprint,
        "instances_differ": 6, "instances_compared": 6, "order_changed": False}
    assert "new_version_reason" not in registered[0]
    report = home_cli("audit", "report")
    assert f"(dataset version {new_version[:16]}, a new reading of version {before.fingerprint[:16]})" in report.stdout

    # The same release registering the same file again: the version it stored, unchanged.
    third = home_cli("datasets", "register", "followup_needed", str(db), "--spec", str(spec_file), "--json")
    assert third.code == 0, third.stderr
    assert third.json()["fingerprint"] == new_version and third.json()["new"] is False
    assert third.json()["reading_changed"] is None
    assert len(home_cli("datasets", "list", "--json").json()) == 2

    # A run plans the new version: the custom spec's loader settings are those it was read with.
    with Store.open(Home(home_cli.home)) as store:
        plan = compute_plan(store, SpecRegistry(home_cli.home), "m", ["followup_needed"], max_instances=None,
                            seed=0)
    assert plan.datasets["followup_needed"]["fingerprint"] == new_version


def test_the_same_file_registered_twice_stays_already_registered_with_its_fingerprint(
        tmp_path: Path, public_data: Path) -> None:
    home = make_home(tmp_path / "home")
    path = public_data / "pubmedqa" / "ori_pqal.json"
    first = datasets_app.register_dataset(app(home), "pubmedqa", path)
    second = datasets_app.register_dataset(app(home), "pubmedqa", path)
    assert first.new and not second.new and second.reading_changed is None
    assert second.fingerprint == first.fingerprint == dataset_version(first.source_sha256,
                                                                        shipped_spec("pubmedqa").loader_sha256)
    with Store.open(home, read_only=True) as store:
        assert [d.fingerprint for d in store.list_datasets()] == [first.fingerprint]
    cli = Cli(home=home.root, env=cli_env())
    third = cli("datasets", "register", "pubmedqa", str(path))
    assert third.code == 0 and "(already registered)" in third.stdout + third.stderr
    assert "new version" not in third.stdout + third.stderr


def test_an_interrupted_registration_is_still_refused_on_a_new_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan.py refuses a custom spec whose loader settings are not those its current dataset was read with: a
    version of a new reading has another fingerprint form, and the check holds for it too."""
    home = make_home(tmp_path / "home")
    db, spec_file = _blob_extract(tmp_path)
    with monkeypatch.context() as old_release:
        _as_released_before(old_release, "context")
        datasets_app.register_dataset(app(home), "followup_needed", db, spec_file=spec_file)
    now = datasets_app.register_dataset(app(home), "followup_needed", db, spec_file=spec_file)
    assert now.reading_changed is not None
    with Store.open(home) as store:
        assert compute_plan(store, SpecRegistry(home.root), "m", ["followup_needed"], max_instances=None,
                            seed=0).datasets["followup_needed"]["fingerprint"] == now.fingerprint
    changed = tmp_path / "changed.yaml"  # what a registration killed after installing its spec leaves
    changed.write_text(spec_file.read_text().replace('"yes": "A", "no": "B"', '"yes": "B", "no": "A"'))
    assert changed.read_text() != spec_file.read_text()
    shutil.copyfile(changed, home.root / "benchmarks" / "followup_needed.yaml")
    with Store.open(home) as store, pytest.raises(BadInputError, match="was a registration interrupted"):
        compute_plan(store, SpecRegistry(home.root), "m", ["followup_needed"], max_instances=None, seed=0)


def test_a_run_on_the_old_reading_is_shown_on_a_version_no_longer_current(
        tmp_path: Path, public_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path / "home")
    path = public_data / "pubmedqa" / "ori_pqal.json"
    with monkeypatch.context() as old_release:
        _as_released_before(old_release, "question")
        old = datasets_app.register_dataset(app(home), "pubmedqa", path)
    with Store.open(home) as store:
        instances = [i for chunk in store.iter_instances("pubmedqa", old.fingerprint, chunk=1000) for i in chunk][:20]
        run_id = add_run(store, "alpha", "pubmedqa", old.fingerprint, instances, answers(instances, 15))
        score_benchmark(store, SpecRegistry(home.root), run_id, "pubmedqa")
    cli = Cli(home=home.root, env=cli_env())

    def board() -> dict[str, Any]:
        return {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}

    assert board()["alpha"]["benchmarks"]["pubmedqa"]["dataset_current"] is True
    now = datasets_app.register_dataset(app(home), "pubmedqa", path)
    assert now.new and now.reading_changed is not None and now.fingerprint != old.fingerprint
    assert now.reading_changed.differing == now.reading_changed.compared == now.instances
    assert board()["alpha"]["benchmarks"]["pubmedqa"]["dataset_current"] is False
    table = cli("leaderboard", "--resamples", "0")
    assert "alpha on pubmedqa scored another version of its dataset than the one registered last" in table.stderr
