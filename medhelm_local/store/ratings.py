"""Clinician ratings collected by the web console: blinded 1-5 ratings of sampled responses on the jury's
criteria. Numbers and ids only; the rated text stays in the responses table."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from medhelm_local.store.store import Store, utcnow

TABLE = "clinician_ratings"

RatingOutcome = Literal["saved", "duplicate", "full"]


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


def record_rating(store: Store, rating: ClinicianRating, raters_per_item: int) -> RatingOutcome:
    """Store one clinician's rating of one item, unless this clinician rated it already (``duplicate``) or
    ``raters_per_item`` others did (``full``: two clinicians sent the last rating an item needed at once). Checked
    and written in one transaction, so an item never gets more ratings than it asks for."""
    key = [rating.run_id, rating.benchmark, rating.instance_id]
    with store.transaction():
        raters = {r[0] for r in store.conn.execute(
            f"SELECT rater FROM {TABLE} WHERE run_id = ? AND benchmark = ? AND instance_id = ?", key).fetchall()}
        if rating.rater in raters:
            return "duplicate"
        if len(raters) >= raters_per_item:
            return "full"
        store.conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                           [*key, rating.rater, json.dumps(rating.ratings, sort_keys=True),
                            rating.rated_at or utcnow()])
    return "saved"


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
