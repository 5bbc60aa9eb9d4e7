"""Score a run: each response becomes an :class:`InstanceScore`; failures stay failures (value None).

One engine for every benchmark: the spec's ``metric`` names either an instance metric from the registry or the
LLM jury (``jury``, which needs the appliance config's judges).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.prompts.styles import spec_for_run
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.scoring.jury import DEFAULT_JURY_CONCURRENCY, JuryItem, JuryStats, jury_scores
from medhelm_local.scoring.metrics import JURY, Unscorable, get_metric
from medhelm_local.store.store import Store


class MetricNotAvailable(MedhelmError):
    """The benchmark's metric is not implemented in this version."""


def score_outputs(spec: BenchmarkSpec, items: Iterable[tuple[Instance, str | None, str | None]]
                  ) -> list[InstanceScore]:
    """Score ``(instance, output, error)`` triples with the spec's instance metric (not the jury)."""
    metric = get_metric(spec.metric)
    if metric is None:
        raise MetricNotAvailable(f"benchmark {spec.id}: metric {spec.metric!r} is not available")
    scores = []
    for instance, output, error in items:
        if output is None:
            scores.append(InstanceScore(benchmark=spec.id, instance_id=instance.id, metric=spec.metric,
                                        value=None, details={"error": error or "no_response"}))
            continue
        try:
            value, details = metric(spec, instance, output)
        except Unscorable as unscorable:
            value, details = None, {"error": unscorable.category}
        scores.append(InstanceScore(benchmark=spec.id, instance_id=instance.id, metric=spec.metric,
                                    value=value, details=details))
    return scores


def score_items(store: Store, spec: BenchmarkSpec, items: list[tuple[Instance, str | None, str | None]], *,
                scope: str, config: ApplianceConfig | None, jury_concurrency: int | None = None,
                only_failed: bool = False, jury_stats: JuryStats | None = None,
                egress: EgressPolicy | None = None) -> list[InstanceScore]:
    """Score items of one benchmark; jury judgements are recorded under ``scope`` (a run id).
    ``only_failed``: keep every valid judgement already stored, ask the judges only where one failed or is
    missing (``jury rescore``)."""
    if spec.metric == JURY:
        jury_items = [JuryItem(instance, output, error) for instance, output, error in items]
        return jury_scores(store, config, spec, jury_items, scope=scope,
                           concurrency=jury_concurrency or DEFAULT_JURY_CONCURRENCY, only_failed=only_failed,
                           stats=jury_stats, egress=egress)
    return score_outputs(spec, items)


def score_benchmark(store: Store, run_id: str, benchmark: str, *, config: ApplianceConfig | None = None,
                    jury_concurrency: int | None = None, only_failed: bool = False,
                    jury_stats: JuryStats | None = None, egress: EgressPolicy | None = None
                    ) -> list[InstanceScore]:
    """Score one benchmark of a run. ``config`` gives the jury's judge models for open-ended benchmarks;
    ``egress`` the caller's policy for reaching them (``AppContext.egress``: a refusal is audited).

    The spec is the one the run used (its prompt style applied: MedHELM parity answers and judge prompt)."""
    run = store.get_run(run_id)
    spec = spec_for_run(benchmark, run.manifest if run is not None else None)
    if spec.metric != JURY and get_metric(spec.metric) is None:
        raise MetricNotAvailable(f"benchmark {benchmark}: metric {spec.metric!r} is not available")
    responses = list(store.responses(run_id, benchmark))
    by_dataset: dict[str, list[str]] = defaultdict(list)
    fingerprints = dict(store.run_item_fingerprints(run_id, benchmark))
    for row in responses:
        by_dataset[fingerprints[row.instance_id]].append(row.instance_id)
    instances: dict[str, Instance] = {}
    for fingerprint, ids in by_dataset.items():
        instances.update(store.get_instances(benchmark, fingerprint, ids))
    items = [(instances[row.instance_id], row.output, row.error) for row in responses]
    scores = score_items(store, spec, items, scope=run_id, config=config, jury_concurrency=jury_concurrency,
                         only_failed=only_failed, jury_stats=jury_stats)
    store.replace_scores(run_id, benchmark, scores)
    return scores
