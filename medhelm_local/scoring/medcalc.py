"""MedCalc-Bench accuracy, right for every calculator category.

- ``risk``, ``severity``, ``diagnosis`` (integer scores and criteria counts): the number must equal the gold value;
  a percentage in the answer is what the score means (a risk), never the score, so it is not read;
- ``lab``, ``physical``, ``dosage`` (computed quantities): the number must lie within the dataset's
  ``[Lower Limit, Upper Limit]`` (inclusive);
- ``date`` with a date answer (due date, conception date): the date must lie within the limits (equal to the
  gold date in the public data);
- ``date`` with a gestational-age answer ``('4 weeks', '3 days')``: the ``(weeks, days)`` must equal the gold
  one, compared as a duration (``(1, 0)`` equals ``(0, 7)``).

Expected instance data (set by the ``medcalc_bench`` spec's loader): ``references[0]`` = the ground-truth
answer as text; ``meta.category``; ``meta.lower_limit`` / ``meta.upper_limit`` (numbers, or the same text as
the answer for dates); ``meta.output_type`` optional.
"""

from __future__ import annotations

from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.records import Instance
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import (
    extract_date,
    extract_number,
    extract_weeks_days,
    parse_date,
    parse_weeks_days,
)
from medhelm_local.scoring.metrics import MetricInputError, require_meta
from medhelm_local.scoring.registry import instance_scorer
from medhelm_local.scoring.scorer import REFERENCES, Needs, meta_field

EXACT_CATEGORIES = frozenset({"risk", "severity", "diagnosis"})
RANGE_CATEGORIES = frozenset({"lab", "physical", "dosage", "dosage conversion"})
DATE_CATEGORY = "date"
TOLERANCE = 1e-6


def _number(spec: BenchmarkSpec, value: Any, what: str) -> float:
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        raise MetricInputError(f"benchmark {spec.id}: {what} of an instance is not a number") from None


def _gold_text(spec: BenchmarkSpec, instance: Instance) -> str:
    if not instance.references:
        raise MetricInputError(f"benchmark {spec.id}: an instance has no ground-truth answer (references)")
    return instance.references[0].strip()


NEEDS = Needs(answers=(OutputType.NUMBER_OR_DATE,),
              fields=((REFERENCES,), (meta_field("category"),), (meta_field("lower_limit"),),
                      (meta_field("upper_limit"),)))


@instance_scorer("medcalc_accuracy", needs=NEEDS, as_answered=True)
def medcalc_accuracy(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, ScoreDetails]:
    category = str(require_meta(spec, instance, "category", "the calculator category")).strip().lower()
    gold = _gold_text(spec, instance)
    if category in EXACT_CATEGORIES:
        number = extract_number(output, percentages=False)
        target = _number(spec, gold, "the ground-truth answer")
        correct = number.value is not None and abs(number.value - target) <= TOLERANCE
        return float(correct), ScoreDetails(group=category, parsed=number.parsed, strict_format=number.strict)
    if category in RANGE_CATEGORIES:
        lower = _number(spec, require_meta(spec, instance, "lower_limit", "the lower limit"), "the lower limit")
        upper = _number(spec, require_meta(spec, instance, "upper_limit", "the upper limit"), "the upper limit")
        number = extract_number(output)
        correct = number.value is not None and lower - TOLERANCE <= number.value <= upper + TOLERANCE
        return float(correct), ScoreDetails(group=category, parsed=number.parsed, strict_format=number.strict)
    if category == DATE_CATEGORY:
        gold_date = parse_date(gold)
        if gold_date is not None:
            lower_date = parse_date(str(instance.meta.get("lower_limit") or gold)) or gold_date
            upper_date = parse_date(str(instance.meta.get("upper_limit") or gold)) or gold_date
            found = extract_date(output)
            correct = found.value is not None and lower_date <= found.value <= upper_date
            return float(correct), ScoreDetails(group=category, parsed=found.parsed, strict_format=found.strict)
        gold_age = parse_weeks_days(gold)
        if gold_age is None:
            raise MetricInputError(
                f"benchmark {spec.id}: a date-category answer is neither a date nor a (weeks, days) pair")
        age = extract_weeks_days(output)
        correct = age.value is not None and 7 * age.value[0] + age.value[1] == 7 * gold_age[0] + gold_age[1]
        return float(correct), ScoreDetails(group="gestational age", parsed=age.parsed, strict_format=age.strict)
    raise MetricInputError(
        f"benchmark {spec.id}: an instance has an unknown calculator category in meta 'category' (expected one of "
        f"{', '.join(sorted(EXACT_CATEGORIES | RANGE_CATEGORIES | {DATE_CATEGORY}))})"
    )
