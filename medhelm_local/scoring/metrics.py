"""The metric registry: ``spec.metric`` names a function scoring one instance's output, and how a benchmark's
instance results combine into its score.

A metric function returns ``(value, details)``. ``value`` is in [0, 1]. ``details`` uses these keys, all
optional, and never holds dataset or model text (only labels, numbers, flags):

- ``parsed`` (bool): an answer could be read from the output at all;
- ``strict_format`` (bool): the output was nothing but the answer, as the prompt asked;
- ``group`` (str): a breakdown group (MedCalc-Bench calculator category);
- ``sub`` ({name: float | None}): secondary per-instance metrics (MEDEC error-sentence accuracy);
- ``counts`` ({"tp", "fp", "fn"}): for micro-averaged metrics.

A wrong or unreadable answer is a 0, not a failure: failures (no response) are only those of the request.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import MedhelmError
from medhelm_local.records import Instance
from medhelm_local.scoring.extract import answer_text, extract_label

MetricFn = Callable[[BenchmarkSpec, Instance, str], tuple[float, dict[str, Any]]]


class Aggregation(StrEnum):
    MEAN = "mean"  # mean of the instance values
    MICRO_F1 = "micro_f1"  # 2 TP / (2 TP + FP + FN) over the summed instance counts


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
class Metric:
    name: str
    fn: MetricFn
    aggregation: Aggregation = Aggregation.MEAN


_METRICS: dict[str, Metric] = {}

# Metric names that are not instance functions: the engine runs them itself.
JURY = "jury"
ROUGE_L = "rouge_l"


def register_metric(name: str, aggregation: Aggregation = Aggregation.MEAN) -> Callable[[MetricFn], MetricFn]:
    def decorate(fn: MetricFn) -> MetricFn:
        _METRICS[name] = Metric(name, fn, aggregation)
        return fn

    return decorate


def _ensure_loaded() -> None:
    # Metric modules register themselves on import.
    from medhelm_local.scoring import billing, ehrsql, medcalc, medec  # noqa: F401


def get_metric(name: str) -> MetricFn | None:
    """The instance function of a metric (None for unknown names and for the jury, which the engine runs)."""
    _ensure_loaded()
    metric = _METRICS.get(name)
    return metric.fn if metric else None


def metric_aggregation(name: str) -> Aggregation:
    _ensure_loaded()
    metric = _METRICS.get(name)
    return metric.aggregation if metric else Aggregation.MEAN


def known_metrics() -> list[str]:
    _ensure_loaded()
    return sorted([*_METRICS, JURY])


def require_meta(spec: BenchmarkSpec, instance: Instance, key: str, expected: str) -> Any:
    value = instance.meta.get(key)
    if value is None:
        raise MetricInputError(
            f"benchmark {spec.id}: an instance has no meta {key!r} (expected {expected}); "
            "re-register the dataset with the current loader"
        )
    return value


def gold_label(spec: BenchmarkSpec, instance: Instance) -> str:
    gold = instance.label if instance.label is not None else next(iter(instance.references), None)
    if gold is None:
        raise MetricInputError(f"benchmark {spec.id}: an instance has neither a label nor a reference")
    return gold


def _normalise_text(text: str) -> str:
    return " ".join(text.split()).strip().lower()


@register_metric("exact_match")
def exact_match(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, dict[str, Any]]:
    """Closed answers: the extracted label equals the gold label. Free answers: normalised string equality
    (whitespace and case folded, reasoning blocks dropped) with any reference."""
    if spec.labels:
        predicted, strict = extract_label(output, spec.answer_labels or spec.labels)
        if predicted is not None and spec.answer_labels:  # e.g. MedHELM parity: "A" answers "yes"
            predicted = spec.labels[spec.answer_labels.index(predicted)]
        gold = gold_label(spec, instance)
        return float(predicted is not None and predicted == gold), {"parsed": predicted is not None,
                                                                     "strict_format": strict}
    text = _normalise_text(answer_text(output))
    hit = any(text == _normalise_text(ref) for ref in instance.references)
    return float(hit), {"parsed": bool(text), "strict_format": hit}


def f1_counts(predicted: set[str], gold: set[str]) -> tuple[float, dict[str, Any]]:
    tp = len(predicted & gold)
    fp = len(predicted - gold)
    fn = len(gold - predicted)
    denominator = 2 * tp + fp + fn
    value = 1.0 if denominator == 0 else 2 * tp / denominator
    return value, {"counts": {"tp": tp, "fp": fp, "fn": fn}}


_LIST_SPLIT = re.compile(r"[,;\n]+")


@register_metric("micro_f1", Aggregation.MICRO_F1)
def micro_f1(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, dict[str, Any]]:
    """Multi-label output: items separated by commas, semicolons or lines, compared case-insensitively with the
    references (the gold label set). The benchmark score is micro-F1 over all instances."""
    text = answer_text(output)
    items = {_normalise_text(part).strip(" .*-") for part in _LIST_SPLIT.split(text)}
    items.discard("")
    if spec.labels:
        by_lower = {label.lower(): label.lower() for label in spec.labels}
        strict = all(item in by_lower for item in items)
    else:
        strict = True
    gold = {_normalise_text(ref) for ref in instance.references}
    value, details = f1_counts(items, gold)
    return value, {**details, "parsed": bool(items), "strict_format": strict and bool(items)}
