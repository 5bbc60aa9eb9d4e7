"""The runner's queries (issue 4): planning inserts, paging pending work, group commits, sessions, shards.

Bulk inserts bind a whole batch as one parameter (``ColumnBatch``): one statement per batch, not one per row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from medhelm_local.records import InferenceRequest, InferenceResult, InstanceScore, Truncated
from medhelm_local.store.batch import ID_LIST_PARAM, ColumnBatch, id_list
from medhelm_local.store.store import NEW_SCORES, RunInfo, Store, scores_batch, utcnow


@dataclass(frozen=True, slots=True)
class PlannedItem:
    """One item of a plan. Its send rank is its place among all the plan's items sorted by
    ``(order_key, position)``; the store computes it when the plan is inserted."""

    benchmark: str
    instance_id: str
    fingerprint: str
    position: int
    order_key: str


@dataclass(frozen=True, slots=True)
class PendingItem:
    send_rank: int
    instance_id: str
    fingerprint: str


@dataclass
class Outcome:
    """One request's outcome, ready to commit."""

    request: InferenceRequest
    result: InferenceResult
    truncated: Truncated | None = None  # the prompt was cut to fit the model's context
    scores: Sequence[InstanceScore] = ()  # its score rows, where it is scored as answered (ScoreAsAnswered)


ROWS_PER_TRANSACTION = 10_000  # send-order rows per transaction; callers chunk their plan rows alike


def insert_plan(store: Store, run: RunInfo, chunks: Iterable[Sequence[PlannedItem]], *, plan_key: str,
                order_mode: str, manifest_sha256: str, sending: Mapping[str, Any] | None = None) -> None:
    """Record a run, its planned items and their send order, streaming: memory does not grow with the plan;
    ``sending``: the options it sends with (``runner_sending``), kept with its own rows.

    A transaction holds at most ``ROWS_PER_TRANSACTION`` rows (items, then send-order rows), so a large plan never
    sits whole in DuckDB's transaction-local memory, and a plan that fits is stored in one commit; the send order
    is ranked inside DuckDB (which spills, encrypted, if it must). The run's own rows come last, with the last of
    its plan's rows: until they are committed the items belong to no run and nothing reads them. Items left by a
    planning that was killed midway (no run row) are removed first.
    """
    conn = store.conn
    conn.execute("CREATE OR REPLACE TEMP TABLE plan_keys (benchmark VARCHAR, instance_id VARCHAR, "
                 "position INTEGER, order_key VARCHAR)")
    try:
        with store.transaction():
            bounded = _BoundedTransaction(store)
            for table in ("run_items", "runner_item_order"):
                conn.execute(f"DELETE FROM {table} WHERE run_id NOT IN (SELECT run_id FROM runs)")
            for chunk in chunks:
                if chunk:
                    bounded.make_room(len(chunk))
                    _insert_items(store, run.run_id, chunk)
            conn.execute("CREATE OR REPLACE TEMP TABLE plan_ranks AS SELECT benchmark, instance_id, "
                         "row_number() OVER (ORDER BY order_key, benchmark, position) - 1 AS send_rank "
                         "FROM temp.plan_keys")
            row = conn.execute("SELECT count(*) FROM temp.plan_ranks").fetchone()
            total = int(row[0]) if row else 0
            for start in range(0, total, ROWS_PER_TRANSACTION):
                bounded.make_room(min(ROWS_PER_TRANSACTION, total - start))
                conn.execute("INSERT INTO runner_item_order SELECT ?, benchmark, instance_id, send_rank "
                             "FROM temp.plan_ranks WHERE send_rank >= ? AND send_rank < ?",
                             [run.run_id, start, start + ROWS_PER_TRANSACTION])
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run.run_id, run.model, json.dumps(run.benchmarks), run.created_at, run.finished_at, run.status,
                 run.max_instances, run.seed, json.dumps(run.manifest)],
            )
            conn.execute("INSERT INTO runner_runs VALUES (?, ?, ?, ?)",
                         [run.run_id, plan_key, order_mode, manifest_sha256])
            if sending is not None:
                keep_sending(store, run.run_id, sending)
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.plan_keys")
        conn.execute("DROP TABLE IF EXISTS temp.plan_ranks")


