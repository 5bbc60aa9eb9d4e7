"""The 37 shipped specs: ids, Appendix C placement/access/curation, taxonomy, metrics, prompts, rubrics."""

from __future__ import annotations

import string
import subprocess
import sys

import pytest

from medhelm_local.benchmarks.registry import shipped_spec, shipped_specs
from medhelm_local.benchmarks.spec import BenchmarkSpec, OutputType
from medhelm_local.loaders.base import available_loaders
from medhelm_local.scoring.checks import check_spec
from medhelm_local.scoring.registry import known_metrics
from medhelm_local.taxonomy import load_taxonomy

CDS, CNG, PCE, MRA, AW = ("Clinical Decision Support", "Clinical Note Generation",
                          "Patient Communication and Education", "Medical Research Assistance",
                          "Administration and Workflow")
# id -> (category, access, curation) as in Appendix C (MedQA and MedMCQA: Clinical Decision Support).
APPENDIX_C = {
    "medcalc_bench": (CDS, "public", "existing"), "clear": (CDS, "private", "reformulated"),
    "mtsamples": (CDS, "public", "reformulated"), "medec": (CDS, "public", "existing"),
    "ehrshot": (CDS, "gated", "existing"), "head_qa": (CDS, "public", "existing"),
    "medbullets": (CDS, "public", "existing"), "medalign": (CDS, "gated", "existing"),
    "adhd_behavior": (CDS, "private", "new"), "adhd_med_effects": (CDS, "private", "new"),
    "medqa": (CDS, "public", "existing"), "medmcqa": (CDS, "public", "existing"),
    "dischargeme": (CNG, "gated", "existing"), "aci_bench": (CNG, "public", "existing"),
    "mtsamples_procedures": (CNG, "public", "reformulated"), "mimic_rrs": (CNG, "gated", "reformulated"),
    "mimic_bhc": (CNG, "gated", "existing"), "note_extract": (CNG, "private", "new"),
    "medication_qa": (PCE, "public", "existing"), "patient_instruct": (PCE, "private", "new"),
    "med_dialog": (PCE, "public", "existing"), "med_conf_info": (PCE, "private", "new"),
    "mediqa_qa": (PCE, "public", "existing"), "mental_health": (PCE, "private", "new"),
    "privacy_detection": (PCE, "private", "new"), "proxy_sender": (PCE, "private", "new"),
    "pubmedqa": (MRA, "public", "existing"), "ehrsql": (MRA, "public", "existing"),
    "bmt_status": (MRA, "private", "new"), "race_bias": (MRA, "public", "reformulated"),
    "n2c2_ct": (MRA, "gated", "existing"), "medhallu": (MRA, "public", "existing"),
    "hospice_referral": (AW, "private", "new"), "mimic_iv_billing": (AW, "gated", "existing"),
    "clinic_referral": (AW, "private", "new"), "cdi_qa": (AW, "private", "new"),
    "ent_referral": (AW, "private", "new"),
}
OPEN_ENDED = {"aci_bench", "mtsamples", "mtsamples_procedures", "medalign", "dischargeme", "mimic_rrs", "mimic_bhc",
              "note_extract", "medication_qa", "patient_instruct", "med_dialog", "mediqa_qa", "mental_health"}
SPECS = {s.id: s for s in shipped_specs()}


def test_exactly_the_37_ids() -> None:
    assert set(SPECS) == set(APPENDIX_C)
    assert len(SPECS) == 37


@pytest.mark.parametrize("benchmark", sorted(APPENDIX_C))
def test_appendix_c_placement_access_curation(benchmark: str) -> None:
    spec = SPECS[benchmark]
    assert (spec.category, spec.access.value, spec.curation.value) == APPENDIX_C[benchmark]


def test_access_counts_match_the_paper_plus_medqa_medmcqa() -> None:
    access = [s.access.value for s in SPECS.values()]
    assert (access.count("public"), access.count("gated"), access.count("private")) == (16, 7, 14)


def test_subcategories_come_from_the_taxonomy_and_cover_all_22() -> None:
    taxonomy = load_taxonomy()
    for spec in SPECS.values():
        found = taxonomy.placement(spec.subcategory)
        assert found is not None, spec.id
        category, sub = found
        assert (category.name, sub.name) == (spec.category, spec.subcategory), spec.id
    assert {s.subcategory for s in SPECS.values()} == {s.name for s in taxonomy.subcategories}


