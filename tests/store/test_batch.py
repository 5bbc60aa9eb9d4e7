"""ColumnBatch: a batch bound as one JSON parameter reads back exactly as the rows that went in."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from medhelm_local.store.batch import ColumnBatch

ROWS = ColumnBatch.of(name="VARCHAR", n="INTEGER", x="DOUBLE", at="TIMESTAMP")

AWKWARD_TEXT = [
    "plain",
    "quotes ' \" and backslashes \\ \\n",
    "line\nbreaks\r\nand\ttabs",
    "unicode: é ß 中文 🩺 \u2028",
    "",
    None,
    "json-looking {\"a\": [1, 2]}",
    "nul \x00 inside",
]


def read_back(batch: ColumnBatch, values: dict[str, list[object]]) -> list[tuple[object, ...]]:
    conn = duckdb.connect()
    return conn.execute(f"SELECT * FROM {batch.source}", {"batch": batch.bind(**values)}).fetchall()


def test_values_round_trip_exactly_and_in_order() -> None:
    n = len(AWKWARD_TEXT)
    values: dict[str, list[object]] = {
        "name": list(AWKWARD_TEXT),
        "n": [None if i == 3 else i * 7919 - 2**30 for i in range(n)],
        "x": [0.1 * i + 1e-12 for i in range(n)],
        "at": [datetime(2026, 11, 22, 6, 0, i, 123456 + i) for i in range(n)],
    }
    rows = read_back(ROWS, values)
    assert rows == list(zip(*values.values(), strict=True))


def test_an_empty_batch_is_no_rows() -> None:
    assert read_back(ROWS, {"name": [], "n": [], "x": [], "at": []}) == []


def test_other_parameters_sit_beside_the_batch() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t (run VARCHAR, name VARCHAR)")
    one = ColumnBatch.of(name="VARCHAR")
    conn.execute(f"INSERT INTO t SELECT $run, name FROM {one.source}",
                 {"run": "r1", "batch": one.bind(name=["a", "b"])})
    assert conn.execute("SELECT * FROM t ORDER BY name").fetchall() == [("r1", "a"), ("r1", "b")]


def test_wrong_columns_or_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="batch columns"):
        ROWS.bind(name=["a"], n=[1], x=[1.0])
    with pytest.raises(ValueError, match="differ in length"):
        ROWS.bind(name=["a"], n=[1, 2], x=[1.0], at=[datetime(2026, 1, 1)])
    with pytest.raises(ValueError, match="not JSON compliant") as refused:
        ROWS.bind(name=["secret text"], n=[1], x=[float("nan")], at=[datetime(2026, 1, 1)])
    assert "secret" not in str(refused.value)
    with pytest.raises(TypeError, match="no bytes values"):
        ROWS.bind(name=[b"raw"], n=[1], x=[1.0], at=[datetime(2026, 1, 1)])
