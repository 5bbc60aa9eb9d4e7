"""Jury validation against clinicians: the paper's Table 2 procedure (MedHELM 4.3.3).

Each rater's composite (mean of the criterion ratings) is z-scored within rater (over the instances that rater
scored in the validation set). Then:

- **jury vs clinicians**: ICC(3,k=2) between the clinicians' mean z-score and the jury's mean z-score (each judge
  z-scored on its own first) per instance;
- **ROUGE-L vs clinicians**: the same with the z-scored ROUGE-L of each response;
- **clinician vs clinician**: ICC(3,k=2) for every pair of clinicians with at least two instances in common,
  averaged over pairs.

95% CIs: percentile bootstrap over instances (jury, ROUGE-L) and over clinician pairs (the average). A rater who
gave the same composite to every instance cannot be z-scored and is excluded (and counted).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from medhelm_local.analysis.stats import DEFAULT_RESAMPLES, icc3k, icc3k_with_ci, mean_with_ci, zscore
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders.io import read_table_file
from medhelm_local.loaders.records import header_summary

INSTANCE_COLUMN = "instance_id"
RATER_COLUMN = "rater"
SCORE_COLUMN = "score"
BENCHMARK_COLUMN = "benchmark"


class ClinicianRatings(BaseModel):
    """rater -> instance id -> composite rating (mean of the criteria given)."""

    composites: dict[str, dict[str, float]]
    rows: int


class Agreement(BaseModel):
    icc: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int  # instances (or clinician pairs for the clinician-clinician average)


class ValidationResult(BaseModel):
    benchmark: str
    run_id: str
    n_instances: int
    n_clinicians: int
    excluded_raters: dict[str, str] = Field(default_factory=dict)  # rater -> why (constant ratings, one instance)
    jury: Agreement
    rouge_l: Agreement
    clinician_clinician: Agreement


def instance_key(benchmark: str, instance_id: str, *, combined: bool) -> str:
    """How an instance is named across the validation: its id, or ``benchmark/id`` when benchmarks are pooled."""
    return f"{benchmark}/{instance_id}" if combined else instance_id


def read_clinician_ratings(path: Path, specs: BenchmarkSpec | Sequence[BenchmarkSpec]) -> ClinicianRatings:
    """CSV columns: ``instance_id``, ``rater``, then either the rubric's criteria (e.g. ``accuracy``,
    ``completeness``, ``clarity``) or one ``score`` column; ratings are numbers from 1 to 5. With several
    benchmarks a ``benchmark`` column says which one each row rates (instance keys become ``benchmark/id``)."""
    spec_list = [specs] if isinstance(specs, BenchmarkSpec) else list(specs)
    by_id = {spec.id: spec for spec in spec_list}
    combined = len(spec_list) > 1
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    # The extracts' CSV reader: strict UTF-8 (or UTF-16 with its mark), a ';'-separated sheet named as such, and
    # each row numbered as a spreadsheet shows it, whatever blank lines or line breaks inside quotes come before it.
    ratings = read_table_file(path, "csv")
    header = ratings.header
    required = [INSTANCE_COLUMN, RATER_COLUMN, *([BENCHMARK_COLUMN] if combined else [])]
    for column in required:
        if column not in header:
            # A header-less file's "header" is its first rating row: name only the columns expected.
            known = [*required, SCORE_COLUMN, *(c.name for s in spec_list if s.judge for c in s.judge.criteria)]
            raise ExtractError(path, f"a column named {column!r} ({header_summary(header, known)})",
                               column=column)

    def rating_columns(spec: BenchmarkSpec) -> list[str]:
        criteria = [c.name for c in spec.judge.criteria] if spec.judge else []
        return [c for c in criteria if c in header] or ([SCORE_COLUMN] if SCORE_COLUMN in header else [])

    for spec in spec_list:
        if not rating_columns(spec):
            criteria = [c.name for c in spec.judge.criteria] if spec.judge else []
            raise ExtractError(path, f"rating columns for {spec.id} (any of: {', '.join([*criteria, SCORE_COLUMN])})")
    composites: dict[str, dict[str, float]] = defaultdict(dict)
    rows = 0
    for row, place in zip(ratings.rows, ratings.places, strict=True):
        if not any(v.strip() for v in row.values()):
            continue
        instance_id = (row.get(INSTANCE_COLUMN) or "").strip()
        rater = (row.get(RATER_COLUMN) or "").strip()
        if not instance_id:
            raise ExtractError(path, "a non-empty instance id", place=place, column=INSTANCE_COLUMN)
        if not rater:
            raise ExtractError(path, "a non-empty rater name", place=place, column=RATER_COLUMN)
        benchmark = (row.get(BENCHMARK_COLUMN) or spec_list[0].id).strip()
        row_spec = by_id.get(benchmark)
        if row_spec is None:
            raise ExtractError(path, f"one of the benchmarks {', '.join(by_id)}", place=place,
                               column=BENCHMARK_COLUMN)
        values = []
        for column in rating_columns(row_spec):
            try:
                value = float((row.get(column) or "").strip())
            except ValueError:
                value = float("nan")
            if not 1 <= value <= 5:
                raise ExtractError(path, "a rating from 1 to 5", place=place, column=column)
            values.append(value)
        key = instance_key(benchmark, instance_id, combined=combined)
        if key in composites[rater]:
            raise ExtractError(path, "one row per (rater, instance) pair; this pair is repeated", place=place)
        composites[rater][key] = float(np.mean(values))
        rows += 1
    if not rows:
        raise ExtractError(path, "at least one rating row")
    return ClinicianRatings(composites=dict(composites), rows=rows)


def ratings_from_records(records: Sequence[tuple[str, str, str, dict[str, int]]], *, combined: bool
                         ) -> ClinicianRatings:
    """Ratings collected by the web console: (benchmark, instance id, rater, criterion -> 1-5) per row, each
    rater's composite the mean of the criteria, as for a CSV."""
    composites: dict[str, dict[str, float]] = defaultdict(dict)
    for benchmark, instance_id, rater, values in records:
        if values:
            composites[rater][instance_key(benchmark, instance_id, combined=combined)] = float(
                np.mean(list(values.values())))
    return ClinicianRatings(composites=dict(composites), rows=sum(len(r) for r in composites.values()))