@pytest.mark.parametrize("spec", list(SPECS.values()), ids=list(SPECS))
def test_spec_is_runnable_data(spec: BenchmarkSpec) -> None:
    assert spec.metric in known_metrics()
    check_spec(spec)  # its scorers' conditions and the instance fields they need, given by its loader options
    assert spec.input_format in available_loaders()
    fields = [f for _, f, _, _ in string.Formatter().parse(spec.prompt.template) if f]
    assert fields and all(f.isidentifier() for f in fields)
    if spec.output_type == OutputType.FREE_TEXT:
        assert spec.judge is not None
    if spec.output_type in (OutputType.CHOICE_LETTER, OutputType.YES_NO_MAYBE):
        assert spec.labels and spec.metric == "exact_match" and spec.max_tokens <= 16


def test_open_ended_benchmarks_are_jury_scored_with_appendix_f_rubrics() -> None:
    jury = {s.id for s in SPECS.values() if s.metric == "jury"}
    assert jury == OPEN_ENDED
    for benchmark in OPEN_ENDED:
        judge = SPECS[benchmark].judge
        assert judge is not None
        names = [c.name for c in judge.criteria]
        if benchmark == "note_extract":
            assert names == ["accuracy", "structure", "clarity"] and not judge.uses_gold
        else:
            assert names == ["accuracy", "completeness", "clarity"] and judge.uses_gold
        rendered = judge.template.format(question="QQ", response="RR", gold_response="GG", criteria="CC")
        assert "<response>RR</response>" in rendered and "CC" in rendered
        assert ("<gold_response>GG</gold_response>" in rendered) == judge.uses_gold
        assert "when needed" in rendered or not judge.uses_gold
        assert all(f'"{n}": {{"score"' in rendered for n in names)


def test_main_metrics() -> None:
    assert SPECS["medcalc_bench"].metric == "medcalc_accuracy"
    assert SPECS["medec"].metric == "medec_flag_accuracy"
    assert SPECS["ehrsql"].metric == "ehrsql_execution_accuracy"
    assert SPECS["mimic_iv_billing"].metric == "billing_micro_f1"
    assert SPECS["ehrsql"].output_type == OutputType.SQL
    assert SPECS["mimic_iv_billing"].output_type == OutputType.CODE_LIST
    assert SPECS["medcalc_bench"].output_type == OutputType.NUMBER_OR_DATE


def test_private_benchmarks_use_medhelms_private_format() -> None:
    private = [s for s in SPECS.values() if s.access.value == "private"]
    assert len(private) == 14
    for spec in private:
        assert spec.input_format == "private_table"
        assert spec.loader_options["fields"] == {"question": "prompt", "context": "context"}
        if spec.output_type == OutputType.CHOICE_LETTER:
            assert spec.loader_options["label_column"] == "label"
            assert spec.labels is not None and spec.labels[:2] == ["A", "B"]


def test_get_spec_unknown_is_not_found() -> None:
    from medhelm_local.errors import NotFoundError

    with pytest.raises(NotFoundError):
        shipped_spec("no_such_benchmark")


def test_a_shipped_spec_is_parsed_only_when_asked_for() -> None:
    """A command that uses three benchmarks parses their three files, not every shipped spec (about 11 ms at every
    `run`); a name that is no shipped file (a path, say) is never read."""
    code = (
        "from medhelm_local.benchmarks import registry\n"
        "parsed = []\n"
        "real = registry.parse_spec\n"
        "registry.parse_spec = lambda text, source: parsed.append(source) or real(text, source)\n"
        "registry.SpecRegistry().get('pubmedqa')\n"
        "registry.SpecRegistry().get('pubmedqa')\n"
        "registry.shipped_spec('medqa')\n"
        "for name in ('../registry', 'specs/pubmedqa'):\n"
        "    try:\n"
        "        registry.shipped_spec(name)\n"
        "    except Exception as exc:\n"
        "        assert type(exc).__name__ == 'NotFoundError', exc\n"
        "print(','.join(parsed))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "pubmedqa.yaml,medqa.yaml"
    assert len(shipped_specs()) == 37
