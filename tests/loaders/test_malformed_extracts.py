"""Malformed extracts: each problem is one precise ExtractError (file, row, column, expectation), the message
never carries the offending value (it may be patient text), and nothing is returned."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders import load_dataset
from tests.conftest import Cli


def spec_with(benchmark: str, **changes: object) -> BenchmarkSpec:
    return shipped_spec(benchmark).model_copy(update=changes)

SECRET = "Jane Q. Patient MRN 0042"


def _hospice() -> BenchmarkSpec:
    return shipped_spec("hospice_referral")


def _fail(spec: BenchmarkSpec, path: Path) -> ExtractError:
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, path)
    error = info.value
    assert SECRET not in str(error)
    assert error.file
    return error


def test_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text(f"prompt,context\nRefer to hospice?,{SECRET}\n", encoding="utf-8")
    error = _fail(_hospice(), path)
    assert (error.file, error.place, error.column) == (str(path), None, "label")
    assert "a column named 'label'" in error.expected and "the header has 2 column name(s), not shown" in error.expected


def test_wrong_type(tmp_path: Path) -> None:
    header = ("Row Number,Calculator ID,Calculator Name,Category,Output Type,Note ID,Note Type,Patient Note,"
              "Question,Relevant Entities,Ground Truth Answer,Lower Limit,Upper Limit,Ground Truth Explanation")
    good = '1,2,CrCl,lab,decimal,n1,Extracted,"A note.",What is CrCl?,{},25.2,24,26,x'
    bad = f'2,2,CrCl,lab,decimal,n2,Extracted,"A note.",What is CrCl?,{{}},"{SECRET}",24,26,x'
    path = tmp_path / "test_data.csv"
    path.write_text(f"{header}\n{good}\n{bad}\n", encoding="utf-8")
    error = _fail(shipped_spec("medcalc_bench"), path)
    assert (str(error.place), error.column) == ("row 3 (the 2nd data row)", "Ground Truth Answer")
    assert error.expected.startswith("a number, a date")


def test_wrong_type_in_id_column(tmp_path: Path) -> None:
    path = tmp_path / "followup.csv"
    path.write_text(f'note_id,note_text,question,followup\n{SECRET},"note",q?,yes\n', encoding="utf-8")
    spec = spec_with("hospice_referral", loader_options={
        "id_column": "note_id", "fields": {"context": "note_text", "question": "question"},
        "label_column": "followup", "types": {"note_id": "int"}}, label_map={"yes": "A", "no": "B"})
    error = _fail(spec, path)
    assert (str(error.place), error.column, error.expected) == ("row 2 (the 1st data row)", "note_id", "an integer")


def test_label_outside_the_label_map(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text(f"prompt,context,label\nRefer?,ok,A\nRefer?,{SECRET},Z\n", encoding="utf-8")
    error = _fail(_hospice(), path)
    assert (str(error.place), error.column) == ("row 3 (the 2nd data row)", "label")
    assert "label map" in error.expected


def test_a_label_in_another_case_is_refused_with_how_labels_are_matched(tmp_path: Path) -> None:
    """An extract writing `Yes` where the spec's label_map has `yes` (Excel, a report tool) was refused with
    "expected a label in the label map ('yes', 'no')" only: the value is never shown, so nothing told the user that
    case counts (spaces around a label do not) or what to do. The message now says both, whatever the value."""
    path = tmp_path / "followup.csv"
    path.write_text(f"note_id,note_text,question,followup\n7,{SECRET},q?,yes\n8,b,q?,Yes\n", encoding="utf-8")
    spec = spec_with("hospice_referral", loader_options={
        "id_column": "note_id", "fields": {"context": "note_text", "question": "question"},
        "label_column": "followup"}, label_map={"yes": "A", "no": "B"})
    error = _fail(spec, path)
    assert (str(error.place), error.column) == ("row 3 (the 2nd data row)", "followup")
    assert error.expected == ("a label in the label map ('yes', 'no'; matched exactly, upper and lower case included, "
                              "spaces around it ignored: list each spelling the file uses in label_map)")
    path.write_text("note_id,note_text,question,followup\n7,a,q?, yes \n8,b,q?,no\n", encoding="utf-8")
    assert [i.label for i in load_dataset(spec, path).instances] == ["A", "B"]


def test_duplicate_id(tmp_path: Path) -> None:
    path = tmp_path / "followup.csv"
    path.write_text("note_id,note_text,question,followup\n7,a,q?,yes\n8,b,q?,no\n7,c,q?,no\n", encoding="utf-8")
    spec = spec_with("hospice_referral", loader_options={
        "id_column": "note_id", "fields": {"context": "note_text", "question": "question"},
        "label_column": "followup"}, label_map={"yes": "A", "no": "B"})
    error = _fail(spec, path)
    assert (str(error.place), error.column) == ("row 4 (the 3rd data row)", "note_id")
    assert "this row's id is the id of row 2 (the 1st data row)" in error.expected


def test_empty_id(tmp_path: Path) -> None:
    path = tmp_path / "test.json"
    path.write_text(json.dumps([{"id": "", "question": "q", "query": "select 1", "is_impossible": False,
                                 "db_id": "eicu"}]), encoding="utf-8")
    (tmp_path / "eicu.sqlite").write_bytes(b"")
    (tmp_path / "eicu.sql").write_text("CREATE TABLE patient (x int);", encoding="utf-8")
    error = _fail(shipped_spec("ehrsql"), tmp_path)
    assert (str(error.place), error.column, error.expected) == ("record 1 (counting from 1)", "id", "a non-empty value")


def test_empty_value_in_a_required_field(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text("prompt,context,label\nRefer?,,A\n", encoding="utf-8")
    error = _fail(_hospice(), path)
    assert (str(error.place), error.column) == ("row 2 (the 1st data row)", "context")
    assert error.expected == "a non-empty value"


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_bytes(b"")
    assert _fail(_hospice(), path).expected == "a non-empty file"


def test_header_only_file_holds_no_instance(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text("prompt,context,label\n", encoding="utf-8")
    assert "at least one instance" in _fail(_hospice(), path).expected


def test_semicolon_separated_csv_is_named_as_such(tmp_path: Path) -> None:
    # Excel in a locale whose decimal mark is a comma saves "CSV" with ';', a BOM and CRLF line ends
    path = tmp_path / "hospice.csv"
    path.write_bytes(f"prompt;context;label\r\nRefer?;\"{SECRET}, stable\";A\r\n".encode("utf-8-sig"))
    error = _fail(_hospice(), path)
    assert (error.place, error.column) == (None, None)
    assert "semicolon-separated" in error.expected and "CSV UTF-8 (comma delimited)" in error.expected


def test_tab_separated_file_named_csv_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text(f"prompt\tcontext\tlabel\nRefer?\t{SECRET}\tA\n", encoding="utf-8")
    error = _fail(_hospice(), path)
    assert "tab-separated" in error.expected and "format: tsv" in error.expected


def test_one_column_csv_is_not_taken_for_another_separator(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text("prompt\nRefer?\n", encoding="utf-8")
    assert "a column named 'context'" in _fail(_hospice(), path).expected


def test_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_bytes("prompt,context,label\nRefer?,caf\u00e9 note,A\n".encode("latin-1"))
    error = _fail(_hospice(), path)
    assert error.expected.startswith("UTF-8 text (invalid byte at line 2")


@pytest.mark.parametrize(("kind", "expected"), [
    ("gzip", "gzip-compressed: name it hospice.csv.gz"),
    ("parquet", "a Parquet file: name it .parquet"),
    ("xlsx", "a ZIP archive, as an Excel workbook is"),
    ("utf-32", "UTF-32 text, as its byte-order mark says"),
])
def test_a_binary_file_named_csv_says_what_it_is(tmp_path: Path, kind: str, expected: str) -> None:
    """A gzip-compressed extract named .csv was refused as "UTF-8 text (invalid byte at line 1, offset 1)", a
    Parquet file or workbook named .csv likewise: nothing said what the file was, or what to do."""
    text = f"prompt,context,label\nRefer?,{SECRET},A\n"
    path = tmp_path / "hospice.csv"
    if kind == "gzip":
        path.write_bytes(gzip.compress(text.encode()))
    elif kind == "utf-32":
        path.write_bytes(text.encode("utf-32"))
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"prompt": ["Refer?"], "context": [SECRET], "label": ["A"]}), path)
    else:
        from openpyxl import Workbook

        workbook = Workbook()
        workbook.active.append(["prompt", "context", "label"])
        workbook.active.append(["Refer?", SECRET, "A"])
        workbook.save(path)
    assert expected in _fail(_hospice(), path).expected


@pytest.mark.parametrize(("make", "expected"), [
    (lambda text: text.encode("utf-16-le"), "UTF-16 without its byte-order mark"),
    (lambda text: text.encode() + b"\x00" * 5000, "without NUL bytes (one at line 3"),
    (lambda text: text.replace("note", "no\x00te", 1).encode(), "without NUL bytes (one at line 2"),
])
def test_nul_bytes_in_a_text_extract_are_refused(tmp_path: Path, make: Callable[[str], bytes],
                                                 expected: str) -> None:
    """UTF-16 saved without its byte-order mark was refused as a row of the wrong field count; a copy cut short
    and padded with zeros (a 2 GB one: 38 s and 12.7 GB of memory) as a field over the CSV cap, "raise the cap";
    one NUL inside a note registered, the NUL in the prompt."""
    path = tmp_path / "hospice.csv"
    path.write_bytes(make(f"prompt,context,label\nRefer?,{SECRET} note,A\n"))
    assert expected in _fail(_hospice(), path).expected


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(("prompt,context,label\n" + "Refer?,note,A\n" * 200).encode())
    path = tmp_path / "hospice.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "complete gzip stream" in _fail(_hospice(), path).expected


def test_a_plain_file_named_gz_is_named_as_not_compressed(tmp_path: Path) -> None:
    """A CSV left uncompressed but named .csv.gz was refused as "a complete gzip stream (the file is truncated or
    damaged)": the file was whole, only its name was wrong."""
    path = tmp_path / "hospice.csv.gz"
    path.write_text(f"prompt,context,label\nRefer?,{SECRET},A\n", encoding="utf-8")
    assert "it is not compressed: name it without the .gz" in _fail(_hospice(), path).expected


