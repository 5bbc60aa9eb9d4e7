"""Every native format the suite reads, on small files written here in exactly that format."""

from __future__ import annotations

import csv
import gzip
import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from openpyxl import Workbook

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts import build_request


def _check_prompts(benchmark: str, result_instances: list) -> None:
    spec = shipped_spec(benchmark)
    for instance in result_instances:
        assert build_request(spec, instance).messages[-1].content


def _write_csv(path: Path, header: list[str], rows: list[list[object]], delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# ------------------------------------------------------------------ public formats


def test_headqa_json(tmp_path: Path) -> None:
    data = {"exams": {"cuaderno_2013_1_B": {"name": "Cuaderno_2013_1_B", "data": [
        {"qid": 1, "qtext": "Which treatment is most appropriate?", "ra": 4, "category": "biology",
         "answers": [{"aid": 2, "atext": "Azithromycin"}, {"aid": 1, "atext": "Praziquantel"},
                     {"aid": 3, "atext": "Metronidazole"}, {"aid": 4, "atext": "Albendazole"}]},
        {"qid": 2, "qtext": "Second question?", "ra": 1, "category": "biology",
         "answers": [{"aid": 1, "atext": "Yes"}, {"aid": 2, "atext": "No"}]},
    ]}}}
    (tmp_path / "HEAD_EN.json").write_text(json.dumps(data), encoding="utf-8")
    result = load_dataset(shipped_spec("head_qa"), tmp_path)
    first = result.instances[0]
    assert first.id == "cuaderno_2013_1_B:1"
    assert first.label == "D"
    assert first.fields["options"].splitlines() == ["A. Praziquantel", "B. Azithromycin", "C. Metronidazole",
                                                    "D. Albendazole"]
    assert first.meta["exam"] == "cuaderno_2013_1_B"
    _check_prompts("head_qa", result.instances)


def test_medbullets_csv(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "medbullets_op5.csv",
                      ["question", "opa", "opb", "opc", "opd", "ope", "answer_idx", "explanation"],
                      [["A 45-year-old man ...?", "a", "b", "c", "d", "e", "C", "Because c."],
                       ["A 3-year-old girl ...?", "v", "w", "x", "y", "z", "E", "Because z."]])
    result = load_dataset(shipped_spec("medbullets"), path)
    assert [i.id for i in result.instances] == ["0", "1"]
    assert [i.label for i in result.instances] == ["C", "E"]
    assert result.instances[0].fields["options"].endswith("E. e")
    assert result.instances[0].meta["explanation"] == "Because c."


def test_medmcqa_jsonl_one_based_cop(tmp_path: Path) -> None:
    rows = [{"id": "e9ad821a", "question": "Q1?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 1,
             "subject_name": "Anatomy", "exp": "x"},
            {"id": "5e7ca1b2", "question": "Q2?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 4,
             "subject_name": "Surgery", "exp": None}]
    path = tmp_path / "dev.json"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    result = load_dataset(shipped_spec("medmcqa"), path)
    assert [(i.id, i.label) for i in result.instances] == [("e9ad821a", "A"), ("5e7ca1b2", "D")]
    assert result.instances[1].meta["explanation"] is None


def test_medication_qa_xlsx(tmp_path: Path) -> None:
    book = Workbook()
    sheet = book.active
    sheet.append(["Question", "Focus (Drug)", "Question Type", "Answer", "Section Title", "URL"])
    sheet.append(["how does rivatigmine and otc sleep medicine interact", "rivastigmine", "Interaction",
                  "tell your doctor and pharmacist what prescription and nonprescription medications ...",
                  "What special precautions should I follow?", "https://medlineplus.gov/"])
    sheet.append(["what is the dosage of amoxicillin for a child", "amoxicillin", "Dose", "It depends ...",
                  None, None])
    path = tmp_path / "MedInfo2019-QA-Medications.xlsx"
    book.save(path)
    result = load_dataset(shipped_spec("medication_qa"), path)
    assert len(result.instances) == 2
    assert result.instances[0].references[0].startswith("tell your doctor")
    assert result.instances[1].meta == {"focus": "amoxicillin", "question_type": "Dose"}


def test_mediqa_xml_reference_is_rank_one(tmp_path: Path) -> None:
    xml = """<?xml version="1.0" encoding="UTF-8"?>
<MEDIQA2019-Task3-QA-TestSet>
  <Question QID="1">
    <QuestionText>What are the symptoms of thyroid cancer?</QuestionText>
    <AnswerList>
      <Answer AID="1_Answer1" SystemRank="1" ReferenceRank="2" ReferenceScore="3">
        <AnswerURL>u1</AnswerURL><AnswerText>Second best.</AnswerText></Answer>
      <Answer AID="1_Answer2" SystemRank="2" ReferenceRank="1" ReferenceScore="4">
        <AnswerURL>u2</AnswerURL><AnswerText>A lump in the neck.</AnswerText></Answer>
    </AnswerList>
  </Question>
  <Question QID="2">
    <QuestionText>Unranked question?</QuestionText>
    <AnswerList><Answer AID="2_Answer1" ReferenceRank="3"><AnswerText>x</AnswerText></Answer></AnswerList>
  </Question>
</MEDIQA2019-Task3-QA-TestSet>"""
    path = tmp_path / "MEDIQA2019-Task3-QA-TestSet-wLabels.xml"
    path.write_text(xml, encoding="utf-8")
    result = load_dataset(shipped_spec("mediqa_qa"), path)
    assert [i.id for i in result.instances] == ["1"]
    assert result.instances[0].references == ["A lump in the neck."]
    assert result.skipped == {"no answer with ReferenceRank 1": 1}


@pytest.mark.parametrize("wrapped", [True, False])
def test_med_dialog_json(tmp_path: Path, wrapped: bool) -> None:
    records = [{"src": "Patient: I have pain in my left arm.\nDoctor: Please see a doctor.",
                "tgt": "Arm pain that needs examination."}]
    (tmp_path / "test.json").write_text(json.dumps({"data": records} if wrapped else records), encoding="utf-8")
    spec = shipped_spec("med_dialog")
    if wrapped:
        spec = spec.model_copy(update={"loader_options": {**spec.loader_options, "records_key": "data"}})
    result = load_dataset(spec, tmp_path / "test.json")
    assert result.instances[0].references == ["Arm pain that needs examination."]


def test_mtsamples_folder_reference_section_removed_and_skips_counted(tmp_path: Path) -> None:
    (tmp_path / "cardio").mkdir()
    (tmp_path / "cardio" / "chest pain.txt").write_text(
        "HISTORY OF PRESENT ILLNESS: A 54-year-old man with chest pain.\n\n"
        "PHYSICAL EXAMINATION: Normal.\n\nPLAN: Stress test and aspirin.\n\nDISPOSITION: Home.\n",
        encoding="utf-8")
    (tmp_path / "summary.txt").write_text("DIAGNOSIS: Cough.\n\nSUMMARY: Viral bronchitis, supportive care.\n",
                                          encoding="utf-8")
    (tmp_path / "no_plan.txt").write_text("HISTORY: Something.\n\nEXAM: Normal.\n", encoding="utf-8")
    result = load_dataset(shipped_spec("mtsamples"), tmp_path)
    by_id = {i.id: i for i in result.instances}
    assert set(by_id) == {"cardio/chest pain", "summary"}
    plan = by_id["cardio/chest pain"]
    assert plan.references == ["Stress test and aspirin."]
    assert "Stress test" not in plan.fields["context"] and "DISPOSITION: Home." in plan.fields["context"]
    assert plan.meta["section"] == "PLAN"
    assert by_id["summary"].meta["section"] == "SUMMARY"
    assert result.skipped == {"no PLAN, SUMMARY or FINDINGS section": 1}
    _check_prompts("mtsamples", result.instances)
    _check_prompts("mtsamples_procedures", load_dataset(shipped_spec("mtsamples_procedures"), tmp_path).instances)


def test_race_bias_csv(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "race_based.csv", ["Category", "Question", "Response", "True/False"],
                      [["eGFR", "How do I calculate eGFR?", "Multiply by 1.159 for Black patients.", "True"],
                       ["Skin", "Is skin thickness different?", "No, there is no difference.", "False"]])
    result = load_dataset(shipped_spec("race_bias"), path)
    assert [i.label for i in result.instances] == ["yes", "no"]


# ------------------------------------------------------------------ gated formats


def _gz_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    plain = _write_csv(path.with_suffix(""), header, rows)
    path.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    return path


def test_dischargeme_csv_gz_set(tmp_path: Path) -> None:
    bhc = "Patient admitted with pneumonia, treated with antibiotics, improved."
    di = "You were treated for pneumonia. Take your antibiotics."
    discharge = f"Name: ___\nChief Complaint: cough\nBrief Hospital Course:\n{bhc}\nDischarge Instructions:\n{di}\n"
    _gz_csv(tmp_path / "discharge.csv.gz", ["note_id", "subject_id", "hadm_id", "note_type", "text"],
            [["1-DS-1", 1, 2001, "DS", discharge]])
    _gz_csv(tmp_path / "radiology.csv.gz", ["note_id", "subject_id", "hadm_id", "note_type", "text"],
            [["1-RR-1", 1, 2001, "RR", "CXR: right lower lobe consolidation."],
             ["1-RR-2", 1, 2001, "RR", "CXR: improving consolidation."]])
    _gz_csv(tmp_path / "discharge_target.csv.gz", ["note_id", "hadm_id", "discharge_instructions",
                                                   "brief_hospital_course"], [["1-DS-1", 2001, di, bhc]])
    result = load_dataset(shipped_spec("dischargeme"), tmp_path)
    by_id = {i.id: i for i in result.instances}
    assert set(by_id) == {"2001:brief_hospital_course", "2001:discharge_instructions"}
    course = by_id["2001:brief_hospital_course"]
    assert course.references == [bhc]
    assert bhc not in course.fields["discharge"] and di not in course.fields["discharge"]
    assert "consolidation" in course.fields["radiology"]
    assert course.meta == {"hadm_id": "2001", "target": "brief_hospital_course"}
    _check_prompts("dischargeme", result.instances)


def test_mimic_rrs_line_aligned(tmp_path: Path) -> None:
    (tmp_path / "mimic_iii_test.findings.tok").write_text("no acute process .\nlungs are clear .\n\n",
                                                         encoding="utf-8")
    (tmp_path / "mimic_iii_test.impression.tok").write_text("normal chest .\nno pneumonia .\n\n", encoding="utf-8")
    result = load_dataset(shipped_spec("mimic_rrs"), tmp_path)
    assert [(i.id, i.fields["findings"], i.references) for i in result.instances] == [
        ("0", "no acute process .", ["normal chest ."]), ("1", "lungs are clear .", ["no pneumonia ."])]
    assert result.skipped == {"blank line pair": 1}


def test_mimic_bhc_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "mimic-iv-bhc.jsonl"
    path.write_text(json.dumps({"input": "<SEX> F <SERVICE> MEDICINE ... note", "target": "Brief course."}) + "\n",
                    encoding="utf-8")
    result = load_dataset(shipped_spec("mimic_bhc"), path)
    assert result.instances[0].references == ["Brief course."]


def test_medalign_tsv_and_ehr_xml(tmp_path: Path) -> None:
    (tmp_path / "ehrs").mkdir()
    events = "".join(f'<visit start="01/0{d}/2020"><event type="condition" code="I10">Hypertension {d}</event>'
                     f"</visit>\n" for d in range(1, 10))
    (tmp_path / "ehrs" / "JC1.xml").write_text(f'<eventstream person_id="11">\n{events}</eventstream>\n',
                                               encoding="utf-8")
    _write_csv(tmp_path / "clinician-instruction-responses.tsv",
               ["instruction_id", "question", "clinician_response", "person_id", "filename"],
               [[7, "Summarize the blood pressure history.", "Hypertension since 2020.", 11, "JC1.xml"],
                [8, "What is the last visit?", "", 11, "JC1.xml"]], delimiter="\t")
    spec = shipped_spec("medalign")
    result = load_dataset(spec, tmp_path)
    assert [i.id for i in result.instances] == ["7"]
    assert result.skipped == {"no clinician response": 1}
    instance = result.instances[0]
    assert "Hypertension 9" in instance.fields["ehr"] and instance.meta["ehr_truncated"] is False
    small = spec.model_copy(update={"loader_options": {"max_context_tokens": 40}})
    truncated = load_dataset(small, tmp_path).instances[0]
    assert truncated.meta["ehr_truncated"] is True
    assert "Hypertension 9" in truncated.fields["ehr"] and "Hypertension 1<" not in truncated.fields["ehr"]
    _check_prompts("medalign", result.instances)


def _meds_folder(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "metadata").mkdir()
    (root / "labels").mkdir()
    from datetime import datetime as dt

    events = pa.table({
        "subject_id": pa.array([1, 1, 1, 1, 2, 2, 3], pa.int64()),
        "time": pa.array([None, dt(2020, 1, 1), dt(2020, 6, 1), dt(2021, 3, 1), dt(2019, 5, 5), dt(2019, 6, 6),
                          dt(2018, 1, 1)], pa.timestamp("us")),
        "code": ["MEDS_BIRTH", "SNOMED/38341003", "LOINC/2160-0", "SNOMED/22298006", "SNOMED/44054006",
                 "LOINC/4548-4", "SNOMED/1"],
        "numeric_value": pa.array([None, None, 1.4, None, None, 8.1, None], pa.float32()),
    })
    pq.write_table(events, root / "data" / "0.parquet")
    pq.write_table(pa.table({"code": ["SNOMED/38341003", "LOINC/2160-0"],
                             "description": ["Hypertension", "Creatinine"]}), root / "metadata" / "codes.parquet")
    pq.write_table(pa.table({"subject_id": pa.array([1, 2, 3], pa.int64()),
                             "split": ["held_out", "held_out", "train"]}),
                   root / "metadata" / "subject_splits.parquet")
    pq.write_table(pa.table({
        "subject_id": pa.array([1, 2, 3], pa.int64()),
        "prediction_time": pa.array([dt(2020, 12, 31), dt(2019, 12, 31), dt(2019, 1, 1)], pa.timestamp("us")),
        "boolean_value": [True, False, True],
    }), root / "labels" / "new_acutemi.parquet")
    return root


def test_ehrshot_meds_parquet(tmp_path: Path) -> None:
    root = _meds_folder(tmp_path / "ehrshot")
    result = load_dataset(shipped_spec("ehrshot"), root)
    by_id = {i.id: i for i in result.instances}
    assert set(by_id) == {"new_acutemi:1:2020-12-31T00:00", "new_acutemi:2:2019-12-31T00:00"}
    first = by_id["new_acutemi:1:2020-12-31T00:00"]
    assert first.label == "yes"
    timeline = first.fields["timeline"]
    assert timeline.index("Hypertension (SNOMED/38341003)") < timeline.index("Creatinine (LOINC/2160-0) = 1.4")
    assert "SNOMED/22298006" not in timeline  # after the prediction time
    assert "MEDS_BIRTH" in timeline
    assert first.meta["task"] == "new_acutemi" and first.meta["subject_id"] == 1
    assert "myocardial infarction" in first.fields["question"]
    _check_prompts("ehrshot", result.instances)


def test_meds_codes_without_descriptions_load(tmp_path: Path) -> None:
    """A codes.parquet whose descriptions are all missing (pandas writes a column of None as Parquet's null type,
    which DuckDB reads as INTEGER) was refused as "a column of text (it is of type INTEGER)": codes name the events."""
    root = _meds_folder(tmp_path / "ehrshot")
    pq.write_table(pa.table({"code": ["SNOMED/38341003", "LOINC/2160-0"], "description": pa.nulls(2)}),
                   root / "metadata" / "codes.parquet")
    result = load_dataset(shipped_spec("ehrshot"), root)
    timeline = {i.id: i for i in result.instances}["new_acutemi:1:2020-12-31T00:00"].fields["timeline"]
    assert "SNOMED/38341003" in timeline and "Creatinine (LOINC/2160-0) = 1.4" not in timeline
    pq.write_table(pa.table({"code": ["SNOMED/38341003"], "description": pa.array([7], pa.int64())}),
                   root / "metadata" / "codes.parquet")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert (info.value.column, "a column of text (it is of type BIGINT)") == ("description", info.value.expected)

def test_n2c2_cohort_selection_xml(tmp_path: Path) -> None:
    xml = """<?xml version="1.0" encoding="UTF-8" ?>
<PatientMatching>
<TEXT><![CDATA[
Record date: 2069-04-07
Patient with diabetes, HbA1c 7.2%. Speaks English.
]]></TEXT>
<TAGS>
<ABDOMINAL met="not met" />
<ENGLISH met="met" />
<HBA1C met="met" />
</TAGS>
</PatientMatching>"""
    (tmp_path / "100.xml").write_text(xml, encoding="utf-8")
    result = load_dataset(shipped_spec("n2c2_ct"), tmp_path)
    assert [(i.id, i.label) for i in result.instances] == [("100:ABDOMINAL", "no"), ("100:ENGLISH", "yes"),
                                                           ("100:HBA1C", "yes")]
    assert "HbA1c" in result.instances[2].fields["criterion"]
    _check_prompts("n2c2_ct", result.instances)


@pytest.mark.parametrize("kind", ["parquet", "feather"])
def test_mimic_iv_billing_codes(tmp_path: Path, kind: str) -> None:
    table = pa.table({"text": ["Discharge note: CHF exacerbation, diabetes.", "Note two."],
                      "target": [["I50.9", "E11.9"], ["J18.9"]]})
    path = tmp_path / f"billing.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    result = load_dataset(shipped_spec("mimic_iv_billing"), path)
    assert [i.references for i in result.instances] == [["I50.9", "E11.9"], ["J18.9"]]
    _check_prompts("mimic_iv_billing", result.instances)


SHEET_ENT = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}


