"""Every extract error names the record the way a user finds it in the file: a CSV's, TSV's or sheet's row as a
spreadsheet shows it (header row 1), with the line a text editor shows when a quoted field holding line breaks
comes before it; a JSON Lines file's line; the record's number from 1 where a file has no lines (Parquet, a DuckDB
table or query). Extract errors counted the data rows from 0 while `jury validate` counted spreadsheet rows, so
"row 9" was row 11 in Excel and line 40 of a file whose notes span lines."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medhelm_local.analysis.agreement import read_clinician_ratings
from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.errors import ExtractError, Place
from medhelm_local.loaders import load_dataset
from tests.conftest import Cli

SECRET = "Jane Q. Patient MRN 0042"
MEDCALC = Path("medcalc_bench") / "test_data.csv"
MEDQA = Path("medqa") / "phrases_no_exclude_test.jsonl"


def _error(spec_id: str, path: Path) -> ExtractError:
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec(spec_id), path)
    assert SECRET not in str(info.value)
    return info.value


def test_place_texts() -> None:
    assert str(Place.sheet_row(2, 1)) == "row 2 (the 1st data row)"
    assert str(Place.sheet_row(13, 12, 13)) == "row 13 (the 12th data row)"
    assert str(Place.sheet_row(24, 23, 90)) == "row 24 (the 23rd data row, starting on line 90 of the file)"
    assert str(Place.line(7)) == "line 7"
    assert str(Place.record(3)) == "record 3 (counting from 1)"


def test_a_csv_error_names_the_spreadsheet_row_and_the_line_where_notes_span_lines(public_data: Path,
                                                                                 tmp_path: Path) -> None:
    # MedCalc-Bench's patient notes hold line breaks: the 10th data row starts far below line 11.
    with (public_data / MEDCALC).open(encoding="utf-8", newline="") as handle:
        records = list(csv.reader(handle))
    header, rows = records[0], records[1:]
    rows[9][header.index("Ground Truth Answer")] = SECRET
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerows([header, *rows[:9]])
    first_line = buffer.getvalue().count("\n") + 1  # the line the 10th data row starts on
    writer.writerows(rows[9:])
    path = tmp_path / "test_data.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    assert first_line > 11
    error = _error("medcalc_bench", path)
    assert (str(error.place), error.column) == (
        f"row 11 (the 10th data row, starting on line {first_line} of the file)", "Ground Truth Answer")
    assert f"file {path}, row 11 (the 10th data row, starting on line {first_line} of the file), column" in str(error)


def test_a_jsonl_error_names_the_line_blank_lines_included(public_data: Path, tmp_path: Path) -> None:
    lines = [line for line in (public_data / MEDQA).read_text(encoding="utf-8").split("\n") if line.strip()][:6]
    bad = json.loads(lines[4])
    bad["answer_idx"] = "Z"
    lines[4] = json.dumps(bad)
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n", encoding="utf-8")  # a blank line 3
    error = _error("medqa", path)
    assert (str(error.place), error.column) == ("line 6", "answer_idx")


def test_a_parquet_error_names_the_record_counting_from_1(tmp_path: Path) -> None:
    path = tmp_path / "hospice.parquet"
    pq.write_table(pa.table({"prompt": ["Refer?"] * 3, "context": ["a", "b", "c"], "label": ["A", "B", "Z"]}), path)
    error = _error("hospice_referral", path)
    assert (str(error.place), error.column) == ("record 3 (counting from 1)", "label")


def test_a_duplicate_id_names_both_rows(tmp_path: Path) -> None:
    path = tmp_path / "followup.csv"
    path.write_text("note_id,note_text,question,followup\n7,a,q?,yes\n8,b,q?,no\n\n7,c,q?,no\n", encoding="utf-8")
    spec = shipped_spec("hospice_referral").model_copy(update={"loader_options": {
        "id_column": "note_id", "fields": {"context": "note_text", "question": "question"},
        "label_column": "followup"}, "label_map": {"yes": "A", "no": "B"}})
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, path)
    assert str(info.value) == (f"file {path}, row 5 (the 4th data row), column 'note_id': expected unique instance "
                               "ids (this row's id is the id of row 2 (the 1st data row))")


def test_jury_ratings_rows_are_numbered_as_the_extracts_are(tmp_path: Path) -> None:
    # csv.DictReader skipped the blank line and counted a record, not its lines: the bad rating on spreadsheet row
    # 5 (line 6 of the file) was named "row 4".
    path = tmp_path / "ratings.csv"
    path.write_text('instance_id,rater,score,comment\nm1,a,3,fine\n\nm2,a,4,"two\nlines"\nm3,a,9,\n',
                    encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        read_clinician_ratings(path, shipped_spec("medication_qa"))
    assert (str(info.value.place), info.value.column) == ("row 5 (the 4th data row, starting on line 6 of the file)",
                                                          "score")


def test_the_cli_names_the_spreadsheet_row(home_cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "hospice.csv"
    path.write_text(f"prompt,context,label\nRefer?,ok,A\nRefer?,{SECRET},Z\n", encoding="utf-8")
    result = home_cli("datasets", "register", "hospice_referral", str(path))
    assert result.code == 2 and SECRET not in result.stderr
    assert f"file {path}, row 3 (the 2nd data row), column 'label': expected" in result.stderr
    assert home_cli("datasets", "list", "--json").json() == []
