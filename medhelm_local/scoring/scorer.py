"""Scoring's one abstraction: a :class:`Scorer` turns a benchmark's answered (or failed) items into named
per-instance values, in the spirit of inspect_ai's ``@scorer(metrics=[...])``.

- a scorer emits one or several named values (:class:`Metric`: a name and how a benchmark's values combine);
  a spec's ``metrics:`` list names the values it reports, one of them ``main`` (the benchmark's score);
- its :meth:`Scorer.score` is async: it may call models (the LLM jury, ``scoring/jury.py``, is a scorer);
- it declares what it needs of a benchmark (:meth:`Scorer.needs`): the kind of answer it reads (the spec's
  ``output_type``), the spec fields and the instance fields it reads, so that a spec it cannot score is refused
  when it is registered and before any inference (``scoring/checks.py``);
- its details are a typed model (:class:`~medhelm_local.scoring.details.ScoreDetails` or a subclass).

Most metrics score one instance at a time, without models: :class:`InstanceScorer` wraps such a function
``(spec, instance, output) -> (value, details)``; ``registry.instance_scorer`` registers one.

Rows: the main metric has one row per item (value None, with ``details.error``, where the request failed or the
instance could not be scored: excluded and counted, never scored 0 or 1); a secondary metric has a row only where
it has a value (its failures are the main metric's).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.errors import MedhelmError
from medhelm_local.records import LABEL as LABEL  # an instance field a scorer reads: "label", "references" or
from medhelm_local.records import REFERENCES as REFERENCES  # "meta.<key>" (re-exported for the scorers)
from medhelm_local.records import Instance, InstanceScore
from medhelm_local.records import meta_field as meta_field
from medhelm_local.scoring.details import ScoreDetails

if TYPE_CHECKING:
    from medhelm_local.home.config import ApplianceConfig
    from medhelm_local.inference.egress import EgressPolicy
    from medhelm_local.store.store import Store

T = TypeVar("T")


class Aggregation(StrEnum):
    MEAN = "mean"  # mean of the instance values
    MICRO_F1 = "micro_f1"  # 2 TP / (2 TP + FP + FN) over the summed instance counts


@dataclass(frozen=True)
class Metric:
    """A named per-instance value a scorer emits, and how a benchmark's values of it combine into a score."""

    name: str
    aggregation: Aggregation = Aggregation.MEAN