def test_sheet_dates_read_as_the_cells_format_shows_them(tmp_path: Path) -> None:
    # openpyxl reads a date-formatted cell as a datetime, never the serial number (45292); a date-only cell reached
    # the prompt as "2024-01-01T00:00:00", a time the cell never had. A General cell holding 45292 stays a number,
    # and a date-typed column refuses it rather than guess an epoch. Mac Excel's 1904 date system reads the same.
    from openpyxl.utils.datetime import CALENDAR_MAC_1904

    for epoch in (None, CALENDAR_MAC_1904):
        workbook = Workbook()
        if epoch is not None:
            workbook.epoch = epoch
        sheet = workbook.active
        sheet.append(["ref_id", "note", "prompt", "outcome", "seen"])
        cells = [(datetime(2024, 1, 1), "m/d/yy"), (datetime(2024, 1, 1), "[$-409]d-mmm-yy;@"),
                 (datetime(2024, 1, 1, 12, 30, 45), "yyyy-mm-dd hh:mm:ss"), (45292, "General")]
        for number, (value, number_format) in enumerate(cells, start=1):
            sheet.append([number, value, "Refer?", "A", value])
            for column in ("B", "E"):
                sheet[f"{column}{number + 1}"].number_format = number_format
        path = tmp_path / "dates.xlsx"
        workbook.save(path)
        options = {**SHEET_ENT, "meta": {"seen": "seen"}, "types": {"seen": "date"}}
        spec = shipped_spec("ent_referral").model_copy(update={"loader_options": options})
        with pytest.raises(ExtractError) as info:  # the General serial number is not a date
            load_dataset(spec, path)
        assert (str(info.value.place), info.value.column, info.value.expected) == (
            "row 5 (the 4th data row)", "seen", "a date")
        instances = load_dataset(spec.model_copy(update={"loader_options": {**SHEET_ENT, "meta": {"seen": "seen"}}}),
                                 path).instances
        assert [i.fields["context"] for i in instances] == ["2024-01-01", "2024-01-01", "2024-01-01T12:30:45",
                                                             "45292"]
        assert [i.meta["seen"] for i in instances] == ["2024-01-01", "2024-01-01", "2024-01-01T12:30:45", 45292]
