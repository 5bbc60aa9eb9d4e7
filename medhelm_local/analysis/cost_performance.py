"""Cost-performance (MedHELM Figure 5): each model's total evaluation cost (its runs plus the jury's judging of
them) against its win-rate, and which models are on the Pareto front.

Costs come from the runner stage's :func:`medhelm_local.analysis.cost.run_cost` (measured usage x configured
pricing) and, for the jury, the same pricing rule applied to each judge's measured tokens. Anything not priced
makes the total unknown (None): a cost is never assumed.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from medhelm_local.analysis.cost import price, run_cost
from medhelm_local.errors import NotFoundError
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
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


def jury_cost(store: Store, run_id: str, config: ApplianceConfig) -> tuple[float | None, str]:
    """What the judges' requests about one run cost; (0, ...) when the run was not judged."""
    total = 0.0
    notes = []
    for judge, usage in judge_usage(store, run_id).items():
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


def model_costs(store: Store, config: ApplianceConfig, runs: dict[tuple[str, str], str]) -> dict[str, ModelCost]:
    """Per model, over the runs behind its leaderboard row (``runs``: (model, benchmark) -> run id).

    A model removed from appliance.yaml since its runs has an unknown cost (None, said in the note), never zero;
    any other failure (a missing run, a store error) is raised."""
    out: dict[str, ModelCost] = {}
    models = sorted({model for model, _ in runs})
    for model in models:
        endpoint = _configured(config, model)
        run_ids = sorted({run_id for (m, _), run_id in runs.items() if m == model})
        bench: float | None = 0.0
        jury: float | None = 0.0
        notes = []
        for run_id in run_ids:
            amount: float | None = None
            if endpoint is None:
                notes.append("model no longer configured")
            else:
                summary = run_cost(store, run_id, endpoint)
                amount = summary.total
                if amount is None:
                    notes.append(summary.note)
            bench = None if amount is None or bench is None else bench + float(amount)
            judged, note = jury_cost(store, run_id, config)
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
