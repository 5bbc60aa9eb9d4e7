"""The scoring stage's queries: LLM-jury judgements and instance-score details.

Judgement explanations are model text about patient data: they are written here, inside the encrypted store,
and read back only by :func:`get_judgments`; nothing in this module logs them.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from medhelm_local.store.store import Store, benchmark_filter, utcnow


class JudgmentStatus(StrEnum):
    OK = "ok"
    REQUEST_FAILED = "request_failed"  # the judge did not answer (HTTP error, timeout) after retries
    INVALID_REPLY = "invalid_reply"  # the judge answered, but not a valid rating for every criterion


class Judgment(BaseModel):
    run_id: str  # a run id, or ``predictions:<sha256>`` for a scored predictions file
    benchmark: str
    instance_id: str
    judge: str
    prompt_hash: str
    status: JudgmentStatus
    error: str | None = None  # a category (``http_503``, ``not_json``, ``missing:clarity``), never reply text
    ratings: dict[str, int] = Field(default_factory=dict)
    explanations: dict[str, str] = Field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 1
    judged_at: datetime = Field(default_factory=utcnow)
    output_shape: str | None = None  # the structured-output shape sent (inference/structured.py)
    # What was cut from the judge prompt to fit the judge's context (scoring/jury_fit.py): budget, tokens before
    # and after, and per cut field its characters and tokens kept; None: nothing was cut. Counts only, no text.
    truncation: dict[str, Any] | None = None


class JudgeFailureRate(BaseModel):
    judge: str
    benchmark: str
    total: int
    ok: int
    request_failed: int
    invalid_reply: int
    categories: dict[str, int] = Field(default_factory=dict)  # error category -> count (failures only)
    output_shapes: list[str] = Field(default_factory=list)  # structured-output shapes the judgements were sent
    truncated: int = 0  # judgements whose prompt had long fields cut to fit the judge's context

    @property
    def failure_rate(self) -> float:
        return (self.total - self.ok) / self.total if self.total else 0.0


_COLUMNS = ("run_id, benchmark, instance_id, judge, prompt_hash, status, error, ratings, explanations, "
            "prompt_tokens, completion_tokens, latency_s, attempts, judged_at, output_shape, truncation")


def record_judgment(store: Store, judgment: Judgment) -> None:
    """Insert or replace one judgement (a re-score replaces the earlier attempt for the same judge)."""
    with store.transaction():
        store.conn.execute(
            "DELETE FROM judgments WHERE run_id = ? AND benchmark = ? AND instance_id = ? AND judge = ?",
            [judgment.run_id, judgment.benchmark, judgment.instance_id, judgment.judge],
        )
        store.conn.execute(
            f"INSERT INTO judgments ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [judgment.run_id, judgment.benchmark, judgment.instance_id, judgment.judge, judgment.prompt_hash,
             judgment.status.value, judgment.error, json.dumps(judgment.ratings), json.dumps(judgment.explanations),
             judgment.prompt_tokens, judgment.completion_tokens, judgment.latency_s, judgment.attempts,
             judgment.judged_at, judgment.output_shape,
             None if judgment.truncation is None else json.dumps(judgment.truncation)],
        )


def get_judgments(store: Store, run_id: str, benchmark: str) -> list[Judgment]:
    rows = store.conn.execute(
        f"SELECT {_COLUMNS} FROM judgments WHERE run_id = ? AND benchmark = ? ORDER BY instance_id, judge",
        [run_id, benchmark],
    ).fetchall()
    return [
        Judgment(run_id=r[0], benchmark=r[1], instance_id=r[2], judge=r[3], prompt_hash=r[4],
                 status=JudgmentStatus(r[5]), error=r[6], ratings=json.loads(r[7] or "{}"),
                 explanations=json.loads(r[8] or "{}"), prompt_tokens=r[9], completion_tokens=r[10],
                 latency_s=r[11], attempts=r[12], judged_at=r[13], output_shape=r[14],
                 truncation=json.loads(r[15]) if r[15] else None)
        for r in rows
    ]


def judge_failure_rates(store: Store, run_id: str | None = None, benchmark: str | None = None
                        ) -> list[JudgeFailureRate]:
    """Failure counts per judge and benchmark (over one run, or over the whole store)."""
    where, params = [], []
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if benchmark is not None:
        where.append("benchmark = ?")
        params.append(benchmark)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = store.conn.execute(
        "SELECT judge, benchmark, count(*), count(*) FILTER (WHERE status = 'ok'), "
        "count(*) FILTER (WHERE status = 'request_failed'), count(*) FILTER (WHERE status = 'invalid_reply'), "
        "list(DISTINCT output_shape ORDER BY output_shape) FILTER (WHERE output_shape IS NOT NULL), "
        "count(*) FILTER (WHERE truncation IS NOT NULL) "
        f"FROM judgments {clause} GROUP BY judge, benchmark ORDER BY benchmark, judge",
        params,
    ).fetchall()
    failed = f"{clause} {'AND' if where else 'WHERE'} status <> 'ok'"
    categories: dict[tuple[str, str], dict[str, int]] = {}
    for judge, bench, error, count in store.conn.execute(
        f"SELECT judge, benchmark, coalesce(error, 'unknown'), count(*) FROM judgments {failed} "
        "GROUP BY ALL ORDER BY count(*) DESC, 3", params,
    ).fetchall():
        categories.setdefault((judge, bench), {})[str(error)] = int(count)
    return [JudgeFailureRate(judge=r[0], benchmark=r[1], total=r[2], ok=r[3], request_failed=r[4],
                             invalid_reply=r[5], categories=categories.get((r[0], r[1]), {}),
                             output_shapes=list(r[6] or []), truncated=r[7]) for r in rows]


def record_judge_manifest(store: Store, run_id: str, entries: dict[str, dict[str, Any]]) -> None:
    """Record in the run's manifest (``jury.judges``) what each judge was sent: backend kind, served model,
    structured-output shape, shapes its server refused. Nothing for a scope that is not a run (a scored
    predictions file)."""
    with store.transaction():
        row = store.conn.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            return
        manifest = json.loads(row[0] or "{}")
        jury = manifest.setdefault("jury", {})
        judges = jury.setdefault("judges", {})
        judges.update(entries)
        store.conn.execute("UPDATE runs SET manifest = ? WHERE run_id = ?", [json.dumps(manifest), run_id])


def judge_usage(store: Store, run_id: str, benchmarks: Collection[str] | None = None) -> dict[str, dict[str, float]]:
    """Tokens and time the jury spent on a run (``benchmarks``: on those of its benchmarks only), per judge (for
    cost accounting)."""
    clause, chosen = benchmark_filter(benchmarks)
    params = [run_id, *chosen]
    rows = store.conn.execute(
        "SELECT judge, count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), "
        "coalesce(sum(latency_s), 0), count(*) FILTER (WHERE status <> 'request_failed' AND "
        "(prompt_tokens IS NULL OR completion_tokens IS NULL)) "
        f"FROM judgments WHERE run_id = ?{clause} GROUP BY judge ORDER BY judge",
        params,
    ).fetchall()
    return {r[0]: {"requests": r[1], "prompt_tokens": r[2], "completion_tokens": r[3], "latency_s": r[4],
                   "without_usage": r[5]} for r in rows}


def score_rows(store: Store, run_id: str, benchmark: str, metric: str | None = None
               ) -> list[tuple[str, str, float | None, dict[str, Any]]]:
    """``(instance_id, metric, value, details)`` of a run's scores for one benchmark, ordered by instance."""
    clause, params = ("AND metric = ?", [run_id, benchmark, metric]) if metric else ("", [run_id, benchmark])
    rows = store.conn.execute(
        f"SELECT instance_id, metric, value, details FROM scores WHERE run_id = ? AND benchmark = ? {clause} "
        "ORDER BY instance_id, metric",
        params,
    ).fetchall()
    return [(r[0], r[1], r[2], json.loads(r[3] or "{}")) for r in rows]


def scored_count(store: Store, run_id: str, benchmark: str, metric: str) -> int:
    """How many of a run's instances of ``benchmark`` have a ``metric`` value (a failed one has none)."""
    row = store.conn.execute("SELECT COUNT(*) FROM scores WHERE run_id = ? AND benchmark = ? AND metric = ? "
                             "AND value IS NOT NULL", [run_id, benchmark, metric]).fetchone()
    return int(row[0]) if row else 0