class _BoundedTransaction:
    """The open transaction of :func:`insert_plan`, committed and begun anew before rows that would take it past
    ``ROWS_PER_TRANSACTION`` (a batch larger than that is a transaction of its own): each commit writes and
    syncs the WAL, so a plan that fits makes one."""

    def __init__(self, store: Store) -> None:
        self.conn = store.conn
        self.rows = 0

    def make_room(self, rows: int) -> None:
        if self.rows and self.rows + rows > ROWS_PER_TRANSACTION:
            self.conn.execute("COMMIT")
            self.conn.execute("BEGIN TRANSACTION")
            self.rows = 0
        self.rows += rows


PLANNED_ITEMS = ColumnBatch.of(benchmark="VARCHAR", instance_id="VARCHAR", fingerprint="VARCHAR",
                               position="INTEGER", order_key="VARCHAR")


def _insert_items(store: Store, run_id: str, items: Sequence[PlannedItem]) -> None:
    batch = PLANNED_ITEMS.bind(
        benchmark=[i.benchmark for i in items], instance_id=[i.instance_id for i in items],
        fingerprint=[i.fingerprint for i in items], position=[i.position for i in items],
        order_key=[i.order_key for i in items])
    conn = store.conn
    conn.execute("INSERT INTO run_items SELECT $run_id, benchmark, instance_id, fingerprint, position "
                 f"FROM {PLANNED_ITEMS.source}", {"run_id": run_id, "batch": batch})
    conn.execute("INSERT INTO temp.plan_keys SELECT benchmark, instance_id, position, order_key "
                 f"FROM {PLANNED_ITEMS.source}", {"batch": batch})


PREFIX_KEYS = ColumnBatch.of(instance_id="VARCHAR", prefix_key="VARCHAR")
KEYS_PER_BATCH = 10_000


def store_prefix_keys(store: Store, benchmark: str, fingerprint: str, template_sha256: str,
                      keys: Sequence[tuple[str, str]]) -> None:
    """Record a dataset version's send-order keys under one prompt template (``(instance_id, key)`` for every
    instance), replacing any earlier set, in one transaction: a set is whole or absent."""
    conn = store.conn
    with store.transaction():
        conn.execute("DELETE FROM prefix_keys WHERE benchmark = ? AND fingerprint = ? AND template_sha256 = ?",
                     [benchmark, fingerprint, template_sha256])
        for start in range(0, len(keys), KEYS_PER_BATCH):
            chunk = keys[start:start + KEYS_PER_BATCH]
            batch = PREFIX_KEYS.bind(instance_id=[i for i, _ in chunk], prefix_key=[k for _, k in chunk])
            conn.execute(f"INSERT INTO prefix_keys SELECT $benchmark, $fingerprint, $template, * FROM "
                         f"{PREFIX_KEYS.source}", {"benchmark": benchmark, "fingerprint": fingerprint,
                                                   "template": template_sha256, "batch": batch})


def has_prefix_keys(store: Store, benchmark: str, fingerprint: str, template_sha256: str) -> bool:
    """Whether the version's every instance has its key under this template."""
    row = store.conn.execute(
        "SELECT (SELECT count(*) FROM prefix_keys WHERE benchmark = $b AND fingerprint = $f "
        "AND template_sha256 = $t) = (SELECT count(*) FROM instances WHERE benchmark = $b AND fingerprint = $f)",
        {"b": benchmark, "f": fingerprint, "t": template_sha256}).fetchone()
    return bool(row and row[0])


