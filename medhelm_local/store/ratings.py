"""Clinician ratings collected by the web console: blinded 1-5 ratings of sampled responses on the jury's
criteria. Numbers and ids only; the rated text stays in the responses table."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel

from medhelm_local.store.store import Store, utcnow

TABLE = "clinician_ratings"


class ClinicianRating(BaseModel):
    run_id: str
    benchmark: str
    instance_id: str
    rater: str
    ratings: dict[str, int]
    rated_at: datetime


def has_table(store: Store) -> bool:
    """A store opened read-only is not migrated: the table exists only once something wrote a rating."""
    row = store.conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND table_name = ?",
        [TABLE]).fetchone()
    return bool(row and row[0])


def record_rating(store: Store, rating: ClinicianRating) -> bool:
    """Store one clinician's rating of one item; False (nothing written) if this clinician rated it already."""
    with store.transaction():
        exists = store.conn.execute(
            f"SELECT 1 FROM {TABLE} WHERE run_id = ? AND benchmark = ? AND instance_id = ? AND rater = ?",
            [rating.run_id, rating.benchmark, rating.instance_id, rating.rater]).fetchone()
        if exists:
            return False
        store.conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                           [rating.run_id, rating.benchmark, rating.instance_id, rating.rater,
                            json.dumps(rating.ratings, sort_keys=True), rating.rated_at or utcnow()])
    return True


def list_ratings(store: Store, run_id: str | None = None, benchmarks: Iterable[str] | None = None
                 ) -> list[ClinicianRating]:
    if not has_table(store):
        return []
    wanted = list(benchmarks) if benchmarks is not None else None
    rows = store.conn.execute(
        f"SELECT run_id, benchmark, instance_id, rater, ratings, rated_at FROM {TABLE} "
        "WHERE (? IS NULL OR run_id = ?) ORDER BY rated_at", [run_id, run_id]).fetchall()
    out = [ClinicianRating(run_id=r[0], benchmark=r[1], instance_id=r[2], rater=r[3],
                           ratings={str(k): int(v) for k, v in json.loads(r[4]).items()}, rated_at=r[5])
           for r in rows]
    return [r for r in out if wanted is None or r.benchmark in wanted]
