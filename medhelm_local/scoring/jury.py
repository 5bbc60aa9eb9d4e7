"""The LLM jury for open-ended benchmarks (MedHELM 4.3.3, Appendix F), run on local judge models.

Each judge named in ``appliance.yaml`` (``judges``; the paper uses three) rates every response on each criterion
of the benchmark's rubric (``spec.judge``: accuracy, completeness, clarity; NoteExtract: accuracy, structure,
clarity) on a 1-5 Likert scale, in one request asking for JSON (``response_format`` with a JSON schema, which
vLLM and llama.cpp enforce). Every reply is still validated. A judge that fails (HTTP error, timeout) or replies
with anything but an integer 1-5 for every criterion gives *no* rating: its judgement is recorded with an error
category and counted in the failure rate, never replaced by a default.

An instance's jury score is the mean of all valid ratings (judges x criteria), normalised as (mean - 1) / 4 to
0-1 (:func:`likert_unit`, also for the per-criterion values reported beside it); an instance with no valid rating
is not scored (value None) and counted as failed.

The jury is a scorer (:class:`JuryScorer`, metric ``jury``): async, it asks models; it needs a judge rubric in the
spec and judges in ``appliance.yaml``, both checked before any inference.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, JudgeRubric, OutputType, template_fields
from medhelm_local.errors import ConfigError, MedhelmError
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
from medhelm_local.inference.client import FORMAT_REJECTED, RequestFailed, retry_transient
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.inference.structured import OutputShape, response_format_for, shapes_for
from medhelm_local.jsontext import loads_strict
from medhelm_local.prompts.build import judge_gold, judge_question
from medhelm_local.records import ChatMessage, InferenceRequest, Instance, InstanceScore
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.extract import strip_reasoning
from medhelm_local.scoring.registry import register_scorer
from medhelm_local.scoring.scorer import REFERENCES, Item, Metric, Needs, Scorer, ScoringContext
from medhelm_local.store.judgments import (
    Judgment,
    JudgmentStatus,
    get_judgments,
    record_judge_manifest,
    record_judgment,
)
from medhelm_local.store.store import Store

JURY = "jury"
DEFAULT_JURY_CONCURRENCY = 4  # requests in flight per judge: judges are often shared, big models
JUDGE_MAX_TOKENS = 1024
LIKERT_MIN, LIKERT_MAX = 1, 5
NO_GOLD = "(no reference response is available for this item)"
# What a rubric template may use (the keys of ``judge_values``); an instance's own fields reach the jury through
# the spec's ``judge_question`` / ``judge_gold`` templates.
JUDGE_TEMPLATE_FIELDS = ("question", "response", "gold_response", "criteria")
SCHEMA_NAME = "jury_rating"
CUT_OFF = "cut_off"  # the reply stopped at the token limit before it was a valid rating


class JudgesNotConfigured(ConfigError):
    """A jury-scored benchmark was scored with no judges configured."""


class RubricError(MedhelmError):
    """A benchmark's judge rubric is unusable (a spec bug)."""


class InvalidJudgement(Exception):
    """A judge's reply is not a valid rating; ``category`` is safe to store and log (never the reply text)."""

    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


def rubric_of(spec: BenchmarkSpec) -> JudgeRubric:
    if spec.judge is None:
        raise RubricError(f"benchmark {spec.id}: metric 'jury' needs a judge rubric in its spec")
    return spec.judge


def judge_names(config: ApplianceConfig | None, benchmark: str) -> list[str]:
    if config is None or not config.judges:
        raise JudgesNotConfigured(
            f"benchmark {benchmark} is scored by the LLM jury, but no judges are configured: make a configured "
            "model a judge with `medhelm-local models update NAME --judge`, or add one with `models add NAME ... "
            "--judge` (MedHELM uses three; with the Helm chart, its values' `judges`)"
        )
    return list(config.judges)


