"""Prompt construction: ``spec.prompt`` filled from ``instance.fields``. Pure; no I/O."""

from __future__ import annotations

import hashlib

from medhelm_local.benchmarks.spec import BenchmarkSpec, template_fields
from medhelm_local.errors import BadInputError
from medhelm_local.records import ChatMessage, InferenceRequest, Instance


class TemplateError(BadInputError, ValueError):
    """A template names a field the instance does not have (a spec or loader bug): bad input, exit 2."""


def _fill(template: str, fields: dict[str, str], benchmark: str) -> str:
    missing = sorted(template_fields(template) - set(fields))
    if missing:
        raise TemplateError(f"benchmark {benchmark}: template field(s) {missing} not provided by the loader")
    return template.format_map(fields)


def instance_templates(spec: BenchmarkSpec) -> dict[str, set[str]]:
    """The spec's templates filled from an instance's fields (the spec's field name -> the fields it names)."""
    templates = {"prompt.template": spec.prompt.template, "judge_question": spec.judge_question,
                 "judge_gold": spec.judge_gold}
    return {name: fields for name, template in templates.items() if (fields := template_fields(template))}


def build_request(spec: BenchmarkSpec, instance: Instance, *, seed: int | None = None,
                  max_tokens: int | None = None) -> InferenceRequest:
    messages = []
    if spec.prompt.system:
        messages.append(ChatMessage(role="system", content=spec.prompt.system))
    messages.append(ChatMessage(role="user", content=_fill(spec.prompt.template, instance.fields, spec.id)))
    return InferenceRequest(
        benchmark=spec.id,
        instance_id=instance.id,
        messages=messages,
        max_tokens=max_tokens or spec.max_tokens,
        temperature=0.0,
        seed=seed,
        stop=list(spec.stop) or None,
    )


def template_hash(spec: BenchmarkSpec) -> str:
    return hashlib.sha256(spec.prompt.model_dump_json().encode()).hexdigest()


def judge_question(spec: BenchmarkSpec, instance: Instance) -> str:
    """What the jury sees as ``{question}``: the spec's ``judge_question`` over the instance's fields (MedHELM
    parity: HELM's instance input), else the prompt the model saw."""
    if spec.judge_question is not None:
        return _fill(spec.judge_question, instance.fields, spec.id)
    return build_request(spec, instance).messages[-1].content


def judge_gold(spec: BenchmarkSpec, instance: Instance) -> str | None:
    """The jury's ``{gold_response}`` when the spec renders it from the instance's fields (MedHELM parity: the raw
    reference HELM's jury sees); None = the instance's references."""
    return None if spec.judge_gold is None else _fill(spec.judge_gold, instance.fields, spec.id)
