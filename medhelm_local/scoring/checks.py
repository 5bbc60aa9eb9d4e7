"""Checking a spec against its scorers, before any inference: every metric known, each metric suited to the
task (the kind of answer it reads, the spec fields it reads: :class:`~medhelm_local.scoring.scorer.Needs`), each
scorer's own conditions (the jury: a judge rubric, and judges configured), and the instance fields the scorers need
given by the loader options.

Runs when a custom spec is registered (``benchmarks add``) and when a run is planned, so that a mismatch is a
clear error (exit 2) up front, not a failure of scoring after all the inference.

The fields a loader gives are known from its options for the table loaders (``table``, ``private_table``: a
column mapping, ``loaders/records.py``); a native-format loader gives fixed fields, which it declares when it
registers (``register_loader(..., gives=...)``).
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


def check_suited(spec: BenchmarkSpec, scorer: Scorer, metric: str, metric_field: str = "metrics") -> None:
    """Raise :class:`MetricUnsuited` where ``metric`` (of ``scorer``) cannot score ``spec``'s task.

    A metric that cannot read the task's answers is named under ``metric_field`` (where the spec lists it:
    ``metrics``, or the older ``metric``), the field a spec author changes; output_type is offered as the other fix."""
    needs = scorer.needs(spec)
    kind = spec.output_type.value
    if needs.answers and spec.output_type not in needs.answers:
        wanted = " or ".join(a.value for a in needs.answers)
        raise MetricUnsuited(
            f"benchmark {spec.id}: field {metric_field}: metric {metric} needs {wanted} answers, but this task's "
            f"output_type is {kind}; choose a metric for {kind} answers ({', '.join(suited_metrics(spec))}), or "
            f"correct output_type if the answers are {wanted}")
    for name in needs.spec_fields:
        if not getattr(spec, name):
            raise MetricUnsuited(
                f"benchmark {spec.id}: field {name}: metric {metric} on {kind} answers needs "
                f"{SPEC_FIELD_PURPOSE.get(name, 'it')}, but the spec gives none")


def provided_fields(spec: BenchmarkSpec) -> set[str] | None:
    """The instance fields (``label``, ``references``, ``meta.<key>``) the spec's loader gives every instance: from
    its loader options for a table loader, as the loader declares them for a native-format one; None for a loader
    that declares none."""
    from medhelm_local.loaders.base import declared_fields
    from medhelm_local.loaders.records import mapping_fields, parse_mapping
    from medhelm_local.loaders.tabular import split_options

    if spec.input_format not in TABLE_LOADERS:
        declared = declared_fields(spec.input_format)
        return None if declared is None else set(declared)
    reader, options = split_options(spec)
    siblings = {meta_field(key) for key in dict(reader.get("sibling_files") or {})}
    return set(mapping_fields(parse_mapping(spec, options))) | siblings


def _describe(field: str) -> str:
    if field == LABEL:
        return "a label (loader option label_column, or answer_column with the options)"
    if field == REFERENCES:
        return "references (loader option reference_columns or reference_list_column, or a label)"
    key = field.removeprefix("meta.")
    return f"meta {key!r} (loader option meta: {{{key}: <column>}}, or meta_constants)"


def check_spec(spec: BenchmarkSpec, config: ApplianceConfig | None = None, *, judges: bool = False,
               fields: bool = True, task: bool = True, metric_field: str = "metrics") -> None:
    """Raise (a :class:`~medhelm_local.errors.BadInputError` or a config error) where ``spec`` cannot be scored.

    ``judges``: check the judges configured in ``config`` too (planning a run); ``fields``: check the instance
    fields the scorers need against the loader options; ``task``: check each metric suits the task
    (:func:`check_suited`); ``metric_field``: the spec field its metrics were given in."""
    scorers = spec_scorers(spec)
    provided = provided_fields(spec) if fields else None  # first: loader options in error are named as such
    for scorer, roles in scorers:
        for metric in roles if task else ():
            check_suited(spec, scorer, metric, metric_field)
    for scorer, _ in scorers:
        scorer.check(spec, config, judges=judges)
    if provided is None:
        return
    for scorer, roles in scorers:
        for alternatives in scorer.needs(spec).fields:
            if not provided.intersection(alternatives):
                metric = next(iter(roles))
                raise ScorerInputMismatch(f"benchmark {spec.id}: {_not_given(spec, metric, alternatives)}")


def _not_given(spec: BenchmarkSpec, metric: str, alternatives: tuple[str, ...]) -> str:
    needs = f"metric {metric} needs {' or '.join(_describe(a) for a in alternatives)} of every instance"
    if spec.input_format not in TABLE_LOADERS:
        return (f"field metrics: {needs}, but the {spec.input_format} loader gives none (it gives: "
                f"{', '.join(sorted(provided_fields(spec) or ())) or 'nothing a metric reads'}); choose another metric")
    # A spec written with the older `metric: jury` lists ROUGE-L beside the jury without saying so.
    legacy = (" (the older `metric: jury` meant jury and rouge_l: write `metrics: [{name: jury, main: true}]` "
              "for the jury alone)" if metric == "rouge_l" and "jury" in spec.metric_names else "")
    return (f"field loader_options: {needs}, but the spec's loader_options give none: map the column, or choose "
            f"another metric{legacy}")


def check_benchmarks(config: ApplianceConfig | None, specs: Iterable[BenchmarkSpec], *, judges: bool = True) -> None:
    """Before any inference: every benchmark of a run can be scored (:func:`check_spec`; with ``judges``, the jury's
    judges configured too: not for a run that skips scoring, which the jury scores later)."""
    for spec in specs:
        check_spec(spec, config, judges=judges)