def is_jury_scored(spec: BenchmarkSpec) -> bool:
    """The jury is one of the spec's metrics (its items are what clinicians rate and `jury` commands act on)."""
    return JURY in spec.metric_names


def jury_rows(scores: Sequence[InstanceScore]) -> list[InstanceScore]:
    return [s for s in scores if s.metric == JURY]


def likert_unit(rating: float) -> float:
    """A rating (or a mean of ratings) on the 1-5 Likert scale as a 0-1 value."""
    return (rating - LIKERT_MIN) / (LIKERT_MAX - LIKERT_MIN)


def criteria_text(rubric: JudgeRubric) -> str:
    return "\n".join(f"{c.name.capitalize()} (1-5) - {c.description}" for c in rubric.criteria)


def judge_values(spec: BenchmarkSpec, instance: Instance, output: str) -> dict[str, str]:
    """The rubric template's fields: ``question`` is the prompt the model saw (MedHELM parity: HELM's instance
    input, ``spec.judge_question``), ``response`` its output (reasoning dropped), ``gold_response`` the reference
    (only if the rubric uses it), ``criteria`` the rubric's criteria."""
    rubric = rubric_of(spec)
    question = judge_question(spec, instance)
    gold = judge_gold(spec, instance) or "\n\n".join(r for r in instance.references if r.strip()) or NO_GOLD
    return {"question": question, "response": strip_reasoning(output).strip(), "criteria": criteria_text(rubric),
            "gold_response": gold if rubric.uses_gold else NO_GOLD}


def render_judge_prompt(spec: BenchmarkSpec, values: dict[str, str]) -> str:
    rubric = rubric_of(spec)
    unknown = sorted(template_fields(rubric.template) - set(values))
    if unknown:
        raise RubricError(f"benchmark {spec.id}: judge template uses unknown field(s) {unknown}")
    return rubric.template.format_map(values)


def judge_prompt(spec: BenchmarkSpec, instance: Instance, output: str) -> str:
    """The rubric template filled in with :func:`judge_values` (whole: fitting into a judge's context is done per
    judge, see ``scoring/jury_fit.py``)."""
    return render_judge_prompt(spec, judge_values(spec, instance, output))


def rating_schema(rubric: JudgeRubric) -> dict[str, Any]:
    """The JSON schema of a reply: one ``{score, explanation}`` object per criterion, scores 1-5."""
    rating = {
        "type": "object",
        "properties": {
            # an enum rather than minimum/maximum: every grammar engine (vLLM, llama.cpp) enforces it
            "score": {"type": "integer", "enum": list(range(LIKERT_MIN, LIKERT_MAX + 1))},
            "explanation": {"type": "string"},
        },
        "required": ["score", "explanation"],
        "additionalProperties": False,
    }
    names = [c.name for c in rubric.criteria]
    return {"type": "object", "properties": {n: rating for n in names}, "required": names,
            "additionalProperties": False}


def response_format(rubric: JudgeRubric, shape: OutputShape = OutputShape.JSON_SCHEMA) -> dict[str, Any] | None:
    """The ``response_format`` asking for :func:`rating_schema` in ``shape`` (None for prompt-only)."""
    return response_format_for(shape, rating_schema(rubric), name=SCHEMA_NAME)


