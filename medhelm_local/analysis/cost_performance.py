"""Cost-performance (MedHELM Figure 5): each model's total evaluation cost (its runs plus the jury's judging of
them) against its win-rate, and which models are on the Pareto front.

Costs come from the runner stage's :func:`medhelm_local.analysis.cost.run_cost` (measured usage x configured
pricing) and, for the jury, the same pricing rule applied to each judge's measured tokens. Only what is behind a
row is priced: a run some of whose benchmarks were re-run later (or fall outside ``leaderboard --category``)
counts for its remaining benchmarks' responses and judging alone. Anything not priced, or not measurable for
part of a run (GPU time is measured per run), makes the total unknown (None): a cost is never assumed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel

from medhelm_local.analysis.cost import price, run_cost
from medhelm_local.errors import NotFoundError
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
from medhelm_local.store.costs import response_totals
from medhelm_local.store.judgments import judge_usage
from medhelm_local.store.store import Store


class ModelCost(BaseModel):
    model: str
    benchmark_cost: float | None
    jury_cost: float | None
    total: float | None
    note: str


def _configured(config: ApplianceConfig, name: str) -> ModelEndpoint | None:
    """The model's endpoint in appliance.yaml; None when it has been removed since (its cost is then unknown)."""
    try:
        return config.model(name)
    except NotFoundError:
        return None


def jury_cost(store: Store, run_id: str, config: ApplianceConfig, benchmarks: Collection[str] | None = None
              ) -> tuple[float | None, str]:
    """What the judges' requests about one run (``benchmarks``: about those of its benchmarks only) cost; (0, ...)
    when the run was not judged."""
    total = 0.0
    notes = []
    for judge, usage in judge_usage(store, run_id, benchmarks).items():
        endpoint = _configured(config, judge)
        if endpoint is None:
            return None, f"judge {judge} is no longer configured"
        # GPU-time pricing of a judge uses the sum of its request latencies: an upper bound under concurrency.
        method, amount, _, note = price(endpoint.pricing, prompt_tokens=int(usage["prompt_tokens"]),
                                        completion_tokens=int(usage["completion_tokens"]),
                                        wall_s=float(usage["latency_s"]),
                                        tokens_complete=int(usage["without_usage"]) == 0)
        if amount is None:
            return None, f"judge {judge}: {note}"
        if method == "gpu_time":
            notes.append(f"judge {judge}: GPU time = summed request latency (upper bound)")
        total += float(amount)
    return total, "; ".join(notes)


def _partial_run_cost(store: Store, run_id: str, endpoint: ModelEndpoint, benchmarks: set[str]
                      ) -> tuple[float | None, str]:
    """The cost of some of a run's benchmarks: their responses' measured tokens under token pricing. GPU time is
    measured per run, not per benchmark: it cannot be split, so that cost is unknown."""
    totals = response_totals(store, run_id, benchmarks)
    method, amount, _, note = price(endpoint.pricing, prompt_tokens=totals.prompt_tokens,
                                    completion_tokens=totals.completion_tokens, wall_s=0.0,
                                    tokens_complete=totals.without_usage == 0)
    if method == "gpu_time":
        return None, (f"run {run_id}: only some of its benchmarks are behind this row, and its GPU time cannot be "
                      "split by benchmark")
    return amount, note


def model_costs(store: Store, config: ApplianceConfig, runs: dict[tuple[str, str], str]) -> dict[str, ModelCost]:
    """Per model, over the runs behind its leaderboard row (``runs``: (model, benchmark) -> run id). A run only
    some of whose benchmarks are behind the row (the others re-run later, or left out by a category) counts for
    those benchmarks only: their measured tokens and their judging (GPU-time pricing cannot be split: unknown).

    A model removed from appliance.yaml since its runs has an unknown cost (None, said in the note), never zero;
    any other failure (a missing run, a store error) is raised."""
    out: dict[str, ModelCost] = {}
    models = sorted({model for model, _ in runs})
    for model in models:
        endpoint = _configured(config, model)
        behind: dict[str, set[str]] = {}
        for (m, benchmark), run_id in runs.items():
            if m == model:
                behind.setdefault(run_id, set()).add(benchmark)
        bench: float | None = 0.0
        jury: float | None = 0.0
        notes = []
        for run_id in sorted(behind):
            run = store.get_run(run_id)
            if run is None:
                raise NotFoundError(f"run {run_id!r} not found")
            part = behind[run_id] if set(run.benchmarks) - behind[run_id] else None
            amount: float | None = None
            if endpoint is None:
                notes.append("model no longer configured")
            elif part is not None:
                amount, note = _partial_run_cost(store, run_id, endpoint, part)
                if amount is None:
                    notes.append(note)
            else:
                summary = run_cost(store, run_id, endpoint)
                amount = summary.total
                if amount is None:
                    notes.append(summary.note)
            bench = None if amount is None or bench is None else bench + float(amount)
            judged, note = jury_cost(store, run_id, config, part)
            if note:
                notes.append(note)
            jury = None if judged is None or jury is None else jury + judged
        total = None if bench is None or jury is None else bench + jury
        out[model] = ModelCost(model=model, benchmark_cost=bench, jury_cost=jury, total=total,
                               note="; ".join(dict.fromkeys(notes)) or "measured usage x configured pricing")
    return out


def pareto_front(points: Mapping[str, tuple[float | None, float | None]]) -> set[str]:
    """Models no other model beats on both cost (lower) and win-rate (higher); points are (cost, win_rate)."""
    known: dict[str, tuple[float, float]] = {}
    for model, (cost_value, rate_value) in points.items():
        if cost_value is not None and rate_value is not None:
            known[model] = (cost_value, rate_value)
    front = set()
    for model, (cost, rate) in known.items():
        dominated = any(
            other != model and oc <= cost and orate >= rate and (oc < cost or orate > rate)
            for other, (oc, orate) in known.items()
        )
        if not dominated:
            front.add(model)
    return front