def test_truncated_gzip_in_dischargeme_set(tmp_path: Path) -> None:
    for name in ("discharge", "radiology", "discharge_target"):
        (tmp_path / f"{name}.csv.gz").write_bytes(gzip.compress(b"hadm_id,text\n1,x\n")[:12])
    error = _fail(shipped_spec("dischargeme"), tmp_path)
    assert error.file.endswith("discharge.csv.gz") and "gzip" in error.expected


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"question": "q", "options": {"A": "a"}, "answer_idx": "A", "meta_info": "step1"}\n'
                    '{"question": \n', encoding="utf-8")
    error = _fail(shipped_spec("medqa"), path)
    assert str(error.place) == "line 2" and "this line is not JSON" in error.expected


def test_answer_outside_the_options(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    row = {"question": SECRET, "options": {"A": "a", "B": "b"}, "answer_idx": "F", "meta_info": "step1"}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    error = _fail(shipped_spec("medqa"), path)
    assert (str(error.place), error.column) == ("line 1", "answer_idx") and "A, B" in error.expected


def test_damaged_parquet(tmp_path: Path) -> None:
    path = tmp_path / "billing.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    assert _fail(shipped_spec("mimic_iv_billing"), path).expected == "a readable Parquet file"


@pytest.mark.parametrize("name", ["medicationqa.json", "medicationqa.csv"])
def test_a_workbook_spec_given_another_file_is_bad_input(tmp_path: Path, name: str) -> None:
    path = tmp_path / name  # MedicationQA reads .xlsx; openpyxl refuses any other file name with its own error
    path.write_text('[{"Question": "q", "Answer": "a"}]\n', encoding="utf-8")
    assert _fail(shipped_spec("medication_qa"), path).expected == "a readable Excel .xlsx workbook"


def test_an_encrypted_workbook_is_named_as_encrypted(tmp_path: Path) -> None:
    """A workbook protected by a password or a sensitivity label (Office wraps it in an OLE container) was refused
    as "a readable Excel .xlsx workbook", as a damaged one is: nothing said it was protected."""
    path = tmp_path / "hospice.xlsx"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4096))
    assert "this file is encrypted" in _fail(_hospice(), path).expected


