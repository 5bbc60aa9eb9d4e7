"""Prompt parity with MedHELM, and golden prompts for every spec.

* ``--prompt-style medhelm`` renders, for each public benchmark HELM can run, exactly the prompt (and decoding)
  HELM 0.5.16's own adapter rendered for the same item of the same native file (``golden/helm/``, made by
  ``tools/helm_golden.py`` with crfm-helm; CI only reads them). Jury benchmarks: the judge prompt too.
* Every spec's default-style prompt, decoding and judge prompt are frozen in ``golden/default/``: a prompt
  never changes unnoticed. After an intended change: ``MEDHELM_UPDATE_GOLDEN=1 pytest tests/parity``, and
  update ``medhelm_local/benchmarks/PARITY.md``.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import shipped_spec, shipped_specs
from medhelm_local.benchmarks.spec import Access, BenchmarkSpec
from medhelm_local.prompts.build import build_request
from medhelm_local.prompts.styles import (
    DEFAULT_STYLE,
    MEDHELM_STYLE,
    ParityUnavailable,
    parity_status,
    style_sha256,
    styled_spec,
)
from medhelm_local.records import Instance
from medhelm_local.scoring.jury import judge_prompt
from medhelm_local.scoring.metrics import exact_match
from tests.parity.helm_cases import helm_goldens, load_case_instance

GOLDEN_DEFAULT = Path(__file__).parent / "golden" / "default"
HELM_GOLDENS = {g["benchmark"]: g for g in helm_goldens()}
JUDGE_RESPONSE = "<<model response>>"  # what tools/helm_golden.py rendered HELM's judge prompt with
SPECS = sorted(shipped_specs(), key=lambda s: s.id)


def test_there_are_37_specs_and_a_golden_for_every_public_benchmark() -> None:
    assert len(SPECS) == 37
    public = {s.id for s in SPECS if s.access == Access.PUBLIC}
    assert len(public) == 16
    assert set(HELM_GOLDENS) == public


@pytest.mark.parametrize("benchmark", sorted(HELM_GOLDENS))
def test_medhelm_style_renders_helms_own_prompt_byte_for_byte(benchmark: str) -> None:
    golden = HELM_GOLDENS[benchmark]
    instance = load_case_instance(golden)
    spec = styled_spec(shipped_spec(benchmark), MEDHELM_STYLE)
    request = build_request(spec, instance)
    # HELM's chat clients send the whole prompt as one user message, no system message.
    assert [m.role for m in request.messages] == ["user"]
    assert request.messages[0].content == golden["prompt"]
    assert request.max_tokens == golden["max_tokens"]
    assert request.temperature == golden["temperature"]
    assert (request.stop or []) == golden["stop_sequences"]
    assert golden["num_completions"] == 1


@pytest.mark.parametrize("benchmark", sorted(b for b, g in HELM_GOLDENS.items() if "judge" in g))
def test_medhelm_style_judge_prompt_is_helms_annotator_prompt(benchmark: str) -> None:
    golden = HELM_GOLDENS[benchmark]
    instance = load_case_instance(golden)
    spec = styled_spec(shipped_spec(benchmark), MEDHELM_STYLE)
    assert judge_prompt(spec, instance, JUDGE_RESPONSE) == golden["judge"]["prompt"]
    assert sorted(golden["judge"]["criteria"]) == sorted(c.name for c in spec.judge.criteria)  # type: ignore[union-attr]
    # The default style's jury sees the whole filled prompt as {question}; HELM's sees the instance input only.
    default_prompt = judge_prompt(shipped_spec(benchmark), instance, JUDGE_RESPONSE)
    assert build_request(shipped_spec(benchmark), instance).messages[-1].content in default_prompt


@pytest.mark.parametrize("benchmark", sorted(HELM_GOLDENS))
def test_default_style_differs_from_helm_and_the_table_says_so(benchmark: str) -> None:
    golden = HELM_GOLDENS[benchmark]
    request = build_request(shipped_spec(benchmark), load_case_instance(golden))
    assert request.messages[-1].content != golden["prompt"]
    parity_doc = (Path(__file__).parents[2] / "medhelm_local" / "benchmarks" / "PARITY.md").read_text()
    assert f"| {benchmark} |" in parity_doc


@pytest.mark.parametrize("spec", [s for s in SPECS if parity_status(s) == "unavailable"], ids=lambda s: s.id)
def test_medhelm_style_refuses_where_parity_is_impossible(spec: BenchmarkSpec) -> None:
    with pytest.raises(ParityUnavailable) as caught:
        styled_spec(spec, MEDHELM_STYLE)
    assert caught.value.exit_code == 2
    assert spec.medhelm is not None and spec.medhelm.unavailable is not None
    assert spec.medhelm.unavailable in str(caught.value)


def test_every_spec_states_its_parity_and_names_helms_run_spec() -> None:
    statuses = {s.id: parity_status(s) for s in SPECS}
    assert "undefined" not in statuses.values()
    assert sorted(b for b, v in statuses.items() if v == "identical") == sorted(HELM_GOLDENS)
    assert all(s.medhelm is not None and s.medhelm.helm_run_spec for s in SPECS)


def test_style_hash_separates_styles_and_follows_the_template() -> None:
    spec = shipped_spec("pubmedqa")
    assert style_sha256(spec, DEFAULT_STYLE) != style_sha256(spec, MEDHELM_STYLE)
    assert spec.medhelm is not None and spec.medhelm.template is not None
    changed = spec.model_copy(update={"medhelm": spec.medhelm.model_copy(
        update={"template": spec.medhelm.template + " "})})
    assert style_sha256(changed, MEDHELM_STYLE) != style_sha256(spec, MEDHELM_STYLE)
    assert style_sha256(changed, DEFAULT_STYLE) == style_sha256(spec, DEFAULT_STYLE)


@pytest.mark.parametrize(("benchmark", "answer", "gold", "expected"), [
    ("pubmedqa", "A", "yes", 1.0), ("pubmedqa", "C", "maybe", 1.0), ("pubmedqa", "B", "yes", 0.0),
    ("race_bias", "B", "no", 1.0), ("medhallu", "1", "yes", 1.0), ("medhallu", "0", "yes", 0.0),
])
def test_medhelm_style_answers_are_scored_against_the_same_gold(benchmark: str, answer: str, gold: str,
                                                              expected: float) -> None:
    spec = styled_spec(shipped_spec(benchmark), MEDHELM_STYLE)
    instance = Instance(benchmark=benchmark, id="1", fields={}, references=[gold], label=gold)
    value, details = exact_match(spec, instance, answer)
    assert value == expected and details.parsed


# ---- default-style golden prompts, all 37 specs ----

def sample_instance(spec: BenchmarkSpec) -> Instance:
    """The HELM golden item where there is one; otherwise each template field filled with its own name."""
    if spec.id in HELM_GOLDENS:
        return load_case_instance(HELM_GOLDENS[spec.id])
    names = {n for _, n, _, _ in string.Formatter().parse(spec.prompt.template) if n}
    return Instance(benchmark=spec.id, id="sample", fields={n: f"<{n}>" for n in sorted(names)},
                    references=["<gold>"], label=spec.labels[0] if spec.labels else None)


def rendered(spec: BenchmarkSpec) -> dict[str, Any]:
    instance = sample_instance(spec)
    request = build_request(spec, instance)
    out: dict[str, Any] = {
        "benchmark": spec.id, "instance_id": instance.id,
        "messages": [m.model_dump() for m in request.messages],
        "max_tokens": request.max_tokens, "temperature": request.temperature, "stop": request.stop,
        "labels": spec.labels, "medhelm_parity": parity_status(spec),
    }
    if spec.judge is not None:
        out["judge_prompt"] = judge_prompt(spec, instance, JUDGE_RESPONSE)
    return out


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_default_prompt_matches_its_golden(spec: BenchmarkSpec) -> None:
    file = GOLDEN_DEFAULT / f"{spec.id}.json"
    now = rendered(spec)
    if os.environ.get("MEDHELM_UPDATE_GOLDEN") == "1":
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(now, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert file.is_file(), f"no golden prompt for {spec.id}: run with MEDHELM_UPDATE_GOLDEN=1 and review it"
    assert now == json.loads(file.read_text(encoding="utf-8")), (
        f"the {spec.id} prompt changed: if intended, regenerate with MEDHELM_UPDATE_GOLDEN=1 and update PARITY.md")
