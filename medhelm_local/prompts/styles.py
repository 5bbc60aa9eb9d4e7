"""Prompt styles: the project's own prompts (``default``) or MedHELM's, byte for byte (``medhelm``).

A style turns a spec into the spec a run actually uses; the parity data lives in each spec's ``medhelm`` block
(one engine, no per-benchmark code). ``style_sha256`` is what manifests, plans and leaderboards carry, so runs of
different styles (or of a changed parity template) are never mixed.

A run is frozen to the specs it was created with: the styled spec of each benchmark is snapshotted into the run's
manifest (``manifest["specs"]``, its hash in ``manifest["spec_sha256"]``), so the manifest's hash covers it, and
:func:`spec_for_run` returns the snapshot, never the current file. :func:`spec_changes` names what differs between
a run's snapshot and the current file (``run --resume`` / ``--retry-errors`` refuse a changed spec).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from medhelm_local.benchmarks.spec import BenchmarkSpec, JudgeRubric, PromptSpec, template_fields, upgrade_spec_data
from medhelm_local.errors import BadInputError

if TYPE_CHECKING:
    from medhelm_local.benchmarks.registry import SpecRegistry

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
    truncate = spec.truncate
    if truncate is not None and truncate.field not in template_fields(parity.template):
        field = parity.truncate_field
        truncate = truncate.model_copy(update={"field": field}) if field else None
    update: dict[str, object] = {
        "truncate": truncate,
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


SNAPSHOT_KEY = "specs"
SNAPSHOT_HASH_KEY = "spec_sha256"
# Fields that describe a benchmark or say how its source files are read (the run's instances are fixed by their
# dataset fingerprint): a change to them does not change what a run sends or how it is scored.
NOT_DECIDING = frozenset({"name", "description", "category", "subcategory", "access", "curation", "source",
                          "license", "input_format", "loader_options", "label_map", "medhelm"})


def spec_snapshot(spec: BenchmarkSpec) -> dict[str, Any]:
    """The whole styled spec as JSON data: prompt, decoding, labels, metric, judge rubric."""
    return spec.model_dump(mode="json")


def snapshot_sha256(snapshot: Mapping[str, Any]) -> str:
    payload = json.dumps(dict(snapshot), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def manifest_specs(specs: Mapping[str, BenchmarkSpec]) -> dict[str, Any]:
    """The manifest entries that freeze a run's specs: ``{"specs": {b: snapshot}, "spec_sha256": {b: hash}}``."""
    snapshots = {b: spec_snapshot(s) for b, s in specs.items()}
    return {SNAPSHOT_KEY: snapshots, SNAPSHOT_HASH_KEY: {b: snapshot_sha256(v) for b, v in snapshots.items()}}


def run_snapshot(benchmark: str, manifest: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The spec snapshot of ``benchmark`` in a run's manifest (None for runs created before snapshots)."""
    snapshot = ((manifest or {}).get(SNAPSHOT_KEY) or {}).get(benchmark)
    return dict(snapshot) if isinstance(snapshot, Mapping) else None


def spec_for_run(benchmark: str, manifest: Mapping[str, Any] | None, specs: SpecRegistry) -> BenchmarkSpec:
    """The spec of ``benchmark`` as the run with this manifest used it: its snapshot; for a run created before
    snapshots, the current file (from ``specs``) with the run's prompt style applied."""
    snapshot = run_snapshot(benchmark, manifest)
    if snapshot is not None:
        return BenchmarkSpec.model_validate(snapshot)
    return styled_spec(specs.get(benchmark), run_prompt_style(manifest))


def _diff(before: Any, after: Any, path: str) -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            out += _diff(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True)) for d in _diff(b, a, f"{path}[{i}]")]
    return [] if before == after else [path]


def spec_changes(benchmark: str, manifest: Mapping[str, Any] | None, specs: SpecRegistry) -> list[str]:
    """The fields (dotted paths, e.g. ``max_tokens``, ``prompt.template``, ``judge.criteria[1].description``) in
    which the current spec file, styled as the run was, differs from the run's snapshot. Empty when they agree,
    when the run has no snapshot, or when the benchmark's file is gone (the run continues from its snapshot)."""
    from medhelm_local.errors import NotFoundError

    snapshot = run_snapshot(benchmark, manifest)
    if snapshot is None:
        return []
    try:
        current = spec_snapshot(styled_spec(specs.get(benchmark), run_prompt_style(manifest)))
    except NotFoundError:
        return []
    except ParityUnavailable:
        return ["medhelm (MedHELM parity is no longer available for it)"]
    return snapshot_differences(snapshot, current)


def snapshot_differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The deciding fields (dotted paths) in which two spec snapshots differ: what a run sends or how it scores
    (:data:`NOT_DECIDING` fields are left out)."""
    # a run created before ``metrics:`` froze the older ``metric:``
    old, new = upgrade_spec_data(dict(before)), upgrade_spec_data(dict(after))
    return _diff({k: v for k, v in old.items() if k not in NOT_DECIDING},
                 {k: v for k, v in new.items() if k not in NOT_DECIDING}, "")


def manifest_entry(style: str, specs: Mapping[str, BenchmarkSpec]) -> dict[str, Any]:
    """``manifest["prompt_style"]``: the style's name and, per benchmark (its spec as written, before the style),
    the hash of what the style decided."""
    return {"name": style, "sha256": {b: style_sha256(spec, style) for b, spec in specs.items()}}
