"""Checking a spec against its scorers, before any inference: every metric known, each metric suited to the
task (the kind of answer it reads, the spec fields it reads: :class:`~medhelm_local.scoring.scorer.Needs`), each
scorer's own conditions (the jury: a judge rubric, and judges configured), and the instance fields the scorers need
given by the loader options.

Runs when a custom spec is registered (``benchmarks add``) and when a run is planned, so that a mismatch is a
clear error (exit 2) up front, not a failure of scoring after all the inference.

The fields a loader gives are known from its options for the table loaders (``table``, ``private_table``: a
column mapping, ``loaders/records.py``); the native-format loaders give fixed fields, set with their shipped specs
and covered by their tests, so a spec of theirs is not checked field by field.
"""

from __future__ import annotations

from collections.abc import Iterable

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.scoring.registry import known_metrics, scorer_for, spec_scorers
from medhelm_local.scoring.scorer import LABEL, REFERENCES, Scorer, meta_field

TABLE_LOADERS = ("table", "private_table")


class ScorerInputMismatch(BadInputError):
    """A spec's loader options do not give an instance field one of its metrics needs."""


class MetricUnsuited(BadInputError):
    """A spec's metric cannot score its task: not the kind of answer it reads, or a spec field it reads not given."""


# What a spec field a metric reads gives it, for the message when it is not given.
SPEC_FIELD_PURPOSE = {"labels": "the answer labels (labels: the choices, e.g. [\"A\", \"B\"]) to read the model's "
                                "choice by"}


def suited_metrics(spec: BenchmarkSpec) -> list[str]:
    """The metrics whose scorers read answers of the spec's output type."""
    suited = []
    for name in known_metrics():
        scorer = scorer_for(name)
        answers = scorer.needs(spec).answers if scorer is not None else ()
        if not answers or spec.output_type in answers:
            suited.append(name)
    return suited


def check_suited(spec: BenchmarkSpec, scorer: Scorer, metric: str) -> None:
    """Raise :class:`MetricUnsuited` where ``metric`` (of ``scorer``) cannot score ``spec``'s task."""
    needs = scorer.needs(spec)
    kind = spec.output_type.value
    if needs.answers and spec.output_type not in needs.answers:
        raise MetricUnsuited(
            f"benchmark {spec.id}: field output_type: metric {metric} scores "
            f"{' or '.join(a.value for a in needs.answers)} answers, but this task's answers are {kind}; choose a "
            f"metric for {kind} answers ({', '.join(suited_metrics(spec))}) or correct output_type")
    for name in needs.spec_fields:
        if not getattr(spec, name):
            raise MetricUnsuited(
                f"benchmark {spec.id}: field {name}: metric {metric} on {kind} answers needs "
                f"{SPEC_FIELD_PURPOSE.get(name, 'it')}, but the spec gives none")


def provided_fields(spec: BenchmarkSpec) -> set[str] | None:
    """The instance fields (``label``, ``references``, ``meta.<key>``) the spec's loader options give every
    instance; None when the loader's fields are not known from its options (a native-format loader)."""
    if spec.input_format not in TABLE_LOADERS:
        return None
    from medhelm_local.loaders.records import parse_mapping
    from medhelm_local.loaders.tabular import split_options

    reader, options = split_options(spec)
    mapping = parse_mapping(spec, options)
    fields: set[str] = set()
    if mapping.label_column or (mapping.answer_column and (mapping.options_column or mapping.option_columns)) or (
            mapping.variants and all(v.label is not None for v in mapping.variants)):
        fields.add(LABEL)
    if (mapping.reference_columns or mapping.reference_list_column or LABEL in fields
            or (mapping.variants and all(v.reference_columns for v in mapping.variants))):
        fields.add(REFERENCES)  # the references default to the label
    meta = {*mapping.meta, *mapping.meta_constants, *dict(reader.get("sibling_files") or {})}
    if mapping.options_column or mapping.option_columns:
        meta.add("options")
    if mapping.variants:
        meta.add("variant")
    return fields | {meta_field(key) for key in meta}


def _describe(field: str) -> str:
    if field == LABEL:
        return "a label (loader option label_column, or answer_column with the options)"
    if field == REFERENCES:
        return "references (loader option reference_columns or reference_list_column, or a label)"
    key = field.removeprefix("meta.")
    return f"meta {key!r} (loader option meta: {{{key}: <column>}}, or meta_constants)"


def check_spec(spec: BenchmarkSpec, config: ApplianceConfig | None = None, *, judges: bool = False,
               fields: bool = True, task: bool = True) -> None:
    """Raise (a :class:`~medhelm_local.errors.BadInputError` or a config error) where ``spec`` cannot be scored.

    ``judges``: check the judges configured in ``config`` too (planning a run); ``fields``: check the instance
    fields the scorers need against the loader options; ``task``: check each metric suits the task
    (:func:`check_suited`)."""
    scorers = spec_scorers(spec)
    provided = provided_fields(spec) if fields else None  # first: loader options in error are named as such
    for scorer, roles in scorers:
        for metric in roles if task else ():
            check_suited(spec, scorer, metric)
    for scorer, _ in scorers:
        scorer.check(spec, config, judges=judges)
    if provided is None:
        return
    for scorer, roles in scorers:
        for alternatives in scorer.needs(spec).fields:
            if not provided.intersection(alternatives):
                metric = next(iter(roles))
                raise ScorerInputMismatch(
                    f"benchmark {spec.id}: field loader_options: metric {metric} needs "
                    f"{' or '.join(_describe(a) for a in alternatives)} "
                    "of every instance, but the spec's loader_options give none: map the column, or choose "
                    "another metric")


def check_benchmarks(config: ApplianceConfig | None, specs: Iterable[BenchmarkSpec], *, judges: bool = True) -> None:
    """Before any inference: every benchmark of a run can be scored (:func:`check_spec`; with ``judges``, the jury's
    judges configured too: not for a run that skips scoring, which the jury scores later)."""
    for spec in specs:
        check_spec(spec, config, judges=judges)
