"""The scorer registry: the one list of the metrics a spec may name (``metrics:``), each emitted by one scorer.

Scorer modules register themselves on import (``_SCORER_MODULES``); :func:`instance_scorer` registers a function of
one instance, :func:`register_scorer` any :class:`~medhelm_local.scoring.scorer.Scorer` (the jury).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import MedhelmError
from medhelm_local.home.config import ApplianceConfig, BackendKind
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.scorer import Aggregation, InstanceFn, InstanceScorer, Needs, Scorer, sub_values

_SCORER_MODULES = (
    "medhelm_local.scoring.metrics",
    "medhelm_local.scoring.medcalc",
    "medhelm_local.scoring.medec",
    "medhelm_local.scoring.ehrsql",
    "medhelm_local.scoring.billing",
    "medhelm_local.scoring.rouge",
    "medhelm_local.scoring.jury",
)
_SCORERS: dict[str, Scorer] = {}
_BY_METRIC: dict[str, Scorer] = {}


class MetricNotAvailable(MedhelmError):
    """A spec names a metric this version does not have."""


def register_scorer(scorer: Scorer) -> Scorer:
    for metric in scorer.metrics:
        other = _BY_METRIC.get(metric.name)
        if other is not None and other is not scorer and other.name != scorer.name:
            raise RuntimeError(f"metric {metric.name!r} is emitted by two scorers ({other.name}, {scorer.name})")
    _SCORERS[scorer.name] = scorer
    for metric in scorer.metrics:
        _BY_METRIC[metric.name] = scorer
    return scorer


def instance_scorer(name: str, aggregation: Aggregation = Aggregation.MEAN, *,
                    needs: Needs | Callable[[BenchmarkSpec], Needs] | None = None,
                    details: type[ScoreDetails] = ScoreDetails,
                    as_answered: bool = False) -> Callable[[InstanceFn], InstanceFn]:
    """Register ``fn(spec, instance, output) -> (value, details)`` as the scorer of metric ``name``
    (``as_answered``: see :class:`~medhelm_local.scoring.scorer.InstanceScorer`)."""

    def decorate(fn: InstanceFn) -> InstanceFn:
        register_scorer(InstanceScorer(name, fn, aggregation=aggregation, needs=needs, details_model=details,
                                       as_answered=as_answered))
        return fn

    return decorate


@functools.cache  # asked once per scored item: import_module, even of a loaded module, is not free
def _ensure_loaded() -> None:
    for module in _SCORER_MODULES:
        importlib.import_module(module)


def known_metrics() -> list[str]:
    """Every metric a spec may name."""
    _ensure_loaded()
    return sorted(_BY_METRIC)


def scorer_for(metric: str) -> Scorer | None:
    """The scorer that emits ``metric`` (None for an unknown name)."""
    _ensure_loaded()
    return _BY_METRIC.get(metric)


def require_scorer(spec: BenchmarkSpec, metric: str) -> Scorer:
    scorer = scorer_for(metric)
    if scorer is None:
        raise MetricNotAvailable(f"benchmark {spec.id}: metric {metric!r} is not available (one of "
                                 f"{', '.join(known_metrics())})")
    return scorer


def spec_scorers(spec: BenchmarkSpec) -> list[tuple[Scorer, dict[str, bool]]]:
    """The scorers of a spec's metrics, the main metric's first, each with its metrics' roles (name -> main)."""
    out: dict[str, tuple[Scorer, dict[str, bool]]] = {}
    for name in spec.metric_names:
        scorer = require_scorer(spec, name)
        out.setdefault(scorer.name, (scorer, {}))[1][name] = name == spec.metric
    return list(out.values())


def metric_aggregation(metric: str) -> Aggregation:
    scorer = scorer_for(metric)
    if scorer is None:
        return Aggregation.MEAN
    return next(m.aggregation for m in scorer.metrics if m.name == metric)


def read_details(metric: str, stored: dict[str, Any]) -> ScoreDetails:
    """Stored details (JSON) back into the typed model of the scorer that wrote them. A key the model does not know
    (written by another version) is left out: a store is read as it was written, never refused for it."""
    model = scorer.details_model if (scorer := scorer_for(metric)) is not None else ScoreDetails
    known = _field_names(model)
    if stored.keys() <= known:
        return model.model_validate(stored)
    return model.model_validate({k: v for k, v in stored.items() if k in known})


@functools.cache  # read_details runs once per stored score: pydantic's model_fields is a property, not a dict
def _field_names(model: type[ScoreDetails]) -> frozenset[str]:
    return frozenset(model.model_fields)


def secondary_values(metric: str, details: ScoreDetails) -> dict[str, float]:
    """What one scored instance of ``metric`` reports beside the score (MEDEC's error-sentence accuracy, the jury's
    per-criterion ratings)."""
    scorer = scorer_for(metric)
    return scorer.secondary(details) if scorer is not None else sub_values(details)


def calls_models(spec: BenchmarkSpec) -> bool:
    """Whether a spec's scorers ask models (judges), whose failure rates are then reported."""
    return any(scorer.calls_models for scorer, _ in spec_scorers(spec))


def networked_judges(config: ApplianceConfig, specs: Iterable[BenchmarkSpec]) -> list[str]:
    """The judges scoring ``specs`` asks over the network: none where no spec's scorers ask models, and never an
    embedded one (each process starts it on loopback)."""
    if not any(calls_models(spec) for spec in specs):
        return []
    return [judge for judge in config.judges if config.model(judge).kind != BackendKind.EMBEDDED]
