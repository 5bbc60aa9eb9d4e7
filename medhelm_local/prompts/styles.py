"""Prompt styles: the project's own prompts (``default``) or MedHELM's, byte for byte (``medhelm``).

A style turns a spec into the spec a run actually uses; the parity data lives in each spec's ``medhelm`` block
(one engine, no per-benchmark code). ``style_sha256`` is what manifests, plans and leaderboards carry, so runs of
different styles (or of a changed parity template) are never mixed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, JudgeRubric, PromptSpec
from medhelm_local.errors import BadInputError

DEFAULT_STYLE = "default"
MEDHELM_STYLE = "medhelm"
PROMPT_STYLES = (DEFAULT_STYLE, MEDHELM_STYLE)


class ParityUnavailable(BadInputError):
    """``--prompt-style medhelm`` on a benchmark whose MedHELM prompt this appliance cannot reproduce."""


def check_style(style: str) -> str:
    if style not in PROMPT_STYLES:
        raise BadInputError(f"--prompt-style: expected one of {', '.join(PROMPT_STYLES)}, got {style!r}")
    return style


def styled_spec(spec: BenchmarkSpec, style: str) -> BenchmarkSpec:
    """The spec as a run of ``style`` uses it. Raises ParityUnavailable (exit 2) when parity is impossible."""
    check_style(style)
    if style == DEFAULT_STYLE:
        return spec
    parity = spec.medhelm
    if parity is None:
        raise ParityUnavailable(f"benchmark {spec.id}: no MedHELM parity prompt is defined for it "
                                "(run it with --prompt-style default)")
    if parity.unavailable is not None or parity.template is None or parity.max_tokens is None:
        raise ParityUnavailable(f"benchmark {spec.id}: MedHELM parity is impossible here: {parity.unavailable}")
    update: dict[str, object] = {
        "prompt": PromptSpec(system=None, template=parity.template),
        "max_tokens": parity.max_tokens,
        "stop": list(parity.stop),
        "answer_labels": parity.answer_labels,
        "instances_where": parity.instances_where,
    }
    if spec.judge is not None and parity.judge_template is not None:
        update["judge"] = JudgeRubric(criteria=spec.judge.criteria, template=parity.judge_template,
                                      uses_gold=spec.judge.uses_gold)
        update["judge_question"] = parity.judge_question
        update["judge_gold"] = parity.judge_gold
    return spec.model_copy(update=update)


def style_sha256(spec: BenchmarkSpec, style: str) -> str:
    """Hash of everything a style decides for ``spec``: prompt, decoding, answer labels, judge prompt."""
    styled = styled_spec(spec, style)
    decided = styled.model_dump(mode="json", include={"prompt", "max_tokens", "stop", "answer_labels", "judge",
                                                      "judge_question", "judge_gold"})
    if styled.instances_where is not None:  # only where set: the hashes of every other spec stay as they were
        decided["instances_where"] = styled.instances_where
    payload = json.dumps({"style": style, **decided}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def parity_status(spec: BenchmarkSpec) -> str:
    """``identical`` (a parity template), ``unavailable`` (a reason given) or ``undefined`` (no medhelm block)."""
    if spec.medhelm is None:
        return "undefined"
    return "unavailable" if spec.medhelm.unavailable is not None else "identical"


def run_prompt_style(manifest: Mapping[str, Any] | None) -> str:
    """The style a run was planned with (runs from before styles existed used the default prompts)."""
    recorded = (manifest or {}).get("prompt_style") or {}
    return str(recorded.get("name") or DEFAULT_STYLE)


def spec_for_run(benchmark: str, manifest: Mapping[str, Any] | None) -> BenchmarkSpec:
    """The spec of ``benchmark`` as the run with this manifest used it (its prompt style applied)."""
    from medhelm_local.benchmarks.registry import get_spec

    return styled_spec(get_spec(benchmark), run_prompt_style(manifest))


def manifest_entry(style: str, benchmarks: list[str]) -> dict[str, Any]:
    """``manifest["prompt_style"]``: the style's name and, per benchmark, the hash of what it decided."""
    from medhelm_local.benchmarks.registry import get_spec

    return {"name": style, "sha256": {b: style_sha256(get_spec(b), style) for b in benchmarks}}