def restrict(ratings: ClinicianRatings, prefix: str) -> ClinicianRatings:
    """The ratings of one benchmark out of a pooled (``benchmark/id``-keyed) set."""
    composites = {rater: {k: v for k, v in r.items() if k.startswith(prefix)} for rater, r in
                  ratings.composites.items()}
    composites = {rater: r for rater, r in composites.items() if r}
    return ClinicianRatings(composites=composites, rows=sum(len(r) for r in composites.values()))


def _z_by_rater(composites: dict[str, dict[str, float]], instances: set[str] | None = None
                ) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    z: dict[str, dict[str, float]] = {}
    excluded: dict[str, str] = {}
    for rater, ratings in composites.items():
        ids = [i for i in ratings if instances is None or i in instances]
        if len(ids) < 2:
            excluded[rater] = "fewer than two rated instances"
            continue
        scores = zscore(np.array([ratings[i] for i in ids], dtype=float))
        if scores is None:
            excluded[rater] = "the same rating for every instance"
            continue
        z[rater] = dict(zip(ids, scores.tolist(), strict=True))
    return z, excluded


def _mean_per_instance(z: dict[str, dict[str, float]]) -> dict[str, float]:
    sums: dict[str, list[float]] = defaultdict(list)
    for ratings in z.values():
        for instance_id, value in ratings.items():
            sums[instance_id].append(value)
    return {i: float(np.mean(v)) for i, v in sums.items()}


def _agreement(a: dict[str, float], b: dict[str, float], resamples: int, seed: int) -> Agreement:
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return Agreement(icc=None, n=len(common))
    matrix = np.array([[a[i], b[i]] for i in common], dtype=float)
    icc, interval = icc3k_with_ci(matrix, resamples=resamples, seed=seed)
    return Agreement(icc=icc, ci_low=interval[0] if interval else None, ci_high=interval[1] if interval else None,
                     n=len(common))


def validate_jury(spec: BenchmarkSpec | str, run_id: str, clinicians: ClinicianRatings,
                  jury: dict[str, dict[str, float]], rouge: dict[str, float], *,
                  resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> ValidationResult:
    """``jury``: judge -> instance -> composite of its valid ratings; ``rouge``: instance -> ROUGE-L."""
    rated = {i for ratings in clinicians.composites.values() for i in ratings}
    clinician_z, excluded = _z_by_rater(clinicians.composites)
    clinician_mean = _mean_per_instance(clinician_z)
    judge_z, judge_excluded = _z_by_rater(jury, rated)
    excluded.update({f"judge:{k}": v for k, v in judge_excluded.items()})
    jury_mean = _mean_per_instance(judge_z)
    rouge_ids = [i for i in sorted(rouge) if i in rated]
    rouge_scores = zscore(np.array([rouge[i] for i in rouge_ids], dtype=float)) if rouge_ids else None
    rouge_z = dict(zip(rouge_ids, rouge_scores.tolist(), strict=True)) if rouge_scores is not None else {}

    pair_iccs = []
    raters = sorted(clinician_z)
    for index, first in enumerate(raters):
        for second in raters[index + 1:]:
            common = sorted(set(clinician_z[first]) & set(clinician_z[second]))
            if len(common) < 2:
                continue
            matrix = np.array([[clinician_z[first][i], clinician_z[second][i]] for i in common], dtype=float)
            value = float(icc3k(matrix))
            if np.isfinite(value):
                pair_iccs.append(value)
    mean_icc, interval = mean_with_ci(np.array(pair_iccs, dtype=float), resamples=resamples, seed=seed)
    clinician_agreement = Agreement(icc=mean_icc, ci_low=interval[0] if interval else None,
                                    ci_high=interval[1] if interval else None, n=len(pair_iccs))
    jury_agreement = _agreement(clinician_mean, jury_mean, resamples, seed)
    return ValidationResult(
        benchmark=spec if isinstance(spec, str) else spec.id, run_id=run_id, n_instances=jury_agreement.n,
        n_clinicians=len(clinicians.composites),
        excluded_raters=excluded, jury=jury_agreement,
        rouge_l=_agreement(clinician_mean, rouge_z, resamples, seed), clinician_clinician=clinician_agreement,
    )
