"""Lists and batches of rows bound as one JSON parameter and unpacked inside DuckDB.

DuckDB's Python client converts a list parameter item by item (about 0.15 ms per string); one JSON text is an
order of magnitude faster for pages of hundreds of ids (``ID_LIST_PARAM``). For bulk inserts (``ColumnBatch``)
it means one statement per batch, not one per row (row-wise inserts into the encrypted store cost milliseconds
each); column-wise JSON (``{"column": [values...]}``) is about as fast as registering an Arrow table, and keeps
pyarrow (about 25 MB resident beyond numpy) out of the runner's process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ID_LIST_PARAM = """(SELECT unnest(from_json(?, '["VARCHAR"]')))"""


def id_list(ids: Iterable[str]) -> str:
    """The JSON value of an ``ID_LIST_PARAM``."""
    return json.dumps(list(ids))


@dataclass(frozen=True)
class ColumnBatch:
    """The column names and DuckDB types of a batch; ``source`` is SQL that reads the batch bound to the named
    parameter ``$batch`` as rows (named, as DuckDB does not number ``?`` in text order in every statement)."""

    columns: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, **columns: str) -> ColumnBatch:
        return cls(tuple(columns.items()))

    @property
    def source(self) -> str:
        schema = json.dumps({name: [sql_type] for name, sql_type in self.columns})
        # Several unnests in one SELECT advance together: row i takes item i of every column.
        select = ", ".join(f'unnest(batch."{name}") AS "{name}"' for name, _ in self.columns)
        return f"(SELECT {select} FROM (SELECT from_json($batch, '{schema}') AS batch))"

    def bind(self, **values: Sequence[Any]) -> str:
        """The JSON value of ``$batch``: one sequence per column, all the same length."""
        names = [name for name, _ in self.columns]
        if sorted(values) != sorted(names):
            raise ValueError(f"batch columns are {names}, got {sorted(values)}")
        lengths = {len(column) for column in values.values()}
        if len(lengths) > 1:
            raise ValueError("batch columns differ in length")
        # NaN would make the JSON invalid, and DuckDB quotes invalid input in its error: refuse it here instead.
        return json.dumps({name: list(values[name]) for name in names}, default=_encode, allow_nan=False)


def _encode(value: Any) -> str:
    # Timestamps are naive UTC (the store's convention); ISO text casts back to TIMESTAMP exactly.
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    raise TypeError(f"a batch holds no {type(value).__name__} values")
