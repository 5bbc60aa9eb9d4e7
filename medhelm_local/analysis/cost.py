"""What a run cost, from measured usage and time only (the cost side of the paper's Table 3 and Figure 5).

Two methods, from the model's ``pricing`` in appliance.yaml:

* ``tokens``: ``input_per_million`` x prompt tokens + ``output_per_million`` x completion tokens, with token
  counts from each response's ``usage`` (responses without usage make the total unknown, not smaller, and so
  do tokens of a side, input or output, that has no price: an unset price is unknown, never zero);
* ``gpu_time``: ``gpu_hour_rate`` x ``gpus`` x the wall time the run's sessions were sending requests (the
  union of the sessions' intervals, so parallel shards are not counted twice). ``gpus`` is every GPU serving
  the model: replicas x tensor-parallel size.

Without pricing the method is ``none`` and ``total`` is None: a cost is never assumed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel

from medhelm_local.errors import NotFoundError
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint, Pricing
from medhelm_local.store import runs as runs_db
from medhelm_local.store.costs import response_totals
from medhelm_local.store.store import Store

CostMethod = Literal["tokens", "gpu_time", "none"]


class CostSummary(BaseModel):
    run_id: str
    model: str
    method: CostMethod
    responses: int
    ok: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    responses_without_usage: int
    wall_s: float  # union of the sessions' sending intervals
    request_s: float  # sum of per-request latencies (client-measured, retries included)
    gpu_hours: float | None
    total: float | None  # in the currency of the configured prices
    per_instance: float | None
    note: str


def _wall_seconds(store: Store, run_id: str) -> float:
    intervals = []
    for session in runs_db.sessions(store, run_id):
        start = session["started_at"]
        intervals.append((start, start + timedelta(seconds=float(session["wall_s"]))))
    intervals.sort()
    total = 0.0
    current_start = current_end = None
    for start, end in intervals:
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += (current_end - current_start).total_seconds()
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None and current_start is not None:
        total += (current_end - current_start).total_seconds()
    return total


def price(pricing: Pricing | None, *, prompt_tokens: int, completion_tokens: int, wall_s: float,
          tokens_complete: bool) -> tuple[CostMethod, float | None, float | None, str]:
    """``(method, total, gpu_hours, note)`` for measured usage under ``pricing``."""
    if pricing is None:
        return "none", None, None, "no pricing configured for this model"
    if pricing.input_per_million is not None or pricing.output_per_million is not None:
        if not tokens_complete:
            return "tokens", None, None, "some responses carry no usage: token cost unknown"
        # A side without a price is unknown, not free: its tokens make the total unknown (none of them: nothing
        # to price, so the total is still exact).
        for side, count, rate in (("input_per_million", prompt_tokens, pricing.input_per_million),
                                  ("output_per_million", completion_tokens, pricing.output_per_million)):
            if rate is None and count:
                return "tokens", None, None, f"pricing has no {side}: the cost of {count} tokens is unknown"
        total = (prompt_tokens * (pricing.input_per_million or 0.0)
                 + completion_tokens * (pricing.output_per_million or 0.0)) / 1e6
        return "tokens", total, None, "price per million tokens x measured usage"
    if pricing.gpu_hour_rate is not None:
        gpu_hours = wall_s / 3600.0 * pricing.gpus
        return "gpu_time", gpu_hours * pricing.gpu_hour_rate, gpu_hours, "GPU-hour rate x GPUs x measured wall time"
    return "none", None, None, "pricing has neither token prices nor a GPU-hour rate"


def run_cost(store: Store, run_id: str, model: ModelEndpoint | ApplianceConfig) -> CostSummary:
    """Measured tokens, time and cost of one run. ``model``: the run's endpoint, or the config to find it in."""
    run = store.get_run(run_id)
    if run is None:
        raise NotFoundError(f"run {run_id!r} not found")
    endpoint = model.model(run.model) if isinstance(model, ApplianceConfig) else model
    totals = response_totals(store, run_id)
    wall_s = _wall_seconds(store, run_id)
    method, total, gpu_hours, note = price(endpoint.pricing, prompt_tokens=totals.prompt_tokens,
                                           completion_tokens=totals.completion_tokens, wall_s=wall_s,
                                           tokens_complete=totals.without_usage == 0)
    responses = totals.responses
    if method == "tokens" and total is not None and responses > totals.ok:
        # a failed request has no usage to price; a server that bills failed requests costs more than this
        note += f"; {responses - totals.ok} failed request(s) carry no usage and are not priced"
    return CostSummary(
        run_id=run_id, model=run.model, method=method, responses=responses, ok=totals.ok,
        errors=responses - totals.ok, prompt_tokens=totals.prompt_tokens, completion_tokens=totals.completion_tokens,
        responses_without_usage=totals.without_usage, wall_s=wall_s, request_s=totals.request_s, gpu_hours=gpu_hours,
        total=total, per_instance=(total / responses) if total is not None and responses else None, note=note,
    )
