"""The pipeline end to end through the CLI, against a real (fake) OpenAI-compatible server:
register -> run -> score -> leaderboard -> audit, with the store encrypted and logs free of patient text."""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.testing.fake_openai import FakeOpenAIServer, Faults
from tests.conftest import Cli

NOTE_MARKER = "Zebulon-Quartzfeather"  # an invented surname that must never leave the store


def write_extract(path: Path, n: int = 24) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prompt", "context", "label"])
        for i in range(n):
            label = "A" if i % 3 == 0 else "B"
            writer.writerow([
                "Should this patient be referred to hospice? A. Yes B. No",
                f"Patient {NOTE_MARKER}-{i:03d} seen in clinic. Case code {label}{i}.",
                label,
            ])
    return path


def oracle(public_data: Path) -> dict[str, str]:
    """Question text -> gold answer, so the fake model answers PubMedQA perfectly."""
    data = json.loads((public_data / "pubmedqa" / "ori_pqal.json").read_text())
    return {item["QUESTION"].strip(): item["final_decision"] for item in data.values()}


def make_responder(answers: dict[str, str]) -> Any:
    def respond(messages: list[dict[str, Any]]) -> str:
        content = messages[-1]["content"]
        if "Case code A" in content:
            return "The answer is (A)."
        if "Case code B" in content:
            return "B"
        for question, answer in answers.items():
            if question in content:
                return answer.capitalize() + "."
        return "unsure"

    return respond


@pytest.fixture
def oracle_server(public_data: Path) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=make_responder(oracle(public_data))) as server:
        yield server


def _add_model(cli: Cli, name: str, url: str) -> None:
    result = cli("models", "add", name, "--base-url", url)
    assert result.code == 0, result.stderr


def test_register_run_leaderboard(home_cli: Cli, public_data: Path, tmp_path: Path,
                                  oracle_server: FakeOpenAIServer) -> None:
    pubmedqa_file = public_data / "pubmedqa" / "ori_pqal.json"
    registered = home_cli("datasets", "register", "pubmedqa", str(pubmedqa_file), "--json")
    assert registered.code == 0, registered.stderr
    payload = registered.json()
    assert isinstance(payload, dict)
    assert payload["instances"] == 1000
    assert payload["source_sha256"] == hashlib.sha256(pubmedqa_file.read_bytes()).hexdigest()
    # The same keys mean the same thing in `datasets list` (a script matches registrations by them).
    listed = home_cli("datasets", "list", "--json").json()
    assert isinstance(listed, list)
    assert [(d["fingerprint"], d["source_sha256"]) for d in listed] == [(payload["fingerprint"],
                                                                       payload["source_sha256"])]

    extract = write_extract(tmp_path / "extract.csv")
    registered = home_cli("datasets", "register", "hospice_referral", str(extract), "--json")
    assert registered.code == 0, registered.stderr

    _add_model(home_cli, "oracle", oracle_server.base_url)
    run = home_cli("run", "--model", "oracle", "--benchmarks", "pubmedqa,hospice_referral",
                   "--max-instances", "30", "--json")
    assert run.code == 0, run.stderr
    results = {r["benchmark"]: r for r in run.json()["results"]}
    assert results["pubmedqa"]["score"] == 1.0 and results["pubmedqa"]["n"] == 30
    assert results["hospice_referral"]["score"] == 1.0 and results["hospice_referral"]["n"] == 24
    assert oracle_server.completions_sent == 54

    board = home_cli("leaderboard", "--json")
    assert board.code == 0, board.stderr
    rows = board.json()
    assert isinstance(rows, list)
    assert rows[0]["model"] == "oracle"
    assert set(rows[0]["benchmarks"]) >= {"pubmedqa", "hospice_referral"}

    # The encrypted store holds the note text, but its bytes do not.
    store_files = list((home_cli.home / "store").iterdir())
    assert store_files
    for file in store_files:
        data = file.read_bytes()
        assert NOTE_MARKER.encode() not in data
        assert b"Should this patient be referred" not in data
        assert b"programmed cell death" not in data.lower()

    # Audit records name ids and hashes, never text.
    audit = (home_cli.home / "audit" / "audit.jsonl").read_text()
    actions = [json.loads(line)["action"] for line in audit.splitlines()]
    assert {"dataset.register", "run.start", "run.finish"} <= set(actions)
    assert NOTE_MARKER not in audit
    # Nothing the commands printed or logged carries the extract's text.
    for output in (registered.stderr, run.stderr, run.stdout, board.stdout, board.stderr):
        assert NOTE_MARKER not in output