def test_a_quote_left_open_is_refused_not_read_to_the_end_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"  # three rows; the lenient reader made one instance of them, silently
    path.write_text(f'label,prompt,context\nA,q,"{SECRET} open\nB,q,second note\nA,q,third note\n', encoding="utf-8")
    error = _fail(shipped_spec("hospice_referral"), path)
    assert str(error.place) == "row 2 (the 1st data row)" and "never closed" in error.expected
    assert SECRET not in str(error)


def test_quirks_the_lenient_reader_accepts_still_load(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text('prompt,context,label\nq,"a note" with a tail,A\nq,"closed",B\n', encoding="utf-8")
    assert [i.fields["context"] for i in load_dataset(shipped_spec("hospice_referral"), path).instances] == [
        "a note with a tail", "closed"]


def test_line_pairs_must_align(tmp_path: Path) -> None:
    (tmp_path / "test.findings.tok").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "test.impression.tok").write_text("a\n", encoding="utf-8")
    error = _fail(shipped_spec("mimic_rrs"), tmp_path)
    assert error.file.endswith("test.impression.tok") and "as many lines as test.findings.tok" in error.expected


def test_n2c2_unknown_met_value(tmp_path: Path) -> None:
    (tmp_path / "101.xml").write_text(
        f'<PatientMatching><TEXT>{SECRET}</TEXT><TAGS><ENGLISH met="perhaps"/></TAGS></PatientMatching>',
        encoding="utf-8")
    error = _fail(shipped_spec("n2c2_ct"), tmp_path)
    assert (str(error.place), error.column) == ("criterion tag 1 (counting from 1)", "ENGLISH")


