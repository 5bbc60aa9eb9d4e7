"""What a run's cost is computed from: its responses' counts, tokens and request time (analysis/cost.py prices
them)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from medhelm_local.store.store import Store, benchmark_filter


@dataclass(frozen=True)
class ResponseTotals:
    responses: int
    ok: int  # responses with an output
    prompt_tokens: int
    completion_tokens: int
    without_usage: int  # answered, but the server reported no token counts
    request_s: float  # sum of the requests' latencies


def response_totals(store: Store, run_id: str, benchmarks: Collection[str] | None = None) -> ResponseTotals:
    """The run's response totals; ``benchmarks``: only those benchmarks' responses."""
    clause, chosen = benchmark_filter(benchmarks)
    row = store.conn.execute(
        "SELECT count(*), count(output), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), "
        "count(*) FILTER (WHERE output IS NOT NULL AND (prompt_tokens IS NULL OR completion_tokens IS NULL)), "
        f"coalesce(sum(latency_s), 0) FROM responses WHERE run_id = ?{clause}", [run_id, *chosen]).fetchone()
    assert row is not None  # an aggregate without GROUP BY always returns one row
    responses, ok, prompt_tokens, completion_tokens, without_usage, request_s = row
    return ResponseTotals(responses=int(responses), ok=int(ok), prompt_tokens=int(prompt_tokens),
                          completion_tokens=int(completion_tokens), without_usage=int(without_usage),
                          request_s=float(request_s))
