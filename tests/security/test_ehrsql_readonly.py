"""Issue 12 §1 (SQL a spec or a model supplies): EHRSQL's gold and candidate queries run read-only on the benchmark's
SQLite database. A candidate (model output) or gold query (spec/extract) that writes, attaches another file,
changes a pragma, loads an extension or chains statements is a failed query, the database's bytes are unchanged and
no file appears beside it; a db_path that is not an SQLite file (e.g. the store's key) is refused, never opened."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.records import Instance
from medhelm_local.scoring import ehrsql
from medhelm_local.scoring.ehrsql import GoldQueryFailed, QueryFailed, ehrsql_execution_accuracy, run_query
from medhelm_local.scoring.metrics import MetricInputError

GOLD = "select count(*) from patient"
ATTACKS = [
    "delete from patient",
    "update patient set age = '1'",
    "insert into patient (uniquepid) values ('x')",
    "drop table patient",
    "create table t (a)",
    "create temp table t (a)",
    "ATTACH DATABASE '{folder}/other.db' AS other",
    "vacuum into '{folder}/copy.db'",
    "pragma writable_schema = 1",
    "pragma journal_mode = wal",
    "select * from pragma_table_info('patient')",
    "select load_extension('{folder}/evil.so')",
    "select count(*) from patient; delete from patient",
    "begin immediate",
]


@pytest.fixture
def eicu(tmp_path: Path, public_data: Path) -> Path:
    folder = tmp_path / "ehrsql"
    folder.mkdir()
    target = folder / "eicu.sqlite"
    shutil.copyfile(public_data / "ehrsql" / "eicu.sqlite", target)
    ehrsql._connect.cache_clear()
    ehrsql._gold_result.cache_clear()
    return target


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _instance(db: Path, gold: str) -> Instance:
    return Instance(benchmark="ehrsql", id="1", fields={"question": "q"}, references=[gold],
                    meta={"db_path": str(db), "is_impossible": False})


@pytest.mark.parametrize("attack", ATTACKS)
def test_candidate_sql_cannot_change_or_escape_the_database(eicu: Path, attack: str) -> None:
    before, rows = _digest(eicu), run_query(str(eicu), GOLD)
    sql = attack.format(folder=eicu.parent)
    with pytest.raises(QueryFailed, match="sql_error"):
        run_query(str(eicu), sql)
    if ";" not in sql:  # the answer extractor keeps a reply's first statement only
        value, details = ehrsql_execution_accuracy(shipped_spec("ehrsql"), _instance(eicu, GOLD), f"```sql\n{sql}\n```")
        assert value == 0.0
        assert isinstance(details, ehrsql.EhrsqlDetails) and details.sql_error == "sql_error"
    assert _digest(eicu) == before
    assert sorted(p.name for p in eicu.parent.iterdir()) == ["eicu.sqlite"]
    assert run_query(str(eicu), GOLD) == rows


@pytest.mark.parametrize("attack", ATTACKS)
def test_gold_sql_cannot_change_or_escape_the_database(eicu: Path, attack: str) -> None:
    before = _digest(eicu)
    with pytest.raises(GoldQueryFailed):
        ehrsql_execution_accuracy(shipped_spec("ehrsql"), _instance(eicu, attack.format(folder=eicu.parent)),
                                  f"```sql\n{GOLD}\n```")
    assert _digest(eicu) == before
    assert sorted(p.name for p in eicu.parent.iterdir()) == ["eicu.sqlite"]


def test_a_read_only_query_still_runs(eicu: Path) -> None:
    (count,) = run_query(str(eicu), GOLD)
    assert count[0] > 0
    value, _ = ehrsql_execution_accuracy(shipped_spec("ehrsql"), _instance(eicu, GOLD), GOLD)
    assert value == 1.0


def test_a_db_path_that_is_not_sqlite_is_refused_before_opening(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "store-data.key"
    key.parent.mkdir()
    key.write_bytes(b"\x01" * 32)
    ehrsql._connect.cache_clear()
    with pytest.raises(MetricInputError, match="not an SQLite database"):
        run_query(str(key), GOLD)
    with pytest.raises((MetricInputError, QueryFailed)):
        run_query(str(tmp_path / "missing.sqlite"), GOLD)