def test_malformed_xml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "qa.xml"
    path.write_text("<Questions>\n<Question QID='1'>\n</Questions>", encoding="utf-8")
    assert "well-formed XML (error at line 3" in _fail(shipped_spec("mediqa_qa"), path).expected


def test_unknown_loader_option_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text("prompt,context,label\nq,c,A\n", encoding="utf-8")
    spec = spec_with("hospice_referral", loader_options={"fields": {"question": "prompt"}, "lable_column": "label"})
    with pytest.raises(BadInputError, match="lable_column"):
        load_dataset(spec, path)


def test_missing_path() -> None:
    with pytest.raises(BadInputError, match="no such file"):
        load_dataset(_hospice(), Path("/nonexistent/extract.csv"))


def test_unknown_option_of_a_native_loader_is_reported(tmp_path: Path) -> None:
    spec = spec_with("n2c2_ct", loader_options={"max_context_token": 10})
    with pytest.raises(BadInputError, match=r"unknown loader_options \['max_context_token'\]"):
        load_dataset(spec, tmp_path)


def test_a_pipe_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A pipe (`datasets register X <(zcat notes.csv.gz)`) can be read once: the loader would consume it and the
    recorded source sha256 be that of nothing, so the registration's provenance would be wrong."""
    import os

    fifo = tmp_path / "notes.csv"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="expected a regular file or a folder"):
        load_dataset(_hospice(), fifo)  # refused without opening it (opening a FIFO with no writer would block)


def test_a_csv_cut_short_is_refused_not_padded(home_cli: Cli, public_data: Path, tmp_path: Path) -> None:
    # An export interrupted after a field: the last row of the real MedCalc-Bench file lacks its last column. It was
    # padded with "" and registered (1047 instances, one with a Ground Truth Explanation it never had).
    text = (public_data / "medcalc_bench" / "test_data.csv").read_text(encoding="utf-8")
    cut = text.rindex(',"To compute the estimated gestational age')
    path = tmp_path / "test_data.csv"
    path.write_text(text[:cut] + "\n", encoding="utf-8")
    start = text[:cut].rindex("\n1047,") + 2  # the line the 1047th data row starts on
    line = text[:start].count("\n") + 1
    result = home_cli("datasets", "register", "medcalc_bench", str(path))
    assert result.code == 2, result.stderr
    assert (f"file {path}, row 1048 (the 1047th data row, starting on line {line} of the file): expected 14 fields "
            "as in the header, found 13") in result.stderr
    assert "gestational" not in result.stderr
    assert home_cli("datasets", "list", "--json").json() == []


@pytest.mark.parametrize(("row", "found"), [("Refer?,ok", 2), (f"Refer?,{SECRET}, stable,A", 4)])
def test_a_row_of_another_field_count_is_refused(tmp_path: Path, row: str, found: int) -> None:
    # A missing separator left "label" padded with "" (refused only because label is required: an optional
    # column or a meta column was registered empty); an unquoted comma shifted the row.
    path = tmp_path / "hospice.csv"
    path.write_text(f'prompt,context,label\nRefer?,"first\nnote",A\n{row}\nRefer?,last,B\n', encoding="utf-8")
    error = _fail(_hospice(), path)
    assert str(error.place) == "row 3 (the 2nd data row, starting on line 4 of the file)" and error.column is None
    assert error.expected.startswith(f"3 fields as in the header, found {found} (")


def test_blank_rows_and_trailing_unnamed_columns_still_load(tmp_path: Path) -> None:
    # A header written with a trailing separator, rows without it; an empty line; a row of empty fields (MEDEC's
    # trailing rows); a quoted note holding line breaks.
    path = tmp_path / "hospice.csv"
    path.write_text('prompt,context,label,\nRefer?,"line one\nline two",A\n\n,,\nRefer?,ok,B,\n', encoding="utf-8")
    result = load_dataset(_hospice(), path)
    assert [i.fields["context"] for i in result.instances] == ["line one\nline two", "ok"]
    assert result.skipped["blank row"] == 2


def test_a_missing_column_of_a_parquet_file_speaks_of_its_columns_not_a_header_row(tmp_path: Path) -> None:
    """A Parquet file without the spec's column read "the header has 3 column name(s), not shown: they may be data if
    the header row is missing or not the row read": a Parquet (or JSON, Feather, DuckDB) file has no header row to
    miss, and the hint sent its reader looking for one. It now counts the file's columns, still naming none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "hospice.parquet"
    pq.write_table(pa.table({"prompt": ["Refer to hospice?"], "note": [SECRET], "label": ["A"]}), path)
    error = _fail(_hospice(), path)
    assert (error.column, error.place) == ("context", None)
    assert "a column named 'context' (the file has 3 column(s), not named here)" in error.expected
    assert "header row" not in error.expected