_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_judgement(text: str, rubric: JudgeRubric) -> tuple[dict[str, int], dict[str, str]]:
    """Validate a reply: a JSON object with an integer score 1-5 for every criterion. Raises
    :class:`InvalidJudgement` with a category (``not_json``, ``not_object``, ``missing:<criterion>``,
    ``bad_score:<criterion>``: not an integer from 1 to 5, or rated twice under names differing in case)."""
    body = strip_reasoning(text).strip()
    fenced = _FENCED.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        data = loads_strict(body)  # an unpaired surrogate in an explanation is no text: the store refuses it
    except (ValueError, RecursionError):
        raise InvalidJudgement("not_json") from None
    if not isinstance(data, dict):
        raise InvalidJudgement("not_object")
    ratings: dict[str, int] = {}
    explanations: dict[str, str] = {}
    pairs = [(str(k).strip().lower(), v) for k, v in data.items()]
    lowered, keys = dict(pairs), Counter(name for name, _ in pairs)
    for criterion in rubric.criteria:
        entry = lowered.get(criterion.name.lower())
        if entry is None:
            raise InvalidJudgement(f"missing:{criterion.name}")
        if keys[criterion.name.lower()] > 1:  # "Accuracy": 5 and "accuracy": 1: no single rating to take
            raise InvalidJudgement(f"bad_score:{criterion.name}")
        score = entry.get("score") if isinstance(entry, dict) else entry
        if (isinstance(score, bool) or not isinstance(score, int | float)
                or (isinstance(score, float) and not math.isfinite(score)) or float(score) != int(score)):
            raise InvalidJudgement(f"bad_score:{criterion.name}")
        if not LIKERT_MIN <= int(score) <= LIKERT_MAX:
            raise InvalidJudgement(f"bad_score:{criterion.name}")
        ratings[criterion.name] = int(score)
        if isinstance(entry, dict) and isinstance(entry.get("explanation"), str):
            explanations[criterion.name] = entry["explanation"]
    return ratings, explanations


def prompt_hash(judge: str, prompt: str, rubric: JudgeRubric) -> str:
    payload = json.dumps([judge, prompt, rubric.model_dump()], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class JudgeShape:
    """What one judge's server was sent: the structured-output shape, and the shapes it refused first."""

    judge: str
    kind: str
    served_model: str
    shape: OutputShape
    rejected: list[str] = field(default_factory=list)
    accepted: bool = False  # at least one request in ``shape`` was answered
    context_length: int | None = None  # the judge's context (what its server reports, else appliance.yaml)
    token_counting: dict[str, Any] = field(default_factory=dict)  # how its prompts were counted (tokens.py)
    truncated: int = 0  # judge prompts of this pass whose long fields were cut to fit

    def manifest_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "served_model": self.served_model, "structured_output": self.shape.value,
                "rejected": list(self.rejected), "accepted": self.accepted, "context_length": self.context_length,
                "reply_tokens": JUDGE_MAX_TOKENS, "token_counting": self.token_counting, "truncated": self.truncated}


@dataclass(frozen=True)
class JudgeWork:
    instance_id: str
    values: dict[str, str]  # the rubric template's fields, whole (judge_values)
    digest: str  # prompt_hash of the whole prompt


@dataclass
class JuryStats:
    """Counts of one jury pass, for the caller (``jury rescore``)."""

    asked: int = 0  # judgements requested (re-asked) in this pass
    kept: int = 0  # valid judgements kept from earlier passes
    shapes: dict[str, JudgeShape] = field(default_factory=dict)


async def _judge_one(client: Any, semaphore: asyncio.Semaphore, *, scope: str, spec: BenchmarkSpec, judge: str,
                     instance_id: str, prompt: str, digest: str, max_retries: int, shape: OutputShape,
                     truncation: dict[str, Any] | None = None) -> Judgment:
    rubric = rubric_of(spec)
    request = InferenceRequest(
        benchmark=spec.id, instance_id=instance_id, messages=[ChatMessage(role="user", content=prompt)],
        max_tokens=JUDGE_MAX_TOKENS, temperature=0.0, response_format=response_format(rubric, shape),
    )
    async with semaphore:
        result = await client.complete(request, max_retries=max_retries)
    base = {"run_id": scope, "benchmark": spec.id, "instance_id": instance_id, "judge": judge,
            "prompt_hash": digest, "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "latency_s": result.latency_s,
            "attempts": result.attempts, "output_shape": shape.value, "truncation": truncation}
    if not result.ok or result.text is None:
        return Judgment(**base, status=JudgmentStatus.REQUEST_FAILED, error=result.error or "no_text")
    try:
        ratings, explanations = parse_judgement(result.text, rubric)
    except InvalidJudgement as invalid:
        category = CUT_OFF if result.finish_reason == "length" else invalid.category
        return Judgment(**base, status=JudgmentStatus.INVALID_REPLY, error=category)
    return Judgment(**base, status=JudgmentStatus.OK, ratings=ratings, explanations=explanations)


