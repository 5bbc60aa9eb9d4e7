"""A benchmark is data: one declarative spec drives loading, prompting, scoring and reporting."""

from __future__ import annotations

import json
import string
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medhelm_local.patterns import FIELD_NAME, LOWER_ID


class Access(StrEnum):
    PUBLIC = "public"
    GATED = "gated"
    PRIVATE = "private"


class Curation(StrEnum):
    EXISTING = "existing"
    REFORMULATED = "reformulated"
    NEW = "new"


class OutputType(StrEnum):
    CHOICE_LETTER = "choice_letter"
    YES_NO_MAYBE = "yes_no_maybe"
    NUMBER_OR_DATE = "number_or_date"
    FREE_TEXT = "free_text"
    SQL = "sql"
    CODE_LIST = "code_list"


class PromptSpec(BaseModel):
    """``template`` is a ``str.format`` template over the instance's fields (``{context}``, ``{question}``)."""

    model_config = ConfigDict(extra="forbid")

    system: str | None = None
    template: str


class Truncation(BaseModel):
    """The instance field shortened, when it must be, so that prompt + ``max_tokens`` fit the model's context:
    ``keep: start`` keeps its beginning (a note), ``keep: end`` its end (a timeline whose last events matter)."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(pattern=FIELD_NAME)
    keep: Literal["start", "end"] = "start"


def template_fields(template: str | None) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template or "") if name}


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str


class JudgeRubric(BaseModel):
    """An LLM-jury rubric in the style of MedHELM Appendix F.

    ``template`` may use ``{question}``, ``{response}`` and ``{gold_response}``; ``{criteria}`` expands to the
    numbered criteria list.
    """

    model_config = ConfigDict(extra="forbid")

    criteria: list[Criterion]
    template: str
    uses_gold: bool = True


class MetricChoice(BaseModel):
    """One metric a benchmark reports: ``name`` is a metric of the scorer registry (``scoring/registry.py``);
    ``main`` marks the benchmark's score (exactly one per spec). The others are secondary: reported beside it
    (MedHELM reports ROUGE-L beside the jury for open-ended benchmarks)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=LOWER_ID)
    main: bool = False


# What the older single ``metric:`` field meant, as the ``metrics:`` list (custom specs written for earlier
# versions, and the spec snapshots in the manifests of runs created by them): the jury always came with ROUGE-L.
LEGACY_METRICS: dict[str, tuple[str, ...]] = {"jury": ("jury", "rouge_l")}


def legacy_metrics(name: str) -> list[dict[str, Any]]:
    """``metric: name`` (the older single field) as the ``metrics:`` list it meant."""
    names = LEGACY_METRICS.get(name, (name,))
    return [{"name": names[0], "main": True}, *({"name": n, "main": False} for n in names[1:])]


def upgrade_spec_data(data: Any) -> Any:
    """Spec data (a YAML mapping or a run's snapshot) with the older ``metric:`` field read as ``metrics:``."""
    if not isinstance(data, dict) or "metric" not in data:
        return data
    if "metrics" in data:
        raise ValueError("give metrics (the list, one marked main: true) or the older metric, not both")
    upgraded = {k: v for k, v in data.items() if k != "metric"}
    upgraded["metrics"] = legacy_metrics(data["metric"]) if isinstance(data["metric"], str) else data["metric"]
    return upgraded


