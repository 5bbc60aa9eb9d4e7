"""Score a run: each response becomes an :class:`InstanceScore`; failures stay failures (value None)."""

from __future__ import annotations

from collections import defaultdict

from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.records import InstanceScore
from medhelm_local.scoring.metrics import get_metric
from medhelm_local.store.store import Store


class MetricNotAvailable(MedhelmError):
    """The benchmark's metric is not implemented in this version."""


def score_benchmark(store: Store, run_id: str, benchmark: str, *, config: ApplianceConfig | None = None
                    ) -> list[InstanceScore]:
    """Score one benchmark of a run. ``config`` gives the jury's judge models for open-ended benchmarks."""
    spec = get_spec(benchmark)
    metric = get_metric(spec.metric)
    if metric is None:
        raise MetricNotAvailable(f"benchmark {benchmark}: metric {spec.metric!r} is not available yet")
    responses = list(store.responses(run_id, benchmark))
    by_dataset: dict[str, list[str]] = defaultdict(list)
    fingerprints = {iid: fp for iid, fp in store.run_item_fingerprints(run_id, benchmark)}
    for row in responses:
        by_dataset[fingerprints[row.instance_id]].append(row.instance_id)
    instances = {}
    for fingerprint, ids in by_dataset.items():
        instances.update(store.get_instances(benchmark, fingerprint, ids))
    scores = []
    for row in responses:
        if row.output is None:
            scores.append(InstanceScore(benchmark=benchmark, instance_id=row.instance_id, metric=spec.metric,
                                        value=None, details={"error": row.error}))
            continue
        value, details = metric(spec, instances[row.instance_id], row.output)
        scores.append(InstanceScore(benchmark=benchmark, instance_id=row.instance_id, metric=spec.metric,
                                    value=value, details=details))
    store.replace_scores(run_id, benchmark, scores)
    return scores