async def _run_judge(store: Store, config: ApplianceConfig, spec: BenchmarkSpec, judge: str,
                     work: list[JudgeWork], *, scope: str, concurrency: int,
                     egress: EgressPolicy | None = None) -> JudgeShape:
    """Ask one judge about ``work``. Each prompt is first fitted into the judge's context, with room for its
    reply, by its server's own tokenizer (``jury_fit``). The first item settles the structured-output shape: on a
    refusal of the shape (a request-validation error) it is asked again in the backend's next shape, if there is
    one; the other items then go out concurrently in the shape that was not refused."""
    from medhelm_local.inference.backends import open_client
    from medhelm_local.inference.tokens import open_counter
    from medhelm_local.scoring.jury_fit import FittedPrompt, fit_judge_prompt

    endpoint: ModelEndpoint = config.model(judge)
    shapes = shapes_for(endpoint.kind)
    outcome = JudgeShape(judge=judge, kind=endpoint.kind.value, served_model=endpoint.model_id, shape=shapes[0])
    semaphore = asyncio.Semaphore(concurrency)
    max_retries = config.runner.max_retries

    def render(values: dict[str, str]) -> str:
        return render_judge_prompt(spec, values)

    async def ask(item: JudgeWork) -> Judgment:
        async def fit() -> FittedPrompt:
            async with semaphore:  # not held while a retry waits
                return await fit_judge_prompt(counter, render, item.values, budget)

        try:
            # A transient tokenizer failure is retried, as a run's prompt fitting does: the embedded server
            # answers one request at a time, so a count can wait behind a long judgement and time out.
            fitted = await retry_transient(fit, max_retries=max_retries)
        except RequestFailed as failed:  # prompt_too_long, or the tokenizer could not be asked
            return Judgment(run_id=scope, benchmark=spec.id, instance_id=item.instance_id, judge=judge,
                            prompt_hash=item.digest, status=JudgmentStatus.REQUEST_FAILED,
                            error=failed.category, attempts=0, output_shape=outcome.shape.value)
        return await _judge_one(client, semaphore, scope=scope, spec=spec, judge=judge,
                                instance_id=item.instance_id, prompt=fitted.prompt, digest=item.digest,
                                max_retries=max_retries, shape=outcome.shape, truncation=fitted.truncation)

    def done(judgment: Judgment) -> None:
        outcome.accepted = outcome.accepted or judgment.status != JudgmentStatus.REQUEST_FAILED
        outcome.truncated += judgment.truncation is not None
        record_judgment(store, judgment)  # committed as it arrives: an interrupted jury resumes
        store.release()  # the lock is given back while the judges think: readers (doctor, the console) get in

    store.release()  # nothing is held across the network waits below
    async with open_client(config, endpoint, max_connections=concurrency, egress=egress) as client:
        counter = await open_counter(client, endpoint.kind, context_length=endpoint.context_length)
        outcome.context_length = counter.server_context_length or endpoint.context_tokens
        outcome.token_counting = counter.describe()
        budget = outcome.context_length - JUDGE_MAX_TOKENS
        first = await ask(work[0])
        while first.error == FORMAT_REJECTED and len(outcome.rejected) + 1 < len(shapes):
            outcome.rejected.append(outcome.shape.value)
            outcome.shape = shapes[len(outcome.rejected)]
            first = await ask(work[0])
        done(first)
        for finished in asyncio.as_completed([asyncio.create_task(ask(item)) for item in work[1:]]):
            done(await finished)
    # Recorded as soon as this judge is done, not after every judge: a run killed while a slower judge still
    # judges resumes with nothing to ask this one, and would otherwise never record its entry.
    record_judge_manifest(store, scope, {judge: outcome.manifest_entry()})
    store.release()
    return outcome


