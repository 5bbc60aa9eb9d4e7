"""The web console's reads that no other front end makes: a run's items page by page, its answered items, the
model servers started by the appliance."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from medhelm_local.records import Truncated
from medhelm_local.store.store import Store


@dataclass(frozen=True)
class ItemRow:
    """One item of a run as the console lists it. ``request``: the JSON of a request stored before requests were
    kept as hashes only (None since); ``cut``: the recorded cut of its prompt, if it was cut to fit."""

    instance_id: str
    fingerprint: str
    request: str | None
    request_hash: str | None
    cut: Truncated | None
    output: str | None
    error: str | None
    finish_reason: str | None
    score: float | None
    position: int  # the instance's place in its registered dataset: what the audit trail names (never the id)


def truncation_by_benchmark(store: Store, run_id: str) -> dict[str, tuple[int, int]]:
    """``{benchmark: (responses cut at the token limit, responses)}`` of one run."""
    rows = store.conn.execute(
        "SELECT benchmark, count(*) FILTER (WHERE finish_reason = 'length'), count(output) FROM responses "
        "WHERE run_id = ? GROUP BY benchmark ORDER BY benchmark", [run_id]).fetchall()
    return {str(benchmark): (int(cut), int(total)) for benchmark, cut, total in rows}


def item_page(store: Store, run_id: str, benchmark: str, metric: str, *, failures_only: bool, limit: int,
              offset: int) -> tuple[list[ItemRow], int]:
    """One page of a run's items on one benchmark, in plan order (their score under ``metric``), and how many
    items there are (failures only: an error, no score, or a score below 1)."""
    condition = ("AND (r.error IS NOT NULL OR s.value IS NULL OR s.value < 1)" if failures_only else "")
    base = ("FROM run_items i LEFT JOIN requests q USING (run_id, benchmark, instance_id) "
            "LEFT JOIN runner_truncations t USING (run_id, benchmark, instance_id) "
            "LEFT JOIN responses r USING (run_id, benchmark, instance_id) "
            "LEFT JOIN scores s ON s.run_id = i.run_id AND s.benchmark = i.benchmark "
            "AND s.instance_id = i.instance_id AND s.metric = ? "
            f"WHERE i.run_id = ? AND i.benchmark = ? {condition}")
    params = [metric, run_id, benchmark]
    total_row = store.conn.execute(f"SELECT count(*) {base}", params).fetchone()
    rows = store.conn.execute(
        f"SELECT i.instance_id, i.fingerprint, q.request, q.request_hash, t.field, t.field_chars, t.removed_chars, "
        f"t.removed_tokens, t.prompt_tokens, r.output, r.error, r.finish_reason, s.value, i.position {base} "
        "ORDER BY i.position LIMIT ? OFFSET ?", [*params, limit, offset]).fetchall()
    items = [ItemRow(instance_id=str(row[0]), fingerprint=str(row[1]), request=row[2], request_hash=row[3],
                     cut=None if row[4] is None else Truncated(*row[4:9]), output=row[9], error=row[10],
                     finish_reason=row[11], score=row[12], position=int(row[13])) for row in rows]
    return items, int(total_row[0]) if total_row else 0


def answered_items(store: Store, run_id: str, benchmark: str) -> list[tuple[str, int]]:
    """The run's items on ``benchmark`` that have an output: ``(instance id, position in its dataset)``, by id."""
    return [(str(iid), int(position)) for iid, position in store.conn.execute(
        "SELECT r.instance_id, i.position FROM responses r JOIN run_items i USING (run_id, benchmark, instance_id) "
        "WHERE r.run_id = ? AND r.benchmark = ? AND r.output IS NOT NULL ORDER BY r.instance_id",
        [run_id, benchmark]).fetchall()]


def answered_item(store: Store, run_id: str, benchmark: str, instance_id: str) -> tuple[str, str] | None:
    """``(dataset fingerprint, output)`` of one answered item; None when the item or its output is missing."""
    row = store.conn.execute(
        "SELECT i.fingerprint, r.output FROM run_items i JOIN responses r USING (run_id, benchmark, instance_id) "
        "WHERE i.run_id = ? AND i.benchmark = ? AND i.instance_id = ?", [run_id, benchmark, instance_id]
    ).fetchone()
    if row is None or row[1] is None:
        return None
    return str(row[0]), str(row[1])


def model_servers(store: Store, *, limit: int = 20) -> list[dict[str, Any]]:
    """The model servers the appliance started (``serve model``), latest first."""
    rows = store.conn.execute(
        "SELECT server_id, model, base_url, started_at, server_version, served_models, command_sha256 "
        "FROM model_servers ORDER BY started_at DESC LIMIT ?", [limit]).fetchall()
    return [{"server_id": r[0], "model": r[1], "base_url": r[2], "started_at": r[3], "server_version": r[4],
             "served_models": json.loads(r[5]), "command_sha256": r[6]} for r in rows]
