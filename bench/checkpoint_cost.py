"""What one commit round's checkpoint costs as the store grows (not a test; numbers for bench/README.md).

    .venv/bin/python bench/checkpoint_cost.py            # 20,000 rows already stored, rounds of 500

During a run the runner releases the store after each commit round (so read-only commands get in), and DuckDB
checkpoints the WAL into the file on release. This measures, on a plain DuckDB file (no encryption: the effect
is DuckDB's, encryption only adds to it), the checkpoint after appending a round of rows to a table shaped like
the store's ``requests`` (three key columns and the request's JSON, about 3 KB) that already holds ``--rows``
rows: with the table's PRIMARY KEY, as in store/schema_core.sql, and without it; and for a table of small rows
(like ``responses``: the answer, a few numbers) with its primary key.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb


def measure(path: Path, *, primary_key: bool, value_sql: str, rows: int, round_rows: int, rounds: int
            ) -> list[float]:
    conn = duckdb.connect(str(path))
    key = ", PRIMARY KEY (run_id, benchmark, instance_id)" if primary_key else ""
    conn.execute(f"CREATE TABLE t (run_id VARCHAR, benchmark VARCHAR, instance_id VARCHAR, value VARCHAR{key})")
    conn.execute(f"INSERT INTO t SELECT 'r0', 'b', i::VARCHAR, {value_sql} FROM range({rows}) r(i)")
    conn.execute("CHECKPOINT")
    out = []
    for k in range(1, rounds + 1):
        conn.execute(f"INSERT INTO t SELECT 'r{k}', 'b', i::VARCHAR, {value_sql} FROM range({round_rows}) r(i)")
        started = time.perf_counter()
        conn.execute("CHECKPOINT")
        out.append(time.perf_counter() - started)
    conn.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000, help="rows already in the table")
    parser.add_argument("--round", type=int, default=500, help="rows appended per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    large = "repeat(md5(i::VARCHAR || random()::VARCHAR), 100)"  # about 3.2 KB, like a request's JSON
    small = "'yes'"
    cases = [("3 KB rows, PRIMARY KEY (like requests)", True, large), ("3 KB rows, no key", False, large),
             ("small rows, PRIMARY KEY (like responses)", True, small)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, primary_key, value_sql) in enumerate(cases):
            times = measure(Path(tmp) / f"t{i}.duckdb", primary_key=primary_key, value_sql=value_sql,
                            rows=args.rows, round_rows=args.round, rounds=args.rounds)
            print(f"{label}: checkpoint after appending {args.round} rows to {args.rows:,}: "
                  + ", ".join(f"{t:.3f}s" for t in times))


if __name__ == "__main__":
    main()
