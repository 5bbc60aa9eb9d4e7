"""Issue 12 §2 (paths a spec names) for EHRSQL-style benchmarks: the SQLite database the gold and candidate SQL
run on is a file inside the extract's folder, named by sibling_files. Before the issue a spec could set
meta_constants db_path (or map db_path from an extract column) to any SQLite file the appliance can read, and a
crafted gold query then leaked it a bit per instance through the scores; now registration refuses it (exit 2)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Cli


@pytest.fixture
def folders(tmp_path: Path, public_data: Path) -> dict[str, Path]:
    other = tmp_path / "elsewhere" / "other_department.sqlite"
    other.parent.mkdir()
    con = sqlite3.connect(other)
    con.execute("create table secrets (mrn text)")
    con.execute("insert into secrets values ('7730019942')")
    con.commit()
    con.close()
    extract = tmp_path / "extract"
    extract.mkdir()
    shutil.copyfile(public_data / "ehrsql" / "eicu.sqlite", extract / "eicu.sqlite")
    rows = [{"id": "q1", "question": "How many?", "query": "select count(*) from secrets where mrn like '7%'",
             "db": str(other)}]
    (extract / "questions.json").write_text(json.dumps(rows), encoding="utf-8")
    return {"other": other, "extract": extract, "tmp": tmp_path}


def _spec(folders: dict[str, Path], options: dict[str, Any]) -> Path:
    spec = {
        "id": "sql_probe",
        "name": "SQL probe",
        "description": "Text-to-SQL over a database beside the extract.",
        "subcategory": "Analyzing Research Data",
        "input_format": "private_table",
        "loader_options": {"format": "json", "glob": "questions.json", "id_column": "id",
                           "fields": {"question": "question"}, "reference_columns": ["query"], **options},
        "output_type": "sql",
        "metric": "ehrsql_execution_accuracy",
        "max_tokens": 64,
        "prompt": {"template": "{question}\nSQL:"},
        "source": "test",
        "license": "synthetic",
    }
    path = folders["tmp"] / "sql_probe.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def _register(cli: Cli, folders: dict[str, Path], options: dict[str, Any]) -> Any:
    return cli("datasets", "register", "sql_probe", str(folders["extract"]), "--spec",
               str(_spec(folders, options)))


def test_meta_constants_db_path_outside_the_extract_is_refused(home_cli: Cli, folders: dict[str, Path]) -> None:
    result = _register(home_cli, folders, {"meta_constants": {"db_path": str(folders["other"])}})
    assert result.code == 2, result.stderr
    assert "db_path" in result.stderr and "sibling_files" in result.stderr


def test_db_path_from_an_extract_column_is_refused(home_cli: Cli, folders: dict[str, Path]) -> None:
    result = _register(home_cli, folders, {"meta": {"db_path": "db"}})
    assert result.code == 2, result.stderr
    assert "db_path" in result.stderr
    assert str(folders["other"]) not in result.stderr  # an extract value, never echoed


def test_db_path_named_by_sibling_files_registers(home_cli: Cli, folders: dict[str, Path]) -> None:
    result = _register(home_cli, folders, {"sibling_files": {"db_path": "*.sqlite"}})
    assert result.code == 0, result.stderr
