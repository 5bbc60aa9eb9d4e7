"""The store's side of sharded runs (``runner.shard``): what a shard copies out of the main store into its own
file, what it merges back, and what the main store still lacks. All SQL of sharding is here.

Rows move between two encrypted stores opened by this process as Arrow batches (``runs.copy_rows``), never
through a plain file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from medhelm_local.store import runs as runs_db
from medhelm_local.store.batch import ID_LIST_PARAM, id_list
from medhelm_local.store.runs import PlannedItem
from medhelm_local.store.store import Store

_IDS_PER_COPY = 20_000
OUTCOME_TABLES = ("requests", "responses", "runner_sessions", "runner_session_sending", "runner_truncations")
ROW_KEYS = {"requests": ("run_id", "benchmark", "instance_id")}  # outcome tables without a primary key


def answered_ids(store: Store, run_id: str) -> set[tuple[str, str]]:
    """(benchmark, instance id) of every item of ``run_id`` that has an outcome."""
    rows = store.conn.execute("SELECT benchmark, instance_id FROM responses WHERE run_id = ?", [run_id]).fetchall()
    return {(str(b), str(i)) for b, i in rows}


def unanswered(store: Store, run_id: str) -> int:
    """How many planned items of ``run_id`` have no outcome yet."""
    row = store.conn.execute(
        "SELECT count(*) FROM run_items i LEFT JOIN responses r USING (run_id, benchmark, instance_id) "
        "WHERE i.run_id = ? AND r.instance_id IS NULL", [run_id]).fetchone()
    return int(row[0]) if row else 0


def copy_inputs(main: Store, shard: Store, items: Sequence[PlannedItem]) -> None:
    """Copy the dataset versions and the instances ``items`` need from ``main`` into a shard's store."""
    for benchmark, fingerprint in sorted({(i.benchmark, i.fingerprint) for i in items}):
        runs_db.copy_rows(main, shard, "datasets", "benchmark = ? AND fingerprint = ?", [benchmark, fingerprint])
        ids = [i.instance_id for i in items if i.benchmark == benchmark and i.fingerprint == fingerprint]
        for start in range(0, len(ids), _IDS_PER_COPY):
            runs_db.copy_rows(main, shard, "instances",
                              f"benchmark = ? AND fingerprint = ? AND instance_id IN {ID_LIST_PARAM}",
                              [benchmark, fingerprint, id_list(ids[start:start + _IDS_PER_COPY])])


@dataclass(frozen=True, slots=True)
class Merged:
    """The outcomes (responses) a merge added to the main store, and those of the shard's file it already had."""

    added: int = 0
    already_present: int = 0

    def __add__(self, other: Merged) -> Merged:
        return Merged(self.added + other.added, self.already_present + other.already_present)


def merge_outcomes(shard: Store, main: Store, run_id: str) -> Merged:
    """Merge a shard's outcomes of ``run_id`` (requests, responses, sessions and their sending options, truncations,
    replaced errors) into ``main`` in one transaction; the primary keys (``ROW_KEYS`` for ``requests``) keep one
    outcome per item, so a merge repeated after a crash adds nothing (and says so: ``Merged.added`` is 0)."""
    merged = Merged()
    with main.transaction():
        for table in OUTCOME_TABLES:
            copied = runs_db.copy_rows(shard, main, table, "run_id = ?", [run_id], key=ROW_KEYS.get(table))
            if table == "responses":
                merged = Merged(copied.added, copied.offered - copied.added)
        _merge_error_history(shard, main, run_id)
    return merged


def _merge_error_history(shard: Store, main: Store, run_id: str) -> None:
    rows = shard.conn.execute(
        "SELECT run_id, benchmark, instance_id, error, attempts, endpoint, replaced_at FROM runner_error_history "
        "WHERE run_id = ?", [run_id]).fetchall()
    for row in rows:
        exists = main.conn.execute(
            "SELECT 1 FROM runner_error_history WHERE run_id = ? AND benchmark = ? AND instance_id = ? "
            "AND replaced_at = ?", [row[0], row[1], row[2], row[6]]).fetchone()
        if not exists:
            main.conn.execute("INSERT INTO runner_error_history VALUES (?, ?, ?, ?, ?, ?, ?)", list(row))