def test_failed_requests_are_recorded_not_scored(home_cli: Cli, tmp_path: Path) -> None:
    extract = write_extract(tmp_path / "extract.csv", n=12)
    assert home_cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    with FakeOpenAIServer(faults=Faults(http_5xx=1.0)) as server:
        _add_model(home_cli, "broken", server.base_url)
        config = home_cli.home / "appliance.yaml"
        config.write_text(config.read_text().replace("max_retries: 4", "max_retries: 1"))
        run = home_cli("run", "--model", "broken", "--benchmarks", "hospice_referral", "--json")
    # Recorded and reported (the JSON still comes out), but a run that got no answer at all is no success.
    assert run.code == 1 and "every one of the 12 request(s) sent failed" in run.stderr, run.stderr
    (result,) = run.json()["results"]
    assert result["score"] is None
    assert result["n"] == 0
    assert result["n_failed"] == 12
    # and so the trail says: it recorded "success" for it, and the compliance report read "outcome success"
    report = home_cli("audit", "report")
    assert f"({run.json()['run_id']}), outcome failure (scored 0, failed 12)" in report.stdout, report.stdout


def test_a_wrong_reply_model_is_named_as_the_cause_of_the_mismatches(home_cli: Cli, tmp_path: Path) -> None:
    """The model was added with a reply_model its server never replies with (it names the model asked for): every
    answer is a model_mismatch. The hint said the server's reply "named another model than the one asked for" (it
    had not) and told the analyst to set reply_model, the setting at fault; it now names reply_model as what the
    replies were checked against, and says to correct or remove it."""
    extract = write_extract(tmp_path / "extract.csv", n=4)
    assert home_cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    with FakeOpenAIServer() as server:
        added = home_cli("models", "add", "local", "--base-url", server.base_url, "--reply-model", "local-v2")
        assert added.code == 0, added.stderr
        run = home_cli("run", "--model", "local", "--benchmarks", "hospice_referral")
    assert run.code == 1, run.stderr
    hint = " ".join(run.stderr.split())
    assert "model_mismatch" in hint and "than the one asked for" not in hint, hint
    assert "reply_model ('local-v2', set on model 'local' in appliance.yaml)" in hint, hint
    assert "correct reply_model, or remove it" in hint, hint


