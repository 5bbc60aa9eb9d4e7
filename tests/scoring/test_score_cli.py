"""``score BENCHMARK --predictions FILE``: predictions made elsewhere, scored against the registered dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.commands.score import PredictionsError, read_predictions
from tests.conftest import Cli, cli_env

SECRET = "Ambrose-Fenwhistle"  # invented patient text in an output: must never appear in errors


@pytest.fixture(scope="module")
def pubmedqa_cli(tmp_path_factory: pytest.TempPathFactory, public_data: Path) -> Cli:
    """One home with PubMedQA registered, shared by the module (scoring predictions does not change it)."""
    cli = Cli(home=tmp_path_factory.mktemp("score") / "home", env=cli_env())
    result = cli("init")
    assert result.code == 0, result.stderr
    result = cli("datasets", "register", "pubmedqa", str(public_data / "pubmedqa" / "ori_pqal.json"))
    assert result.code == 0, result.stderr
    return cli


def gold(public_data: Path) -> dict[str, str]:
    data = json.loads((public_data / "pubmedqa" / "ori_pqal.json").read_text())
    return {pmid: item["final_decision"] for pmid, item in data.items()}


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_score_predictions_json(pubmedqa_cli: Cli, public_data: Path, tmp_path: Path) -> None:
    answers = list(gold(public_data).items())[:40]
    lines: list[object] = []
    for i, (pmid, label) in enumerate(answers):
        if i < 20:
            lines.append({"id": pmid, "output": label})  # strict and right
        elif i < 30:
            lines.append({"id": int(pmid), "output": f"<think>{SECRET}</think>The answer is {label}."})
        elif i < 35:
            lines.append({"id": pmid, "output": "no" if label != "no" else "yes"})  # wrong
        else:
            lines.append({"id": pmid, "output": None})  # failed elsewhere: excluded, counted
    lines.insert(5, "")  # blank lines are allowed
    result = pubmedqa_cli("score", "pubmedqa", "--predictions", str(write(tmp_path / "p.jsonl", lines)), "--json")
    assert result.code == 0, result.stderr
    payload = result.json()
    assert isinstance(payload, dict)
    assert payload["benchmark"] == "pubmedqa" and payload["metric"] == "exact_match"
    assert payload["score"] == pytest.approx(30 / 35)
    assert payload["n"] == 35 and payload["n_failed"] == 5
    assert payload["dataset_instances"] == 1000 and payload["n_predictions"] == 40
    breakdown = payload["breakdown"]
    assert breakdown["strict_format_rate"] == pytest.approx(25 / 35)
    assert breakdown["parse_rate"] == 1.0
    assert breakdown["failures"] == {"no_output": 5}
    assert SECRET not in result.stdout + result.stderr

    plain = pubmedqa_cli("score", "pubmedqa", "--predictions", str(tmp_path / "p.jsonl"))
    assert plain.code == 0 and "exact_match" in plain.stdout
    # the table's n (35 scored, 5 failed) never said that 960 of the dataset's instances had no prediction at all
    assert ("40 of the dataset's 1000 instances have a prediction in p.jsonl; the other 960 are not scored, so this "
            "is a score on part of pubmedqa") in plain.stderr


@pytest.mark.parametrize(("lines", "message"), [
    ([{"id": "1", "output": "yes"}, f'{{"id": "2", "output": "{SECRET}"'], "line 2"),
    ([{"id": "1", "output": "yes"}, ["not", "an", "object"]], "line 2"),
    ([{"output": "yes"}], "line 1, key 'id'"),
    ([{"id": "1"}], "line 1, key 'output'"),
    ([{"id": "1", "output": 3}], "line 1, key 'output'"),
    ([{"id": "21645374", "output": "yes"}, {"id": "21645374", "output": "no"}], "line 2"),
    ([], "at least one prediction"),
])
def test_bad_lines_name_the_line(tmp_path: Path, lines: list[object], message: str) -> None:
    with pytest.raises(PredictionsError) as caught:
        read_predictions(write(tmp_path / "bad.jsonl", lines))
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)
    assert caught.value.exit_code == 2


def test_bad_line_exits_2(pubmedqa_cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [{"id": "21645374", "output": "yes"}, f'{{"id": "2", "output": "{SECRET}"'])
    result = pubmedqa_cli("score", "pubmedqa", "--predictions", str(path), "--json")
    assert result.code == 2
    assert "line 2" in result.stderr and result.stdout == ""
    assert SECRET not in result.stderr


def test_unknown_ids_exit_2(pubmedqa_cli: Cli, tmp_path: Path, public_data: Path) -> None:
    known = next(iter(gold(public_data)))
    path = write(tmp_path / "p.jsonl", [{"id": known, "output": "yes"}, {"id": "no-such-id", "output": "yes"}])
    result = pubmedqa_cli("score", "pubmedqa", "--predictions", str(path), "--json")
    assert result.code == 2
    assert "line(s) 2" in result.stderr and "no-such-id" not in result.stderr
    assert result.stdout == ""


def test_unregistered_benchmark_and_missing_file(pubmedqa_cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path / "p.jsonl", [{"id": "1", "output": "A"}])
    result = pubmedqa_cli("score", "medqa", "--predictions", str(path))
    assert result.code == 2 and "no dataset is registered for medqa" in result.stderr
    result = pubmedqa_cli("score", "medqa", "--predictions", str(tmp_path / "absent.jsonl"))
    assert result.code == 2 and "no such file" in result.stderr
    result = pubmedqa_cli("score", "nonsense", "--predictions", str(path))
    assert result.code == 2
