"""Names a user chooses that the audit trail records as written (a custom benchmark's id, a ``--run-id``): like the
actor, they may hold no date, PHI pattern or encoded text. The refusal (exit 2) never quotes the name, and nothing
is recorded or stored."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from medhelm_local.testing.fake_openai import FakeOpenAIServer
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


@pytest.fixture
def registered_with_model(home_cli: Cli) -> Iterator[tuple[Cli, FakeOpenAIServer]]:
    data, spec = SAMPLES / "followup_needed.csv", SAMPLES / "followup_needed.yaml"
    assert home_cli("datasets", "register", "followup_needed", str(data), "--spec", str(spec)).code == 0
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        assert home_cli("models", "add", "always-a", "--base-url", server.base_url).code == 0
        yield home_cli, server


@pytest.mark.parametrize("run_id", ["okafor-margaret-7730019942", "quillonby-1960-03-04", "ada.19600304",
                                    "run-4f6b61666f72204d617267617265"])
def test_a_new_run_under_a_run_id_holding_phi_is_refused_before_anything_is_sent_or_recorded(
        registered_with_model: tuple[Cli, FakeOpenAIServer], run_id: str) -> None:
    cli, server = registered_with_model
    before = _trail(cli)
    refused = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", run_id, "--json")
    assert refused.code == 2, refused.stderr
    assert "--run-id" in refused.stderr and "a run id is recorded in the audit trail" in refused.stderr
    assert run_id not in refused.stderr + refused.stdout
    assert _trail(cli) == before
    assert server.completions_sent == 0
    assert cli("runs", "list", "--json").json() == []


def test_a_run_id_in_words_and_the_runners_own_ids_are_accepted(
        registered_with_model: tuple[Cli, FakeOpenAIServer]) -> None:
    cli, _ = registered_with_model
    named = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", "q3-discharge-review",
                "--json")
    assert named.code == 0, named.stderr
    generated = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--new-run", "--json")
    assert generated.code == 0, generated.stderr
    runs = {run["run_id"] for run in cli("runs", "list", "--json").json()}
    assert "q3-discharge-review" in runs and len(runs) == 2
    # A generated id given back (as a shard or a resume would) names the run it is, the date in it the runner's.
    generated_id = next(r for r in runs if r != "q3-discharge-review")
    again = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", generated_id, "--json")
    assert again.code == 0, again.stderr


@pytest.mark.parametrize("run_id", ["llama-3.1-8b-baseline", "qwen2.5-72b-instruct", "medgemma-1.5-4b-q3",
                                    "vllm-0.6.3-baseline", "medgemma-v1.0.1-eval"])
def test_a_run_id_naming_a_models_version_is_accepted(
        registered_with_model: tuple[Cli, FakeOpenAIServer], run_id: str) -> None:
    """A model's version and size (3.1-8b), or a release's version (0.6.3), were read as a date, and the run was
    refused: a date writes one separator twice, its year first (1960.03.04) or last in 2 or 4 digits (4.3.60)."""
    cli, _ = registered_with_model
    named = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", run_id, "--json")
    assert named.code == 0, named.stderr
    assert run_id in _trail(cli)


def test_a_cronjobs_job_name_names_a_sharded_run_though_its_minute_has_a_record_numbers_shape(
        registered_with_model: tuple[Cli, FakeOpenAIServer]) -> None:
    """The chart's sharded runner runs under its Job's name, `<cronjob>-<scheduled minute since the epoch>`: eight
    digits, accepted where they are a minute of the past weeks (a number nobody chooses), not otherwise."""
    cli, _ = registered_with_model
    minute = int(time.time() // 60) - 3
    job_name = f"medhelm-runner-{minute}"
    shard = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", job_name,
                "--shard", "0/2", "--json")
    assert shard.code == 0, shard.stderr
    assert job_name in _trail(cli)
    chosen = f"medhelm-runner-{minute - 90 * 24 * 60}"  # not a minute a CronJob scheduled lately
    refused = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", chosen, "--shard",
                  "0/2", "--json")
    assert refused.code == 2 and "record number" in refused.stderr, refused.stderr


def test_a_job_named_as_the_runbook_names_it_names_a_sharded_run(
        registered_with_model: tuple[Cli, FakeOpenAIServer]) -> None:
    """The chart's NOTES, its README and the RUNBOOK start a run as `kubectl create job --from=cronjob/...
    run-$(date +%Y%m%d-%H%M)`, and a sharded runner's pods run under their Job's name: every pod was refused (exit
    2) for the date in it. The moment the Job was created passes, as a CronJob's minute does; another date not."""
    cli, _ = registered_with_model
    job_name = f"run-{datetime.now() - timedelta(minutes=2):%Y%m%d-%H%M}"
    shard = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", job_name,
                "--shard", "0/2", "--json")
    assert shard.code == 0, shard.stderr
    assert job_name in _trail(cli)
    for chosen in (f"run-{datetime.now() - timedelta(days=90):%Y%m%d-%H%M}", "quillonby-19600304-0000"):
        refused = cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", chosen,
                      "--shard", "0/2", "--json")
        assert refused.code == 2 and "it holds a date" in refused.stderr, refused.stderr

def test_an_extract_file_named_for_a_patient_is_registered_with_its_name_withheld_from_the_trail(
        home_cli: Cli, tmp_path: Path) -> None:
    """The extract's file name was recorded as written in dataset.register, `audit report` and its PDF. Where it
    reads as patient data it is withheld there, saying why (the source sha256 still identifies the file)."""
    named = tmp_path / "Okafor_Margaret_MRN7730019942_1960-03-04.csv"
    named.write_bytes((SAMPLES / "followup_needed.csv").read_bytes())
    spec = SAMPLES / "followup_needed.yaml"
    registered = home_cli("datasets", "register", "followup_needed", str(named), "--spec", str(spec))
    assert registered.code == 0, registered.stderr
    report = home_cli("audit", "report")
    assert report.code == 0, report.stderr
    for text in (_trail(home_cli), report.stdout):
        assert "Okafor" not in text and "7730019942" not in text and "1960-03-04" not in text
        assert "[withheld:date]" in text
    refused_spec = tmp_path / "Okafor_Margaret_7730019942.yaml"
    refused_spec.write_text("id: [not, a, name]\n")
    assert home_cli("benchmarks", "add", str(refused_spec)).code == 2
    trail = _trail(home_cli)
    assert "Okafor" not in trail and "[withheld:phi_pattern]" in trail

    plain = tmp_path / "followup_extract.csv"
    plain.write_bytes(named.read_bytes())
    assert home_cli("datasets", "register", "followup_needed", str(plain)).code == 0
    assert "followup_extract.csv" in _trail(home_cli)


def test_an_export_request_naming_runs_that_do_not_exist_is_refused_before_anything_is_recorded(
        registered_with_model: tuple[Cli, FakeOpenAIServer], tmp_path: Path) -> None:
    """`export request --runs okafor-margaret-7730019942,ada.1960.03.04` with a key the policy does not list was
    recorded (`export.request` refused, not_a_requester) with the run ids as typed, and `audit report` printed them:
    any user could write any text of a run id's shape into the trail. Run ids that name no run are refused first."""
    cli, _ = registered_with_model
    assert cli("run", "--model", "always-a", "--benchmarks", "followup_needed", "--run-id", "q3-discharge-review",
               "--json").code == 0
    key = tmp_path / "someone"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    before = _trail(cli)
    typed = "q3-discharge-review,okafor-margaret-7730019942,ada.1960.03.04"
    refused = cli("export", "request", "--runs", typed, "--key", str(key))
    assert refused.code == 2 and "2 of the 3 run id(s) name no run" in refused.stderr, refused.stderr
    assert "7730019942" not in refused.stderr and "1960" not in refused.stderr
    assert _trail(cli) == before
    assert "7730019942" not in cli("audit", "report").stdout

    known = cli("export", "request", "--runs", "q3-discharge-review", "--key", str(key))
    assert known.code == 2 and "not listed under approval.requesters" in known.stderr
    assert "export.request" in _trail(cli).removeprefix(before)  # the refusal of a real run is still recorded


# Names people give runs and models, with model versions in them: none holds a date.
VERSIONED = ["llama-3.1-8b-eval", "qwen2.5-7b-instruct", "run-v1.2.3", "llama3.1-70b-q4_k_m", "qwen2.5-72b-q3",
             "phi-3.5-mini-baseline"]
# Dates as an insider would slip them in, separators mixed included.
DATED = ["ada-1960-03.04", "ada-04.03.1960", "ada-04.03.60", "ada-4-3-60", "ada.1960.3.4", "ada_19600304"]


def test_a_model_version_in_a_name_is_no_date_and_a_date_still_is() -> None:
    """``run --run-id llama-3.1-8b-eval`` was refused as holding a date (`3.1-8`), as were qwen2.5-7b and v1.2.3:
    the date shape took any three digit groups. A year first or last, or day and month with one separator twice,
    is a date; a version is not."""
    from medhelm_local.actors import actor_problem
    from medhelm_local.phi_text import chosen_name_problem

    assert [n for n in VERSIONED if chosen_name_problem(n) or actor_problem(n)] == []
    assert [n for n in DATED if chosen_name_problem(n) != "date" or actor_problem(n) != "date"] == []
