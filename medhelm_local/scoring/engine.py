"""Score a run: each response becomes :class:`InstanceScore` rows; failures stay failures (value None).

One engine for every benchmark: the spec's ``metrics:`` name scorers of the registry (``scoring/registry.py``),
each run once over the benchmark's items (the jury among them: it needs the appliance config's judges).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.prompts.styles import spec_for_run
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.scoring.jury import JURY, JuryStats
from medhelm_local.scoring.registry import MetricNotAvailable, spec_scorers
from medhelm_local.scoring.scorer import InstanceScorer, Item, ScoringContext, run_sync
from medhelm_local.store.store import Store

__all__ = ["MetricNotAvailable", "ScoreAsAnswered", "score_benchmark", "score_items", "score_items_async",
           "score_outputs"]


async def score_items_async(spec: BenchmarkSpec, items: Iterable[tuple[Instance, str | None, str | None]],
                            context: ScoringContext) -> list[InstanceScore]:
    """Every metric of ``spec`` on ``(instance, output, error)`` triples: the rows of each item together, in the
    order of the items (main metric first)."""
    scorers = spec_scorers(spec)  # MetricNotAvailable before anything is scored
    batch = [Item(instance, output, error) for instance, output, error in items]
    position = {item.instance.id: n for n, item in enumerate(batch)}
    rows: list[InstanceScore] = []
    for scorer, roles in scorers:
        rows += await scorer.score(spec, batch, context, roles)
    return sorted(rows, key=lambda row: position[row.instance_id])  # stable: scorer order kept within an item


def score_outputs(spec: BenchmarkSpec, items: Iterable[tuple[Instance, str | None, str | None]]
                  ) -> list[InstanceScore]:
    """Score ``(instance, output, error)`` triples with metrics that need no store or models (not the jury)."""
    return run_sync(score_items_async(spec, items, ScoringContext()))


def score_items(store: Store, spec: BenchmarkSpec, items: list[tuple[Instance, str | None, str | None]], *,
                scope: str, config: ApplianceConfig | None, jury_concurrency: int | None = None,
                only_failed: bool = False, jury_stats: JuryStats | None = None,
                egress: EgressPolicy | None = None) -> list[InstanceScore]:
    """Score items of one benchmark; model judgements are recorded under ``scope`` (a run id).
    ``only_failed``: keep every valid judgement already stored, ask the judges only where one failed or is
    missing (``jury rescore``); ``jury_stats`` receives the jury's counts of this pass."""
    context = ScoringContext(store=store, config=config, scope=scope, concurrency=jury_concurrency,
                             only_failed=only_failed, egress=egress)
    if jury_stats is not None:
        context.reports[JURY] = jury_stats
    return run_sync(score_items_async(spec, items, context))


def score_benchmark(store: Store, specs: SpecRegistry, run_id: str, benchmark: str, *,
                    config: ApplianceConfig | None = None,
                    jury_concurrency: int | None = None, only_failed: bool = False,
                    jury_stats: JuryStats | None = None, egress: EgressPolicy | None = None
                    ) -> list[InstanceScore]:
    """Score one benchmark of a run. ``config`` gives the jury's judge models for open-ended benchmarks;
    ``egress`` the caller's policy for reaching them (``AppContext.egress``: a refusal is audited).

    The spec is the one the run used (its prompt style applied: MedHELM parity answers and judge prompt)."""
    run = store.get_run(run_id)
    spec = spec_for_run(benchmark, run.manifest if run is not None else None, specs)
    spec_scorers(spec)  # an unknown metric fails before the responses are read
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
                         only_failed=only_failed, jury_stats=jury_stats, egress=egress)
    store.replace_scores(run_id, benchmark, scores)
    return scores


class ScoreAsAnswered:
    """Scores a new run's answers as they arrive (each committed with its answer, in one transaction), for the
    benchmarks whose every metric is a quick function of one instance's output (``InstanceScorer.as_answered``: no
    judges, no store, no database, microseconds): the run's last step then only checks and aggregates them.

    The rows are the ones :func:`score_benchmark` writes for the same items (the same scorers, in the same order,
    on the run's frozen spec). A scorer that raises stops this for its benchmark: the run's last step scores it
    whole, as for a benchmark with a jury, and reports the error there."""

    def __init__(self, specs: Mapping[str, BenchmarkSpec]) -> None:
        self._specs = dict(specs)
        self._scorers: dict[str, list[tuple[InstanceScorer, bool]]] = {}
        for benchmark, spec in specs.items():
            scorers = spec_scorers(spec)
            quick = [(scorer, roles.get(scorer.name, False)) for scorer, roles in scorers
                     if isinstance(scorer, InstanceScorer) and scorer.as_answered]
            if len(quick) == len(scorers):
                self._scorers[benchmark] = quick
        self._scored: Counter[str] = Counter()
        self._stopped: set[str] = set()

    def rows(self, benchmark: str, instance: Instance, output: str | None, error: str | None
             ) -> list[InstanceScore]:
        """The score rows of one answered (or failed) item; none where its benchmark is scored at the end."""
        scorers = self._scorers.get(benchmark)
        if scorers is None or benchmark in self._stopped:
            return []
        spec, item = self._specs[benchmark], Item(instance, output, error)
        try:
            rows = [row for scorer, main in scorers for row in scorer.score_now(spec, [item], main=main)]
        except Exception:  # the last step scores the benchmark again, and raises this there
            self._stopped.add(benchmark)
            return []
        self._scored[benchmark] += 1
        return rows

    def scored(self) -> dict[str, int]:
        """Items scored as answered, per benchmark still scored this way."""
        return {b: n for b, n in self._scored.items() if b not in self._stopped}