class MedhelmParity(BaseModel):
    """MedHELM's own prompt and decoding for this benchmark, as crfm-helm 0.5.16 renders them (``run --prompt-style
    medhelm``), or why parity is impossible (``unavailable``). See ``medhelm_local/benchmarks/PARITY.md``.

    ``template`` is the whole user message HELM's chat clients send (no system message), a ``str.format`` template
    over the instance's fields like ``prompt.template``. ``answer_labels`` are the answers HELM's prompt asks for,
    in the order of the spec's ``labels`` (PubMedQA: A/B/C for yes/no/maybe). ``judge_question`` renders HELM's
    instance input, which HELM's jury sees as ``{question}`` (``judge_gold``: its gold response, where the raw
    reference differs from the loaded one); ``judge_template`` is HELM's annotator prompt over
    ``{question}``, ``{response}`` and ``{gold_response}``. ``instances_where``: a boolean meta key the loader sets
    on the items HELM's scenario keeps (MTSamples); a parity run plans only those.
    """

    model_config = ConfigDict(extra="forbid")

    helm_run_spec: str
    template: str | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=32768)
    stop: list[str] = Field(default_factory=list)
    answer_labels: list[str] | None = None
    judge_question: str | None = None
    judge_gold: str | None = None  # HELM's gold response as its jury sees it (the raw reference), when it differs
    judge_template: str | None = None
    instances_where: str | None = None
    unavailable: str | None = None
    # The field HELM's template uses in place of the spec's ``truncate.field`` (e.g. ``labelled_context``).
    truncate_field: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> MedhelmParity:
        if (self.template is None) == (self.unavailable is None):
            raise ValueError("medhelm: give either template (with max_tokens) or unavailable (the reason)")
        if self.template is not None and self.max_tokens is None:
            raise ValueError("medhelm: a parity template needs HELM's max_tokens")
        if (self.judge_question is None) != (self.judge_template is None):
            raise ValueError("medhelm: judge_question and judge_template go together")
        return self


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=LOWER_ID)
    name: str
    description: str
    category: str
    subcategory: str
    access: Access
    curation: Curation
    # The loader that reads the native format, and its options (column names, file globs ...).
    input_format: str
    loader_options: dict[str, Any] = Field(default_factory=dict)
    prompt: PromptSpec
    output_type: OutputType
    # Canonical answer labels for closed-ended output, in display order (e.g. ["A", "B"], ["yes", "no", "maybe"]).
    labels: list[str] | None = None
    # Raw label in the source -> canonical label (e.g. {"1": "A", "0": "B"}).
    label_map: dict[str, str] | None = None
    # The metrics reported, one marked ``main: true`` (the benchmark's score); an entry may be a plain name. The
    # older single field ``metric: NAME`` still loads (read as :func:`legacy_metrics`).
    metrics: list[MetricChoice] = Field(min_length=1)
    max_tokens: int = Field(ge=1, le=32768)
    # The long field cut to fit the model's context (None: a prompt that does not fit is recorded as an error).
    truncate: Truncation | None = None
    judge: JudgeRubric | None = None
    # Decoding stop sequences (HELM's parity prompts set them; the default style sends none).
    stop: list[str] = Field(default_factory=list)
    # The answers the prompt asks for when they differ from ``labels`` (same order): scoring maps them back.
    answer_labels: list[str] | None = None
    # The jury's ``{question}``: a template over the instance's fields; None = the filled prompt itself.
    judge_question: str | None = None
    # The jury's ``{gold_response}``: a template over the instance's fields; None = the references.
    judge_gold: str | None = None
    # A boolean meta key: a run plans only the instances where it is true (None: every instance). Set by a
    # prompt style (MedHELM parity runs only the MTSamples reports HELM's scenario keeps), not in spec files.
    instances_where: str | None = None
    medhelm: MedhelmParity | None = None
    source: str | None = None
    license: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        data = upgrade_spec_data(data)
        if isinstance(data, dict) and isinstance(data.get("metrics"), list):
            entries = [{"name": m} if isinstance(m, str) else m for m in data["metrics"]]
            if len(entries) == 1 and isinstance(entries[0], dict) and "main" not in entries[0]:
                entries[0] = {**entries[0], "main": True}  # a single metric is the main one
            data = {**data, "metrics": entries}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSpec:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.id}: metrics lists a metric twice")
        if sum(m.main for m in self.metrics) != 1:
            raise ValueError(f"{self.id}: metrics must mark exactly one metric main: true (the benchmark's score)")
        if self.answer_labels is not None and len(self.answer_labels) != len(self.labels or []):
            raise ValueError(f"{self.id}: answer_labels must pair one to one with labels")
        if self.medhelm and self.medhelm.answer_labels is not None and (
                len(self.medhelm.answer_labels) != len(self.labels or [])):
            raise ValueError(f"{self.id}: medhelm.answer_labels must pair one to one with labels")
        if self.truncate is not None and self.truncate.field not in template_fields(self.prompt.template):
            raise ValueError(f"{self.id}: truncate.field {self.truncate.field!r} is not a field of prompt.template")
        if self.label_map and self.labels:
            unknown = sorted(set(self.label_map.values()) - set(self.labels))
            if unknown:
                raise ValueError(f"{self.id}: label_map maps to labels not in labels: {unknown}")
        return self

    @property
    def loader_sha256(self) -> str:
        """Hash of everything that decides how source bytes become instances."""
        import hashlib

        config = self.model_dump(mode="json", include={"input_format", "loader_options", "labels", "label_map"})
        return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()

    @property
    def metric(self) -> str:
        """The main metric: the benchmark's score."""
        return next(m.name for m in self.metrics if m.main)

    @property
    def metric_names(self) -> list[str]:
        """Every metric reported, the main one first."""
        return [self.metric, *(m.name for m in self.metrics if not m.main)]

    @property
    def closed_ended(self) -> bool:
        return self.output_type != OutputType.FREE_TEXT
