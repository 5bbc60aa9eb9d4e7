"""MIMIC-IV billing codes: micro-F1 over full ICD-10-CM codes, 7th-character suffixes included.

Codes are compared in MIMIC's dotless upper-case form (``S72.001A`` == ``s72001a``); nothing is truncated, so
``S72001A`` and ``S72001D`` (initial vs subsequent encounter) are different codes. The benchmark score is
micro-F1 over the summed true/false positives and false negatives of all instances; each instance's own F1 is
its value.

Expected instance data: ``references`` = the billed codes (any of the forms above).
"""

from __future__ import annotations

import re
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.records import Instance
from medhelm_local.scoring.extract import answer_text
from medhelm_local.scoring.metrics import Aggregation, MetricInputError, f1_counts, register_metric

# ICD-10-CM: a letter, two characters (digit + digit/letter), then up to four more, the dot optional.
_ICD10 = re.compile(r"(?<![A-Za-z0-9])([A-Za-z]\d[0-9A-Za-z])(?:\.?([0-9A-Za-z]{1,4}))?(?![A-Za-z0-9])")
_STRICT_LIST = re.compile(r"\s*[A-Z]\d[0-9A-Z](?:\.?[0-9A-Z]{1,4})?(?:\s*,\s*[A-Z]\d[0-9A-Z](?:\.?[0-9A-Z]{1,4})?)*\s*")


def normalise_code(code: str) -> str:
    return re.sub(r"[\s.]", "", code).upper()


def extract_codes(output: str) -> set[str]:
    text = answer_text(output)
    return {normalise_code(m.group(1) + (m.group(2) or "")) for m in _ICD10.finditer(text)}


@register_metric("billing_micro_f1", Aggregation.MICRO_F1)
def billing_micro_f1(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, dict[str, Any]]:
    gold = {normalise_code(code) for code in instance.references if code.strip()}
    if not gold:
        raise MetricInputError(f"benchmark {spec.id}: an instance has no billed codes (references)")
    predicted = extract_codes(output)
    value, details = f1_counts(predicted, gold)
    strict = _STRICT_LIST.fullmatch(answer_text(output)) is not None
    return value, {**details, "parsed": bool(predicted), "strict_format": strict}
