"""MTSamples on the real reports (issue 13 §1): the 40 reports of the shared sample, headings mid-line.

HELM's rule is re-stated here from its mtsamples_replicate / mtsamples_procedures scenarios (crfm-helm): a report
is kept when "PLAN:", "SUMMARY:" or "FINDINGS:" occurs in it (upper-cased text), and the reference is the rest of
that line in the original text (PLAN before SUMMARY before FINDINGS); a report where the case-sensitive split
fails is dropped by HELM's error handler.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.loaders import load_dataset
from medhelm_local.loaders.mtsamples import extract_reference
from medhelm_local.records import Instance

FOLDERS = {"mtsamples": "mtsamples_processed", "mtsamples_procedures": "mtsample_procedure"}


def helm_reference(text: str) -> str | None:
    text = text.strip()
    found: list[str | None] = []
    for key in ("PLAN:", "SUMMARY:", "FINDINGS:"):
        if key not in text.upper():
            found.append(None)
            continue
        parts = text.split(key)
        if len(parts) < 2:
            return None  # HELM: IndexError, caught, report skipped
        found.append(parts[1].split("\n", 1)[0].strip())
    return found[0] or found[1] or found[2]


def load(public_data: Path, benchmark: str) -> dict[str, Instance]:
    result = load_dataset(shipped_spec(benchmark), public_data / "mtsamples_sample" / FOLDERS[benchmark])
    return {i.id: i for i in result.instances}


@pytest.mark.parametrize(("benchmark", "files", "kept", "helm_kept"), [
    ("mtsamples", 25, 7, 7),
    ("mtsamples_procedures", 15, 4, 4),
])
def test_keeps_at_least_what_helm_keeps(public_data: Path, benchmark: str, files: int, kept: int,
                                        helm_kept: int) -> None:
    folder = public_data / "mtsamples_sample" / FOLDERS[benchmark]
    reports = {p.stem: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")}
    assert len(reports) == files
    helm = {name for name, text in reports.items() if helm_reference(text)}
    assert len(helm) == helm_kept
    instances = load(public_data, benchmark)
    assert len(instances) == kept  # before: 3 of 25, and none of the 15 procedure reports (the load failed)
    assert helm <= set(instances)
    for instance in instances.values():
        reference = instance.references[0]
        assert reference and reference not in instance.fields["context"]
        assert "Keywords:" not in instance.fields["context"] and "Keywords:" not in reference
        assert "Description:" not in instance.fields["context"]


def test_the_restated_rule_is_helms_own(public_data: Path) -> None:
    """HELM's own scenario code, run on these reports (tests/parity/golden/helm, made by crfm-helm 0.5.16's
    get_instances), keeps exactly the reports and references this module's restatement gives."""
    import json

    golden = Path(__file__).parents[1] / "parity" / "golden" / "helm"
    for benchmark, folder in FOLDERS.items():
        items = json.loads((golden / f"{benchmark}.json").read_text(encoding="utf-8"))["items"]
        files = (public_data / "mtsamples_sample" / folder).glob("*.txt")
        reports = {p.stem: p.read_text(encoding="utf-8") for p in files}
        restated = {name: ref for name, text in reports.items() if (ref := helm_reference(text))}
        assert restated == {item["instance_id"]: item["reference"] for item in items}


@pytest.mark.parametrize(("benchmark", "report", "section", "reference"), [
    # FINDINGS ends at the next heading in mid-line ("...ovaries.INDICATIONS:"); HELM's runs on through INDICATIONS
    ("mtsamples", "Low-Transverse C-Section - 5", "FINDINGS",
     "A viable male neonate in the left occiput transverse position with Apgars of 9 and 9 at 1 and 5 minutes "
     "respectively, weighing 3030 g. No nuchal cord. No meconium. Normal uterus, fallopian tubes, and ovaries."),
    # PLAN starts mid-line ("...6. Nephrolithiasis.PLAN:") and ends before the trailing Keywords line
    ("mtsamples", "Gen Med Consult - 5", "PLAN",
     "Patient is admitted for IV hydration and treatment of oral ulcerations. We will obtain a dermatology consult. "
     "IV leucovorin will be started, and the patient will be put on high-dose corticosteroids."),
    ("mtsamples", "Spine Fusion", "FINDINGS",
     "The patient was found to have a severe scoliosis. This was found to be moderately corrected. Hardware was "
     "found to be in good positions on AP and lateral projections using fluoroscopy."),
    # a compound heading: "GROSS OPERATIVE FINDINGS:", ended by "...condyle.OPERATIVE PROCEDURE:"
    ("mtsamples_procedures", "Arthroscopy, Meniscoplasty, & Chondroplasty", "FINDINGS",
     "We did find a tear to the medial meniscus as well as a large area of chondromalacia to the medial femoral "
     "condyle."),
    ("mtsamples_procedures", "Colonoscopy & Polypectomy - 3", "FINDINGS",
     "There is extensive sigmoid diverticulosis, without evidence of inflammation or bleeding. There was a small, "
     "sessile polyp in the sigmoid colon, and a larger pedunculated polyp in the sigmoid colon, both appeared "
     "adenomatous."),
])
def test_reference_is_the_section_alone(public_data: Path, benchmark: str, report: str, section: str,
                                        reference: str) -> None:
    instance = load(public_data, benchmark)[report]
    assert instance.meta["section"] == section
    assert instance.references == [reference]
    text = (public_data / "mtsamples_sample" / FOLDERS[benchmark] / f"{report}.txt").read_text(encoding="utf-8")
    helm = helm_reference(text)
    assert helm is not None and helm.startswith(reference)


def test_assessment_and_plan_heading(public_data: Path) -> None:
    instance = load(public_data, "mtsamples_procedures")["Vascular Surgery SOAP Note Sample Report #2"]
    assert instance.meta["section"] == "PLAN"
    reference = instance.references[0]
    assert reference.startswith("In summary, the patient is a (XX)-year-old man with a left popliteal")
    assert reference.endswith("The patient seems satisfied with this plan and recommendation.")
    assert "OBJECTIVE: On physical exam" in instance.fields["context"]


@pytest.mark.parametrize(("text", "expected"), [
    ("HPI: Cough.PLAN: Rest.ALLERGIES: None.", ("PLAN", "Rest.")),
    ("EXAM: Normal.\nASSESSMENT AND PLAN:\n1. Rest.\n2. Fluids.\nDISPOSITION: Home.", ("PLAN", "1. Rest.\n2. Fluids.")),
    ("PLAN: 1. DM: insulin. 2. HTN: lisinopril.\nKeywords: dm, htn", ("PLAN", "1. DM: insulin. 2. HTN: lisinopril.")),
    ("FINAL DIAGNOSIS: Carcinoma typeCOMMENT: None.FINDINGS: Mass at 10:30, 1:100,000 epinephrine.",
     ("FINDINGS", "Mass at 10:30, 1:100,000 epinephrine.")),
    ("SUMMARY: Stable.\nPLAN: Discharge.", ("PLAN", "Discharge.")),
    ("PLAN:\nSUMMARY: Stable.", ("SUMMARY", "Stable.")),
    ("HISTORY: Plan: none.", None),
    ("IMPRESSION:1. Renal failure.5. Pneumonitis.DISCUSSION/PLAN: Supportive care. I's and O's daily.\nKeywords: x",
     ("PLAN", "Supportive care. I's and O's daily.")),
])
def test_heading_forms(text: str, expected: tuple[str, str] | None) -> None:
    found = extract_reference(text, ["PLAN", "SUMMARY", "FINDINGS"])
    assert (found[:2] if found else None) == expected
