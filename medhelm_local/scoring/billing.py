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

import importlib.util
import re
from functools import cache
from pathlib import Path

from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.errors import MedhelmError
from medhelm_local.records import Instance
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import answer_text
from medhelm_local.scoring.metrics import Aggregation, MetricInputError, f1_counts
from medhelm_local.scoring.registry import instance_scorer
from medhelm_local.scoring.scorer import REFERENCES, Needs

# ICD-10-CM: a letter, two characters (digit + digit/letter), then up to four more, the dot optional.
_ICD10 = re.compile(r"(?<![A-Za-z0-9])([A-Za-z]\d[0-9A-Za-z])(?:\.?([0-9A-Za-z]{1,4}))?(?![A-Za-z0-9])")
_STRICT_LIST = re.compile(r"\s*[A-Z]\d[0-9A-Z](?:\.?[0-9A-Z]{1,4})?(?:\s*,\s*[A-Z]\d[0-9A-Z](?:\.?[0-9A-Z]{1,4})?)*\s*")


_CODE_SHAPE = re.compile(r"[A-Z]\d[0-9A-Z]{1,5}")


def normalise_code(code: str) -> str:
    return re.sub(r"[\s.]", "", code).upper()


@cache
def _code_set() -> tuple[frozenset[str], frozenset[str]]:
    """(every ICD-10-CM code, the codes that have longer codes under them), dotless, from the code list that
    ``simple-icd-10-cm`` ships. Read as a file, without importing the package (whose import parses the whole
    tabular XML: 2 s and 180 MB, against 0.2 s and a few MB for the list)."""
    spec = importlib.util.find_spec("simple_icd_10_cm")
    lists = sorted(Path(spec.submodule_search_locations[0]).glob("data/code-list-*.txt")) if (
        spec and spec.submodule_search_locations) else []
    if not lists:
        raise MedhelmError("the ICD-10-CM code list of the simple-icd-10-cm package is missing; reinstall the "
                           "appliance (pyproject.toml pins it)")
    lines = lists[-1].read_text(encoding="utf-8").splitlines()
    tokens = (line.split(" ")[0].replace(".", "").strip().upper() for line in lines)
    codes = frozenset(token for token in tokens if _CODE_SHAPE.fullmatch(token))  # not chapters or block ranges
    parents = frozenset(code[:end] for code in codes for end in range(3, len(code)))
    return codes, parents & codes


def is_billable(code: str) -> bool:
    """``code`` (dotless or dotted) is a billable ICD-10-CM code: in the code set, and a leaf of it."""
    codes, parents = _code_set()
    code = normalise_code(code)
    return code in codes and code not in parents


def is_code(code: str) -> bool:
    """What an output names as a code: a billable code, or a subcategory of the code set (a truncated code such
    as "S72.001", a wrong answer that counts as one). Three-character categories that are not billable ("N95",
    "E11") are left out: in text they are as often words, units or device names as codes."""
    code = normalise_code(code)
    return is_billable(code) or (len(code) > 3 and code in _code_set()[0])


def candidate_codes(output: str) -> set[str]:
    """Every code-shaped token of an output (letter, digit, alphanumeric, up to four more), normalised."""
    text = answer_text(output)
    return {normalise_code(m.group(1) + (m.group(2) or "")) for m in _ICD10.finditer(text)}


def extract_codes(output: str, gold: set[str] | None = None) -> set[str]:
    """The ICD-10-CM codes an output names: code-shaped tokens that are codes (:func:`is_code`) or gold codes."""
    return {code for code in candidate_codes(output) if (gold is not None and code in gold) or is_code(code)}


@instance_scorer("billing_micro_f1", Aggregation.MICRO_F1,
                 needs=Needs(answers=(OutputType.CODE_LIST,), fields=((REFERENCES,),)))
def billing_micro_f1(spec: BenchmarkSpec, instance: Instance, output: str) -> tuple[float, ScoreDetails]:
    gold = {normalise_code(code) for code in instance.references if code.strip()}
    if not gold:
        raise MetricInputError(f"benchmark {spec.id}: an instance has no billed codes (references)")
    predicted = extract_codes(output, gold)
    value, counts = f1_counts(predicted, gold)
    strict = _STRICT_LIST.fullmatch(answer_text(output)) is not None
    return value, ScoreDetails(counts=counts, parsed=bool(predicted), strict_format=strict)
