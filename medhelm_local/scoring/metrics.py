"""The metric registry: ``spec.metric`` names a function scoring one instance's output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.records import Instance

MetricFn = Callable[[BenchmarkSpec, Instance, str], tuple[float, dict[str, Any]]]
_METRICS: dict[str, MetricFn] = {}


def register_metric(name: str) -> Callable[[MetricFn], MetricFn]:
    def decorate(fn: MetricFn) -> MetricFn:
        _METRICS[name] = fn
        return fn

    return decorate


def get_metric(name: str) -> MetricFn | None:
    return _METRICS.get(name)


@register_metric("exact_match")
def exact_match(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, dict[str, Any]]:
    """Closed answers: the extracted label equals the gold label. Free answers: normalised string equality."""
    from medhelm_local.scoring.extract import extract_label

    if spec.labels:
        predicted, strict = extract_label(output, spec.labels)
        gold = instance.label if instance.label is not None else next(iter(instance.references), None)
        return float(predicted is not None and predicted == gold), {"parsed": predicted is not None,
                                                                     "strict_format": strict}
    normalised = " ".join(output.split()).lower()
    hit = any(normalised == " ".join(ref.split()).lower() for ref in instance.references)
    return float(hit), {"parsed": True, "strict_format": hit}
