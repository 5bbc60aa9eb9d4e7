"""`benchmarks list/show/add/remove` on their own typer app (the root CLI wires it as `benchmarks`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medhelm_local.commands import benchmarks as benchmarks_cmd

SAMPLES = Path(__file__).resolve().parents[2] / "medhelm_local" / "data" / "samples"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "home"
    monkeypatch.setenv("MEDHELM_HOME", str(root))
    return root


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(benchmarks_cmd.app, list(args))
    return result.exit_code, result.output


def test_list_json_has_all_37_with_the_required_keys(home: Path) -> None:
    code, output = _run("list", "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert len(rows) == 37
    for row in rows:
        assert {"id", "name", "category", "subcategory", "access", "output_type", "metric"} <= set(row)
    by_id = {r["id"]: r for r in rows}
    assert by_id["medqa"]["category"] == by_id["medmcqa"]["category"] == "Clinical Decision Support"


def test_list_filters_and_plain_table(home: Path) -> None:
    code, output = _run("list", "--json", "--access", "gated")
    assert code == 0 and len(json.loads(output)) == 7
    code, output = _run("list")
    assert code == 0
    assert output.splitlines()[1].split("\t") == ["id", "name", "category", "subcategory", "access", "output",
                                                  "metric", "medhelm parity"]
    assert len(output.splitlines()) == 2 + 37


def test_show_json(home: Path) -> None:
    code, output = _run("show", "ehrsql", "--json")
    assert code == 0
    data = json.loads(output)
    assert data["metric"] == "ehrsql_execution_accuracy" and data["input_format"] == "table"
    code, output = _run("show", "aci_bench")
    assert code == 0 and "judge:" in output


def test_show_unknown_fails(home: Path) -> None:
    result = CliRunner().invoke(benchmarks_cmd.app, ["show", "nope"])
    assert result.exit_code != 0


def test_add_then_list_and_show(home: Path) -> None:
    from medhelm_local.home import Home

    Home(home).init()
    code, output = _run("add", str(SAMPLES / "followup_needed.yaml"), "--json")
    assert code == 0, output
    assert json.loads(output)["id"] == "followup_needed"
    code, output = _run("list", "--json")
    rows = json.loads(output)
    assert len(rows) == 38 and rows[-1]["custom"] is True
    code, output = _run("show", "followup_needed", "--json")
    assert code == 0 and json.loads(output)["subcategory"] == "Care Coordination and Planning"
    code, output = _run("remove", "followup_needed")
    assert code == 0
    assert len(json.loads(_run("list", "--json")[1])) == 37
