"""The general metrics (exact match, micro-F1) and the helpers every instance metric shares.

Each metric is a function ``(spec, instance, output) -> (value, details)`` registered as a scorer with
:func:`~medhelm_local.scoring.registry.instance_scorer`; ``value`` is in [0, 1] and ``details`` a typed
:class:`~medhelm_local.scoring.details.ScoreDetails` (labels, numbers, flags: never dataset or model text). A wrong
or unreadable answer is a 0, not a failure: failures (no response) are only those of the request, or an instance
that cannot be scored (:class:`Unscorable`). ROUGE-L is a scorer too (``scoring/rouge.py``), the jury another
(``scoring/jury.py``).
"""

from __future__ import annotations

import re
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.records import Instance
from medhelm_local.scoring.details import Counts, ScoreDetails
from medhelm_local.scoring.extract import answer_text, extract_label
from medhelm_local.scoring.registry import instance_scorer, known_metrics, metric_aggregation
from medhelm_local.scoring.scorer import LABEL, REFERENCES, Aggregation, MetricInputError, Needs, Unscorable

# Re-exported: where earlier versions had them (analysis and export import them from here).
__all__ = ["Aggregation", "MetricInputError", "Unscorable", "exact_match", "f1_counts", "gold_label",
           "known_metrics", "metric_aggregation", "micro_f1", "require_meta"]


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


# Answers that are one of a fixed set of labels: exact match reads the model's choice by the spec's labels.
CHOICE_ANSWERS = (OutputType.CHOICE_LETTER, OutputType.YES_NO_MAYBE)


def _exact_match_needs(spec: BenchmarkSpec) -> Needs:
    return Needs(spec_fields=("labels",) if spec.output_type in CHOICE_ANSWERS else (),
                 fields=((LABEL, REFERENCES),) if spec.labels else ((REFERENCES,),))


@instance_scorer("exact_match", needs=_exact_match_needs, as_answered=True)
def exact_match(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, ScoreDetails]:
    """Closed answers: the extracted label equals the gold label. Free answers: normalised string equality
    (whitespace and case folded, reasoning blocks dropped) with any reference."""
    if spec.labels:
        predicted, strict = extract_label(output, spec.answer_labels or spec.labels)
        if predicted is not None and spec.answer_labels:  # e.g. MedHELM parity: "A" answers "yes"
            predicted = spec.labels[spec.answer_labels.index(predicted)]
        gold = gold_label(spec, instance)
        return float(predicted is not None and predicted == gold), ScoreDetails(parsed=predicted is not None,
                                                                                strict_format=strict)
    text = _normalise_text(answer_text(output))
    hit = any(text == _normalise_text(ref) for ref in instance.references)
    return float(hit), ScoreDetails(parsed=bool(text), strict_format=hit)


def f1_counts(predicted: set[str], gold: set[str]) -> tuple[float, Counts]:
    """An instance's F1 and its true/false positives and false negatives."""
    counts = Counts(tp=len(predicted & gold), fp=len(predicted - gold), fn=len(gold - predicted))
    denominator = 2 * counts.tp + counts.fp + counts.fn
    return (1.0 if denominator == 0 else 2 * counts.tp / denominator), counts


_LIST_SPLIT = re.compile(r"[,;\n]+")


@instance_scorer("micro_f1", Aggregation.MICRO_F1, needs=Needs(fields=((REFERENCES,),)), as_answered=True)
def micro_f1(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, ScoreDetails]:
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
    value, counts = f1_counts(items, gold)
    return value, ScoreDetails(counts=counts, parsed=bool(items), strict_format=strict and bool(items))