def prefix_keys_in_order(store: Store, benchmark: str, fingerprint: str, template_sha256: str, *, start: int,
                         stop: int) -> list[tuple[str, str]]:
    """``(instance_id, key)`` of the instances at dataset positions ``[start, stop)``, in dataset order."""
    rows = store.conn.execute(
        "SELECT i.instance_id, k.prefix_key FROM instances i JOIN prefix_keys k USING (benchmark, fingerprint, "
        "instance_id) WHERE i.benchmark = $b AND i.fingerprint = $f AND k.template_sha256 = $t "
        "AND i.position >= $start AND i.position < $stop ORDER BY i.position",
        {"b": benchmark, "f": fingerprint, "t": template_sha256, "start": start, "stop": stop}).fetchall()
    return [(str(i), str(k)) for i, k in rows]


def prefix_keys_of(store: Store, benchmark: str, fingerprint: str, template_sha256: str, ids: Sequence[str]
                   ) -> dict[str, str]:
    """``{instance_id: key}`` of the given instances."""
    rows = store.conn.execute(
        "SELECT instance_id, prefix_key FROM prefix_keys WHERE benchmark = ? AND fingerprint = ? "
        f"AND template_sha256 = ? AND instance_id IN {ID_LIST_PARAM}",
        [benchmark, fingerprint, template_sha256, id_list(ids)]).fetchall()
    return {str(i): str(k) for i, k in rows}