async def run_jury_async(store: Store, config: ApplianceConfig, spec: BenchmarkSpec, items: Sequence[Item],
                         *, scope: str, concurrency: int = DEFAULT_JURY_CONCURRENCY, only_failed: bool = False,
                         stats: JuryStats | None = None, egress: EgressPolicy | None = None) -> list[Judgment]:
    """Ask every judge about every answered item; reuse valid judgements already stored for the same prompt
    (``only_failed``: every valid judgement already stored, whatever its prompt: only failed or missing ones are
    asked again). The structured-output shape each judge was sent, its context and how its prompts were counted
    are recorded in the run's manifest; what was cut to fit, per judgement."""
    judges = judge_names(config, spec.id)
    rubric = rubric_of(spec)
    stats = stats if stats is not None else JuryStats()
    existing = {(j.instance_id, j.judge): j for j in get_judgments(store, scope, spec.id)}
    plans: dict[str, list[JudgeWork]] = {judge: [] for judge in judges}
    for item in items:
        if item.output is None:
            continue
        values = judge_values(spec, item.instance, item.output)
        prompt = render_judge_prompt(spec, values)
        for judge in judges:
            digest = prompt_hash(judge, prompt, rubric)
            done = existing.get((item.instance.id, judge))
            if done is not None and done.status == JudgmentStatus.OK and (only_failed or done.prompt_hash == digest):
                stats.kept += 1
                continue
            plans[judge].append(JudgeWork(item.instance.id, values, digest))
    stats.asked += sum(len(work) for work in plans.values())
    outcomes = await asyncio.gather(*(_run_judge(store, config, spec, judge, work, scope=scope,
                                                 concurrency=concurrency, egress=egress)
                                      for judge, work in plans.items() if work))
    for outcome in outcomes:  # each judge recorded its manifest entry when it was done
        stats.shapes[outcome.judge] = outcome
    wanted = {item.instance.id for item in items if item.output is not None}
    return [j for j in get_judgments(store, scope, spec.id) if j.instance_id in wanted and j.judge in judges]


class JuryDetails(ScoreDetails):
    """A jury score's details: judges asked and valid, each failed judge's category, the mean rating (1-5), its
    mean per criterion and per judge, and the judges configured. Numbers and names only (explanations are kept in
    the judgements, encrypted, never here)."""

    judges: int | None = None
    valid_judges: int | None = None
    judge_errors: dict[str, str | None] | None = None
    mean_rating: float | None = None
    criteria: dict[str, float] | None = None
    per_judge: dict[str, float] | None = None
    judges_configured: int | None = None


def jury_value(judgments: Sequence[Judgment], judges_configured: int) -> tuple[float | None, JuryDetails]:
    """Normalised jury score of one instance from its judgements, and its details."""
    valid = [j for j in judgments if j.status == JudgmentStatus.OK]
    ratings = [score for j in valid for score in j.ratings.values()]
    counts = {"judges": len(judgments), "valid_judges": len(valid),
              "judge_errors": {j.judge: j.error for j in judgments if j.status != JudgmentStatus.OK}}
    if not ratings:
        return None, JuryDetails(**counts, error="no_valid_judgement", judges_configured=judges_configured)
    mean = sum(ratings) / len(ratings)
    criteria: dict[str, list[int]] = {}
    for j in valid:
        for name, score in j.ratings.items():
            criteria.setdefault(name, []).append(score)
    return likert_unit(mean), JuryDetails(
        **counts, mean_rating=mean, criteria={name: sum(v) / len(v) for name, v in criteria.items()},
        per_judge={j.judge: sum(j.ratings.values()) / len(j.ratings) for j in valid}, parsed=True,
        judges_configured=judges_configured)