class Needs(BaseModel):
    """What a scorer needs of a benchmark. ``answers``: the output types whose answers it can read (empty: any; the
    jury rates written answers, not a letter); ``spec_fields``: spec fields it reads that must be given (``labels``:
    the answer labels a choice is read by); ``fields``: the instance fields it reads, each entry listing
    alternatives one of which every instance must carry (``("label", "references")``: a gold label or a
    reference). What else it needs (the jury: a rubric, judges) its :meth:`Scorer.check` checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answers: tuple[OutputType, ...] = ()
    spec_fields: tuple[str, ...] = ()
    fields: tuple[tuple[str, ...], ...] = ()


class MetricInputError(MedhelmError):
    """An instance lacks what its metric needs (a loader/spec mismatch). Names the benchmark and meta key only."""


class Unscorable(Exception):
    """This instance cannot be scored (e.g. its gold SQL does not run): recorded as a failure, never a 0 or 1.

    ``category`` is a short safe code stored in the score's details and counted in reports.
    """

    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


@dataclass(frozen=True)
class Item:
    """One item to score: the model's output, or None and the request's error category."""

    instance: Instance
    output: str | None
    error: str | None = None


@dataclass
class ScoringContext:
    """What scorers that call models or keep records need; instance scorers ignore it.

    ``scope``: where model judgements are recorded (a run id, or ``predictions:<sha256>``); ``concurrency``:
    requests in flight per model; ``only_failed``: keep every valid judgement already stored, ask again only where
    one failed or is missing; ``reports``: what a scorer reports of its pass, by scorer name (the jury's
    :class:`~medhelm_local.scoring.jury.JuryStats`); ``egress``: the caller's policy for reaching models
    (``AppContext.egress``: a refused judge is audited; None: the config's allowlist, a refusal unaudited)."""

    store: Store | None = None
    config: ApplianceConfig | None = None
    scope: str = ""
    concurrency: int | None = None
    only_failed: bool = False
    reports: dict[str, Any] = field(default_factory=dict)
    egress: EgressPolicy | None = None


class Scorer(ABC):
    """Scores a benchmark's items; see the module docstring. Subclasses set ``name`` and ``metrics``."""

    name: str
    metrics: tuple[Metric, ...]
    details_model: type[ScoreDetails] = ScoreDetails
    calls_models: bool = False  # it asks models (judges): their failure rates are reported beside its score

    def needs(self, spec: BenchmarkSpec) -> Needs:
        return Needs()

    def check(self, spec: BenchmarkSpec, config: ApplianceConfig | None, *, judges: bool) -> None:
        """Raise if ``spec`` cannot be scored by this scorer (``judges``: also check the configured judges).
        Called when a spec is loaded and when a run is planned, before any inference."""
        return None

    @abstractmethod
    async def score(self, spec: BenchmarkSpec, items: Sequence[Item], context: ScoringContext,
                    roles: Mapping[str, bool]) -> list[InstanceScore]:
        """Rows for the metrics in ``roles`` (metric name -> is the spec's main metric)."""

    def secondary(self, details: ScoreDetails) -> dict[str, float]:
        """Per-instance values reported beside the score, read from one scored instance's details."""
        return sub_values(details)


def sub_values(details: ScoreDetails) -> dict[str, float]:
    """The secondary per-instance values of ``details.sub`` that are defined."""
    return {name: float(value) for name, value in (details.sub or {}).items() if value is not None}


InstanceFn = Callable[[BenchmarkSpec, Instance, str], tuple[float | None, ScoreDetails]]


class InstanceScorer(Scorer):
    """A scorer of one metric from a function of one instance's output, ``(spec, instance, output) -> (value,
    details)``. A wrong or unreadable answer is a 0, not a failure; ``value`` None means the metric is not defined
    for the instance (ROUGE-L without a reference); :class:`Unscorable` makes it a recorded failure."""

    def __init__(self, name: str, fn: InstanceFn, *, aggregation: Aggregation = Aggregation.MEAN,
                 needs: Needs | Callable[[BenchmarkSpec], Needs] | None = None,
                 details_model: type[ScoreDetails] = ScoreDetails, as_answered: bool = False) -> None:
        self.name = name
        self.fn = fn
        # ``fn`` takes microseconds and no I/O: a new run scores each answer with it as the answer arrives, in the
        # runner's event loop (``scoring.engine.ScoreAsAnswered``). Not for a scorer that queries a database
        # (EHRSQL: up to seconds per query), loads data on first use, or takes milliseconds (ROUGE on long notes):
        # those score at the end of the run.
        self.as_answered = as_answered
        self.metrics = (Metric(name, aggregation),)
        self.details_model = details_model
        self._needs = needs if needs is not None else Needs()

    def needs(self, spec: BenchmarkSpec) -> Needs:
        return self._needs(spec) if callable(self._needs) else self._needs

    async def score(self, spec: BenchmarkSpec, items: Sequence[Item], context: ScoringContext,
                    roles: Mapping[str, bool]) -> list[InstanceScore]:
        return self.score_now(spec, items, main=roles.get(self.name, False))

    def score_now(self, spec: BenchmarkSpec, items: Sequence[Item], *, main: bool) -> list[InstanceScore]:
        rows = []
        for item in items:
            if item.output is None:
                if main:
                    rows.append(self._row(spec, item, None, ScoreDetails(error=item.error or "no_response")))
                continue
            try:
                value, details = self.fn(spec, item.instance, item.output)
            except Unscorable as unscorable:
                value, details = None, ScoreDetails(error=unscorable.category)
            if value is None and details.error is None:
                if not main:
                    continue
                details = ScoreDetails(error="not_applicable")
            rows.append(self._row(spec, item, value, details))
        return rows

    def _row(self, spec: BenchmarkSpec, item: Item, value: float | None, details: ScoreDetails) -> InstanceScore:
        return InstanceScore(benchmark=spec.id, instance_id=item.instance.id, metric=self.name, value=value,
                             details=details.stored())


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from synchronous code, inside or outside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