def count_items(store: Store, run_id: str) -> int:
    row = store.conn.execute("SELECT count(*) FROM run_items WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row else 0


def items_in_rank_range(store: Store, run_id: str, start: int, stop: int) -> list[PlannedItem]:
    """The run's items with send rank in ``[start, stop)``, in send order (their key keeps that order)."""
    rows = store.conn.execute(
        "SELECT i.benchmark, i.instance_id, i.fingerprint, i.position, o.send_rank FROM run_items i "
        "JOIN runner_item_order o USING (run_id, benchmark, instance_id) "
        "WHERE i.run_id = ? AND o.send_rank >= ? AND o.send_rank < ? ORDER BY o.send_rank",
        [run_id, start, stop],
    ).fetchall()
    return [PlannedItem(str(b), str(i), str(f), int(p), f"{int(r):020d}") for b, i, f, p, r in rows]


def find_resumable(store: Store, plan_key: str) -> str | None:
    """The latest unfinished run planned with the same key, if any."""
    row = store.conn.execute(
        "SELECT r.run_id FROM runs r JOIN runner_runs p USING (run_id) WHERE p.plan_key = ? "
        "AND r.status <> 'finished' ORDER BY r.created_at DESC, r.run_id DESC LIMIT 1",
        [plan_key],
    ).fetchone()
    return str(row[0]) if row else None


def runner_run(store: Store, run_id: str) -> tuple[str, str, str] | None:
    """``(plan_key, order_mode, manifest_sha256)`` of a run planned by this runner."""
    row = store.conn.execute(
        "SELECT plan_key, order_mode, manifest_sha256 FROM runner_runs WHERE run_id = ?", [run_id]
    ).fetchone()
    return (str(row[0]), str(row[1]), str(row[2])) if row else None


def pending_page(store: Store, run_id: str, benchmark: str, *, after_rank: int, limit: int,
                 errors_only: bool) -> tuple[list[PendingItem], int | None]:
    """Items to send among the next ``limit`` in send order strictly after ``after_rank`` (keyset paging).

    Returns the items still to send and the last rank looked at (None: no items left after ``after_rank``);
    paging goes on from that rank. Normal mode: items without any stored outcome. ``errors_only``: items whose
    stored outcome is an error. Each page touches only its candidates' rows: joining the whole run's responses
    on every page would cost time and memory growing with the run.
    """
    outcome = "r.error IS NOT NULL" if errors_only else "r.instance_id IS NULL"
    rows = store.conn.execute(
        "WITH cand AS (SELECT send_rank, instance_id FROM runner_item_order "
        "WHERE run_id = $run AND benchmark = $bench AND send_rank > $after ORDER BY send_rank LIMIT $limit) "
        f"SELECT c.send_rank, c.instance_id, i.fingerprint, {outcome} AS todo FROM cand c "
        "JOIN (SELECT instance_id, fingerprint FROM run_items WHERE run_id = $run AND benchmark = $bench "
        "AND instance_id IN (SELECT instance_id FROM cand)) i USING (instance_id) "
        "LEFT JOIN (SELECT instance_id, error FROM responses WHERE run_id = $run AND benchmark = $bench "
        "AND instance_id IN (SELECT instance_id FROM cand)) r USING (instance_id) "
        "ORDER BY c.send_rank",
        {"run": run_id, "bench": benchmark, "after": after_rank, "limit": limit},
    ).fetchall()
    if not rows:
        return [], None
    return [PendingItem(int(r[0]), str(r[1]), str(r[2])) for r in rows if r[3]], int(rows[-1][0])


def item_counts(store: Store, run_id: str, benchmark: str) -> tuple[int, int, int]:
    """``(planned, answered, errors)`` for one benchmark of a run: items planned, items with an answer, items whose
    request failed (recorded; answered and errors together are what is done)."""
    row = store.conn.execute(
        "SELECT count(*), count(r.instance_id) - count(r.error), count(r.error) FROM run_items i "
        "LEFT JOIN responses r USING (run_id, benchmark, instance_id) WHERE i.run_id = ? AND i.benchmark = ?",
        [run_id, benchmark],
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def errors_by_category(store: Store, run_id: str) -> dict[str, dict[str, int]]:
    """``{benchmark: {error category: count}}`` of the run's recorded failures."""
    out: dict[str, dict[str, int]] = {}
    for benchmark, error, n in store.conn.execute(
        "SELECT benchmark, error, count(*) FROM responses WHERE run_id = ? AND error IS NOT NULL "
        "GROUP BY benchmark, error ORDER BY benchmark, error", [run_id]
    ).fetchall():
        out.setdefault(str(benchmark), {})[str(error)] = int(n)
    return out


# -- sessions ---------------------------------------------------------------------------------------------


def start_session(store: Store, run_id: str, session_id: str, *, mode: str, shard: str | None,
                  endpoints: list[dict[str, Any]], sending: Mapping[str, Any] | None = None) -> None:
    with store.transaction():
        store.conn.execute(
            "INSERT INTO runner_sessions (run_id, session_id, mode, shard, started_at, last_commit_at, wall_s, "
            "responses, errors, prompt_tokens, completion_tokens, request_s, endpoints) "
            "VALUES (?, ?, ?, ?, ?, NULL, 0, 0, 0, 0, 0, 0, ?)",
            [run_id, session_id, mode, shard, utcnow(), json.dumps(endpoints)],
        )
        if sending is not None:
            store.conn.execute("INSERT INTO runner_session_sending VALUES (?, ?, ?)",
                               [run_id, session_id, json.dumps(dict(sending))])


def sessions(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's sessions, oldest first; ``sending``: the options each sent with (None: not recorded)."""
    cursor = store.conn.execute(
        "SELECT s.session_id, s.mode, s.shard, s.started_at, s.last_commit_at, s.wall_s, s.responses, s.errors, "
        "s.prompt_tokens, s.completion_tokens, s.request_s, s.endpoints, o.sending FROM runner_sessions s "
        "LEFT JOIN runner_session_sending o USING (run_id, session_id) WHERE s.run_id = ? ORDER BY s.started_at",
        [run_id],
    )
    names = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        record = dict(zip(names, row, strict=True))
        record["endpoints"] = json.loads(record["endpoints"])
        sending = record["sending"]
        record["sending"] = None if sending is None else json.loads(sending)
        out.append(record)
    return out


def run_sending(store: Store, run_id: str) -> dict[str, Any] | None:
    """The options the run sends with (``runner_sending``); None for a run from before runs kept them."""
    row = store.conn.execute("SELECT sending FROM runner_sending WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def keep_sending(store: Store, run_id: str, sending: Mapping[str, Any]) -> None:
    """Record (or replace) the options the run sends with."""
    store.conn.execute(
        "INSERT INTO runner_sending VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET sending = excluded.sending, "
        "updated_at = excluded.updated_at", [run_id, json.dumps(dict(sending)), utcnow()])


# -- group commit -----------------------------------------------------------------------------------------


OUTCOME_REQUESTS = ColumnBatch.of(benchmark="VARCHAR", instance_id="VARCHAR", request_hash="VARCHAR")
OUTCOME_TRUNCATIONS = ColumnBatch.of(
    benchmark="VARCHAR", instance_id="VARCHAR", field="VARCHAR", field_chars="INTEGER", removed_chars="INTEGER",
    removed_tokens="INTEGER", prompt_tokens="INTEGER")
OUTCOME_RESPONSES = ColumnBatch.of(
    benchmark="VARCHAR", instance_id="VARCHAR", output="VARCHAR", error="VARCHAR", prompt_tokens="INTEGER",
    completion_tokens="INTEGER", latency_s="DOUBLE", attempts="INTEGER", finish_reason="VARCHAR",
    endpoint="VARCHAR")


def commit_outcomes(store: Store, run_id: str, session_id: str, wall_s: float, outcomes: Sequence[Outcome], *,
                    replace_errors: bool) -> None:
    """Commit a batch of outcomes and the session's counters in one transaction.

    Normal mode never overwrites: a second outcome for an item is dropped (the primary key keeps the first), with
    its truncation record, and the session's counts of responses and errors count only the outcomes kept.
    ``replace_errors``: an item's stored *error* is moved to ``runner_error_history`` and replaced by the new
    outcome atomically, with the request (and its truncation record) the retry sent; a stored success is never
    replaced.
    """
    if not outcomes:
        return
    conn = store.conn
    now = utcnow()
    results = [o.result for o in outcomes]
    responses = OUTCOME_RESPONSES.bind(
        benchmark=[o.request.benchmark for o in outcomes], instance_id=[o.request.instance_id for o in outcomes],
        output=[r.output for r in results], error=[r.error for r in results],
        prompt_tokens=[r.prompt_tokens for r in results], completion_tokens=[r.completion_tokens for r in results],
        latency_s=[r.latency_s for r in results], attempts=[r.attempts for r in results],
        finish_reason=[r.finish_reason for r in results], endpoint=[r.endpoint for r in results])
    # Tokens and request time were spent on every outcome sent, kept or not (what the session cost).
    prompt_tokens = sum(o.result.prompt_tokens or 0 for o in outcomes)
    completion_tokens = sum(o.result.completion_tokens or 0 for o in outcomes)
    request_s = sum(o.result.latency_s for o in outcomes)
    batch_items = f"(SELECT benchmark, instance_id FROM {OUTCOME_RESPONSES.source})"
    with store.transaction():
        if replace_errors:  # the retry's request replaces the failed one's (it may differ: a prompt cut to fit)
            stale = ("EXISTS (SELECT 1 FROM responses r WHERE r.run_id = q.run_id AND r.benchmark = q.benchmark "
                     "AND r.instance_id = q.instance_id AND r.error IS NOT NULL)")
            for table in ("runner_truncations", "requests", "scores"):  # a replaced error's rows go with it
                conn.execute(f"DELETE FROM {table} q USING {batch_items} s WHERE q.run_id = $run_id "
                             f"AND q.benchmark = s.benchmark AND q.instance_id = s.instance_id AND {stale}",
                             {"run_id": run_id, "batch": responses})
            conn.execute(
                "INSERT INTO runner_error_history SELECT r.run_id, r.benchmark, r.instance_id, r.error, "
                f"r.attempts, r.endpoint, $now FROM responses r JOIN {batch_items} s "
                "USING (benchmark, instance_id) WHERE r.run_id = $run_id AND r.error IS NOT NULL",
                {"now": now, "run_id": run_id, "batch": responses})
            conn.execute(
                f"DELETE FROM responses r USING {batch_items} s WHERE r.run_id = $run_id "
                "AND r.benchmark = s.benchmark AND r.instance_id = s.instance_id AND r.error IS NOT NULL",
                {"run_id": run_id, "batch": responses})
        # The outcomes ``responses``' key keeps (items without a stored outcome; with replace_errors, or with an
        # error, deleted above) are the ones whose request, and scores where scored as answered, are stored:
        # ``requests`` has no key (schema_core.sql), so it is written for exactly those, found by the insert itself
        # (RETURNING) rather than by probing ``responses`` again for each table.
        kept = set(conn.execute(f"INSERT INTO responses SELECT $run_id, *, $now FROM {OUTCOME_RESPONSES.source} "
                                "ON CONFLICT DO NOTHING RETURNING benchmark, instance_id",
                                {"run_id": run_id, "now": now, "batch": responses}).fetchall())
        stored = [o for o in outcomes if (o.request.benchmark, o.request.instance_id) in kept]
        if stored:
            conn.execute(f"INSERT INTO requests (run_id, benchmark, instance_id, request_hash) SELECT $run_id, * "
                         f"FROM {OUTCOME_REQUESTS.source}", {"run_id": run_id, "batch": OUTCOME_REQUESTS.bind(
                             benchmark=[o.request.benchmark for o in stored],
                             instance_id=[o.request.instance_id for o in stored],
                             request_hash=[o.request.digest() for o in stored])})
        scores = [row for o in stored for row in o.scores]
        if scores:
            conn.execute(f"INSERT INTO scores SELECT $run_id, * FROM {NEW_SCORES.source}",
                         {"run_id": run_id, "batch": scores_batch(scores)})
        # The truncation record and the counts of responses and errors describe the outcomes kept: a dropped one's
        # cut would replace the kept request's record, and counting it would count an answer the run lacks.
        cut = [(o.request, o.truncated) for o in stored if o.truncated is not None]
        if cut:
            conn.execute(f"INSERT OR REPLACE INTO runner_truncations SELECT $run_id, * "
                         f"FROM {OUTCOME_TRUNCATIONS.source}",
                         {"run_id": run_id, "batch": OUTCOME_TRUNCATIONS.bind(
                             benchmark=[r.benchmark for r, _ in cut], instance_id=[r.instance_id for r, _ in cut],
                             field=[t.field for _, t in cut], field_chars=[t.field_chars for _, t in cut],
                             removed_chars=[t.removed_chars for _, t in cut],
                             removed_tokens=[t.removed_tokens for _, t in cut],
                             prompt_tokens=[t.prompt_tokens for _, t in cut])})
        conn.execute(
            "UPDATE runner_sessions SET last_commit_at = ?, wall_s = ?, responses = responses + ?, "
            "errors = errors + ?, prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, "
            "request_s = request_s + ? WHERE run_id = ? AND session_id = ?",
            [now, wall_s, len(stored), sum(1 for o in stored if not o.result.ok), prompt_tokens, completion_tokens,
             request_s, run_id, session_id],
        )


def unscored(store: Store, run_id: str, benchmark: str, metric: str) -> tuple[int, int]:
    """``(answers, answers without a row of metric)`` of one benchmark of a run."""
    row = store.conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE s.instance_id IS NULL) FROM responses r LEFT JOIN scores s "
        "ON s.run_id = r.run_id AND s.benchmark = r.benchmark AND s.instance_id = r.instance_id AND s.metric = ? "
        "WHERE r.run_id = ? AND r.benchmark = ?", [metric, run_id, benchmark]).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def truncation_counts(store: Store, run_id: str) -> dict[str, tuple[int, int]]:
    """Per benchmark of a run: (instances whose prompt was cut to fit, instances answered or failed)."""
    rows = store.conn.execute(
        "SELECT r.benchmark, count(t.instance_id), count(*) FROM responses r LEFT JOIN runner_truncations t "
        "ON t.run_id = r.run_id AND t.benchmark = r.benchmark AND t.instance_id = r.instance_id "
        "WHERE r.run_id = ? GROUP BY r.benchmark", [run_id]).fetchall()
    return {str(b): (int(cut), int(total)) for b, cut, total in rows}


def truncation_summary(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    """Per benchmark of a run: prompts cut to fit the model's context, the field cut, and tokens and characters
    removed (total and largest). Counts only."""
    rows = store.conn.execute(
        "SELECT benchmark, field, count(*), sum(removed_tokens), max(removed_tokens), sum(removed_chars) "
        "FROM runner_truncations WHERE run_id = ? GROUP BY benchmark, field ORDER BY benchmark, field",
        [run_id]).fetchall()
    return {str(b): {"field": str(f), "prompts": int(n), "removed_tokens": int(t), "max_removed_tokens": int(m),
                     "removed_chars": int(c)} for b, f, n, t, m, c in rows}


# -- weights ----------------------------------------------------------------------------------------------


def cached_weight_hash(store: Store, path: str, size: int, mtime_ns: int) -> str | None:
    row = store.conn.execute(
        "SELECT sha256 FROM weight_hashes WHERE path = ? AND size = ? AND mtime_ns = ?", [path, size, mtime_ns]
    ).fetchone()
    return str(row[0]) if row else None


def remember_weight_hash(store: Store, path: str, size: int, mtime_ns: int, sha256: str) -> None:
    store.conn.execute("INSERT INTO weight_hashes VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                       [path, size, mtime_ns, sha256, utcnow()])


# -- model servers ----------------------------------------------------------------------------------------


def record_model_server(store: Store, server_id: str, model: str, base_url: str, server_version: str | None,
                        served_models: list[str], command_sha256: str) -> None:
    store.conn.execute("INSERT INTO model_servers VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [server_id, model, base_url, utcnow(), server_version, json.dumps(served_models),
                        command_sha256])


# -- shards -----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Copied:
    """What :func:`copy_rows` did: the source rows it offered, and those the target lacked and now has."""

    offered: int
    added: int


def copy_rows(source: Store, target: Store, table: str, where: str, params: list[Any], *,
              batch_rows: int = 20_000, key: Sequence[str] | None = None) -> Copied:
    """Copy ``table`` rows matching ``where`` from one store to another, keeping existing target rows: by the
    table's primary key, or, for a table without one, by ``key`` (its columns that identify a row).

    Both stores are encrypted DuckDB files opened by this process; rows move as Arrow batches, never through a
    plain file. Columns are matched by name: a shard file built before a column was added still merges (NULL).
    """
    keep = ("ON CONFLICT DO NOTHING" if key is None else "s WHERE NOT EXISTS (SELECT 1 FROM " + table + " t WHERE "
            + " AND ".join(f"t.{column} = s.{column}" for column in key) + ")")
    cursor = source.conn.cursor()
    offered = added = 0
    try:
        cursor.execute(f"USE {_catalog(source)}")
        reader = cursor.execute(f"SELECT * FROM {table} WHERE {where}", params).to_arrow_reader(batch_rows)
        for batch in reader:
            if batch.num_rows == 0:
                continue
            target.conn.register("shard_copy_src", batch)
            try:
                inserted = target.conn.execute(
                    f"INSERT INTO {table} BY NAME SELECT * FROM shard_copy_src {keep}").fetchone()
            finally:
                target.conn.unregister("shard_copy_src")
            offered += batch.num_rows
            added += int(inserted[0]) if inserted else 0
    finally:
        cursor.close()
    return Copied(offered, added)


def _catalog(store: Store) -> str:
    from medhelm_local.store.connection import STORE_ALIAS

    return STORE_ALIAS