class JuryScorer(Scorer):
    """The LLM jury as a scorer: every judge rates every answered item (``run_jury_async``); an item's value is its
    normalised mean rating, None (counted as failed) where no judgement is valid."""

    name = JURY
    metrics = (Metric(JURY),)
    details_model = JuryDetails
    calls_models = True

    def needs(self, spec: BenchmarkSpec) -> Needs:
        """Judges rate a written answer (not a letter or a number); a rubric that shows them the gold answer
        ({gold_response}) needs one of every instance, unless ``judge_gold`` builds it from the instance's fields."""
        rubric = spec.judge
        gold = (rubric is not None and rubric.uses_gold and "gold_response" in template_fields(rubric.template)
                and spec.judge_gold is None)
        return Needs(answers=(OutputType.FREE_TEXT,), fields=((REFERENCES,),) if gold else ())

    def check(self, spec: BenchmarkSpec, config: ApplianceConfig | None, *, judges: bool) -> None:
        if spec.judge is None:
            raise RubricError(f"benchmark {spec.id}: a jury-scored benchmark needs a judge rubric (field judge)")
        unknown = sorted(template_fields(spec.judge.template) - set(JUDGE_TEMPLATE_FIELDS))
        if unknown:
            raise RubricError(
                f"benchmark {spec.id}: field judge.template uses {', '.join('{' + u + '}' for u in unknown)}; a "
                f"judge template may use only {', '.join('{' + f + '}' for f in JUDGE_TEMPLATE_FIELDS)} (what the "
                "jury sees as {question} is set by the spec's judge_question, a template over the instance's "
                "fields; by default the prompt the model saw)")
        if "response" not in template_fields(spec.judge.template):
            raise RubricError(f"benchmark {spec.id}: field judge.template must show the judges the model's answer as "
                              "{response}; without it they rate an answer they never see")
        if judges:
            judge_names(config, spec.id)

    async def score(self, spec: BenchmarkSpec, items: Sequence[Item], context: ScoringContext,
                    roles: Mapping[str, bool]) -> list[InstanceScore]:
        judges = judge_names(context.config, spec.id)
        assert context.config is not None
        if context.store is None:
            raise MedhelmError(f"benchmark {spec.id}: the jury records its judgements in the store; none was given")
        stats = context.reports.setdefault(self.name, JuryStats())
        judgments = await run_jury_async(
            context.store, context.config, spec, items,
            scope=context.scope, concurrency=context.concurrency or DEFAULT_JURY_CONCURRENCY,
            only_failed=context.only_failed, stats=stats, egress=context.egress)
        by_instance: dict[str, list[Judgment]] = {}
        for judgment in judgments:
            by_instance.setdefault(judgment.instance_id, []).append(judgment)
        main = roles.get(JURY, False)
        rows: list[InstanceScore] = []
        for item in items:
            if item.output is None:
                if main:
                    rows.append(InstanceScore(benchmark=spec.id, instance_id=item.instance.id, metric=JURY,
                                              value=None, details={"error": item.error or "no_response"}))
                continue
            value, details = jury_value(by_instance.get(item.instance.id, []), len(judges))
            if value is not None or main:
                rows.append(InstanceScore(benchmark=spec.id, instance_id=item.instance.id, metric=JURY, value=value,
                                          details=details.stored()))
        return rows

    def secondary(self, details: ScoreDetails) -> dict[str, float]:
        """Each criterion's mean rating, normalised like the score (``criterion:<name>``)."""
        criteria = details.criteria if isinstance(details, JuryDetails) else None
        return {f"criterion:{name}": likert_unit(float(value)) for name, value in (criteria or {}).items()}


register_scorer(JuryScorer())