def test_bad_extract_registers_nothing(home_cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt,context,answer\nq,c,A\n")
    result = home_cli("datasets", "register", "hospice_referral", str(bad))
    assert result.code == 2
    assert "bad.csv" in result.stderr and "'label'" in result.stderr
    bad.write_text("prompt,context,label\nq,c,A\nq,c,Z\n")
    result = home_cli("datasets", "register", "hospice_referral", str(bad))
    assert result.code == 2
    assert "row 3 (the 2nd data row)" in result.stderr and "'label'" in result.stderr
    listing = home_cli("datasets", "list", "--json")
    assert listing.code == 0
    assert listing.json() == []


def test_endpoint_outside_allowlist_is_refused(home_cli: Cli) -> None:
    result = home_cli("models", "add", "outside", "--base-url", "https://api.example.com/v1")
    assert result.code == 2
    assert "not on the allowlist" in result.stderr
    assert "outside" not in home_cli("models", "list").stdout


@pytest.mark.parametrize(("args", "message"), [
    (["sp ace", "--base-url", "http://127.0.0.1:9/v1"],
     "models add: NAME: expected 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"),
    (["local", "--base-url", "127.0.0.1:8000"], "models add: --base-url: '127.0.0.1:8000' is not an http(s) URL"),
    (["served", "--kind", "vllm"], "models add: base_urls: a model of kind vllm needs at least one base URL "
                                       "(`models add --base-url URL`)"),
])
def test_a_bad_model_endpoint_names_the_option(home_cli: Cli, args: list[str], message: str) -> None:
    result = home_cli("models", "add", *args)
    assert result.code == 2 and message in result.stderr, result.stderr
    assert "pydantic" not in result.stderr and "input_value" not in result.stderr


def test_jury_benchmark_without_judges_is_refused_before_inference(home_cli: Cli, tmp_path: Path) -> None:
    notes = tmp_path / "bhc.jsonl"
    notes.write_text("".join(json.dumps({"input": f"Discharge note {i}.", "target": f"Course {i}."}) + "\n"
                             for i in range(3)))
    assert home_cli("datasets", "register", "mimic_bhc", str(notes)).code == 0
    with FakeOpenAIServer(responder=lambda _m: "A summary.") as server:
        _add_model(home_cli, "writer", server.base_url)
        run = home_cli("run", "--model", "writer", "--benchmarks", "mimic_bhc")
        sent = server.requests_seen
    assert run.code == 2
    assert "judges" in run.stderr
    assert sent == 0


def test_models_add_says_whether_the_model_is_a_judge(home_cli: Cli) -> None:
    added = home_cli("models", "add", "grader", "--base-url", "http://127.0.0.1:9/v1", "--judge", "--json")
    assert added.code == 0, added.stderr
    assert added.json()["judge"] is True  # was absent: nothing said the model had joined the jury
    plain = home_cli("models", "add", "candidate", "--base-url", "http://127.0.0.1:9/v1")
    assert plain.code == 0 and "a jury member" not in plain.stdout + plain.stderr
    listed = {m["name"]: m["judge"] for m in home_cli("models", "list", "--json").json()}
    assert listed["grader"] is True and listed["candidate"] is False


def test_a_runs_failures_say_what_each_category_means_and_what_to_do(home_cli: Cli, tmp_path: Path) -> None:
    """A model whose server is down: the run printed "recorded failures (connect_error: 12)" and a retry command, with
    nothing saying what connect_error means or that retrying before the server is back would fail the same way. Each
    category now comes with the same fixed hint `jury failures` gives a judge's, worded for the model's server."""
    extract = write_extract(tmp_path / "extract.csv", n=12)
    assert home_cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    _add_model(home_cli, "down", "http://127.0.0.1:9/v1")
    run = home_cli("run", "--model", "down", "--benchmarks", "hospice_referral", "--max-retries", "0")
    assert run.code == 1, run.stderr
    assert "hospice_referral: recorded failures (connect_error: 12)" in run.stderr
    assert ("connect_error: the model's server could not be reached: is it running, and is its base URL right?"
            in run.stderr)


def test_a_run_on_the_default_context_length_says_so_in_plain_words(home_cli: Cli, tmp_path: Path) -> None:
    """Neither appliance.yaml nor the server gives the model's context length: prompts are fitted to the default
    2,048 tokens, and longer ones cut. A person at the terminal saw only a log line,
    "warning run.context_length_default context_length=2048 model=down setting=context_length". The run's summary
    now says what it means and what to set."""
    extract = write_extract(tmp_path / "extract.csv", n=12)
    assert home_cli("datasets", "register", "hospice_referral", str(extract)).code == 0
    _add_model(home_cli, "down", "http://127.0.0.1:9/v1")
    run = home_cli("run", "--model", "down", "--benchmarks", "hospice_referral", "--max-retries", "0")
    assert ("down: its context length is not set in appliance.yaml and its server does not report it, so prompts "
            "were fitted to 2048 tokens (a longer one is cut); set context_length on the model") in run.stderr
