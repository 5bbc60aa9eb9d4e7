"""MIMIC-IV billing codes: micro-F1 over full ICD-10-CM codes, 7th-character suffixes included.

Codes are compared in MIMIC's dotless upper-case form (``S72.001A`` == ``s72001a``); nothing is truncated, so
``S72001A`` and ``S72001D`` (initial vs subsequent encounter) are different codes. The benchmark score is
micro-F1 over the summed true/false positives and false negatives of all instances; each instance's own F1 is
its value.

Candidates read from an output are validated against the ICD-10-CM code set (the April 2026 release shipped
offline in the PyPI package ``simple-icd-10-cm``, MIT): billable codes (leaves of the classification, 7th
characters included) and subcategories (a truncated "S72.001" is a wrong code) count, so "T2DM", "A1c", "q6h",
"B12" (no such codes) and "N95" (a three-character category, not a billable code; in a note, a respirator) are
not predictions. A candidate equal to a gold code always counts (MIMIC-IV bills under earlier releases, whose
codes a later release may have split).

Expected instance data: ``references`` = the billed codes (any of the forms above).
"""

from __future__ import annotations

import re
import warnings
from functools import cache
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


@cache
def _code_set() -> Any:
    with warnings.catch_warnings():  # the package reads its data with a deprecated importlib.resources call
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm as icd10cm  # parses the packaged classification once, on first use

        icd10cm.is_valid_item("A00")
    return icd10cm


@cache
def is_billable(code: str) -> bool:
    """``code`` (dotless or dotted) is a billable ICD-10-CM code: in the code set, and a leaf of it."""
    icd10cm = _code_set()
    return bool(icd10cm.is_valid_item(code) and icd10cm.is_leaf(code))


@cache
def is_code(code: str) -> bool:
    """What an output names as a code: a billable code, or a subcategory of the code set (a truncated code such
    as "S72.001", a wrong answer that counts as one). Three-character categories that are not billable ("N95",
    "E11") are left out: in text they are as often words, units or device names as codes."""
    if is_billable(code):
        return True
    return len(normalise_code(code)) > 3 and bool(_code_set().is_valid_item(code))


def candidate_codes(output: str) -> set[str]:
    """Every code-shaped token of an output (letter, digit, alphanumeric, up to four more), normalised."""
    text = answer_text(output)
    return {normalise_code(m.group(1) + (m.group(2) or "")) for m in _ICD10.finditer(text)}


def extract_codes(output: str, gold: set[str] | None = None) -> set[str]:
    """The ICD-10-CM codes an output names: code-shaped tokens that are codes (:func:`is_code`) or gold codes."""
    return {code for code in candidate_codes(output) if (gold is not None and code in gold) or is_code(code)}


@register_metric("billing_micro_f1", Aggregation.MICRO_F1)
def billing_micro_f1(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, dict[str, Any]]:
    gold = {normalise_code(code) for code in instance.references if code.strip()}
    if not gold:
        raise MetricInputError(f"benchmark {spec.id}: an instance has no billed codes (references)")
    predicted = extract_codes(output, gold)
    value, details = f1_counts(predicted, gold)
    strict = _STRICT_LIST.fullmatch(answer_text(output)) is not None
    return value, {**details, "parsed": bool(predicted), "strict_format": strict}
