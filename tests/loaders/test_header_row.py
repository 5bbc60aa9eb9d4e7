"""Report exports with a title above the header (Clarity, Cerner and BI tools write the report's name and run date
first): loader option header_row names the row holding the column names, as a spreadsheet numbers it. Without
it, the title was read as the header and the error said only that the spec's columns were not found."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from openpyxl import Workbook

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders import load_dataset

MEDCALC = Path("medcalc_bench") / "test_data.csv"
TITLE = "MedCalc-Bench test set,exported from the data warehouse\r\nRun 2024-05-01 06:00 by svc_clarity\r\n"
ENT = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}


def _with(spec_id: str, **options: object) -> BenchmarkSpec:
    spec = shipped_spec(spec_id)
    return spec.model_copy(update={"loader_options": {**spec.loader_options, **options}})


def test_a_csv_with_a_title_loads_with_header_row(public_data: Path, tmp_path: Path) -> None:
    original = public_data / MEDCALC
    path = tmp_path / "test_data.csv"
    path.write_bytes(TITLE.encode() + original.read_bytes())
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medcalc_bench"), path)  # the title's 2 fields read as the header
    assert str(info.value.place) == "row 2 (the 1st data row)"
    assert "expected 2 fields as in the header, found 1 (the row is cut short, or a comma is missing; if row 1 is a " \
           "title above the header, give the header's row with loader option header_row)" in str(info.value)

    expected = load_dataset(shipped_spec("medcalc_bench"), original).instances
    titled = load_dataset(_with("medcalc_bench", header_row=3), path).instances
    assert [(i.id, i.fields, i.references, i.meta) for i in titled] == [
        (i.id, i.fields, i.references, i.meta) for i in expected]

    with original.open(encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    rows[4][header.index("Ground Truth Answer")] = "about a quarter"
    buffer = io.StringIO()
    buffer.write(TITLE)
    csv.writer(buffer).writerows([header, *rows[:4]])
    line = buffer.getvalue().count("\n") + 1  # where the 5th data row starts
    csv.writer(buffer).writerows(rows[4:])
    path.write_text(buffer.getvalue(), encoding="utf-8", newline="")
    with pytest.raises(ExtractError) as info:
        load_dataset(_with("medcalc_bench", header_row=3), path)
    assert (str(info.value.place), info.value.column) == (
        f"row 8 (the 5th data row, starting on line {line} of the file)", "Ground Truth Answer")


def test_excel_s_separator_line_above_the_header_is_named(public_data: Path, tmp_path: Path) -> None:
    """Excel writes "sep=," above the header when asked to (and hides it when it opens the file): it was read as a
    2-column header, and every row was refused for its field count."""
    original = public_data / MEDCALC
    path = tmp_path / "test_data.csv"
    path.write_bytes(b"sep=,\r\n" + original.read_bytes())
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medcalc_bench"), path)
    assert info.value.place is None
    assert "row 1 is Excel's separator line \"sep=,\": set loader option header_row: 2" in info.value.expected
    assert len(load_dataset(_with("medcalc_bench", header_row=2), path).instances) == 1047


def test_a_blank_first_line_is_named_as_an_empty_header_row(public_data: Path, tmp_path: Path) -> None:
    """A file starting with an empty line (a report tool's leading newline): the separator-line check read the
    header's first name, and the file was refused as an internal error (exit 1) instead of bad input."""
    path = tmp_path / "test_data.csv"
    path.write_bytes(b"\r\n" + (public_data / MEDCALC).read_bytes())
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medcalc_bench"), path)
    assert "a header row naming the columns (row 1 is empty; loader option header_row" in info.value.expected
    assert len(load_dataset(_with("medcalc_bench", header_row=2), path).instances) == 1047


def _sheet(path: Path, title_rows: list[list[object]]) -> Path:
    workbook = Workbook()
    sheet = workbook.active
    for row in [*title_rows, ["ref_id", "note", "prompt", "outcome"], [1, "Otalgia.", "Refer?", "A"],
                [2, "Hoarse.", "Refer?", "Z"]]:
        sheet.append(row)
    workbook.save(path)
    return path


def test_a_sheet_with_a_title_says_where_the_header_was_read_and_loads_with_header_row(tmp_path: Path) -> None:
    path = _sheet(tmp_path / "referrals.xlsx", [["ENT referrals, weekly"], [datetime(2024, 5, 1)], []])
    spec = shipped_spec("ent_referral")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": ENT}), path)
    assert "the header was read from row 1: if the column names are on another row, below a title, set loader " \
           "option header_row to it" in str(info.value)
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": {**ENT, "header_row": 4}}), path)
    assert (str(info.value.place), info.value.column) == ("row 6 (the 2nd data row)", "outcome")
    path = _sheet(path, [["ENT referrals, weekly"], [], []])
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": {**ENT, "header_row": 3}}), path)
    assert "row 3 is empty" in info.value.expected


@pytest.mark.parametrize("value", [0, -1, "3", True, 2.5])
def test_header_row_must_be_a_row_number(tmp_path: Path, value: object) -> None:
    path = _sheet(tmp_path / "referrals.xlsx", [])
    with pytest.raises(BadInputError, match="header_row must be a row number from 1"):
        load_dataset(shipped_spec("ent_referral").model_copy(update={"loader_options": {**ENT, "header_row": value}}),
                     path)


def test_header_row_past_the_end_or_on_a_file_without_rows(tmp_path: Path) -> None:
    path = tmp_path / "referrals.csv"
    path.write_text("ref_id,note,prompt,outcome\n1,a,q,A\n", encoding="utf-8")
    spec = shipped_spec("ent_referral").model_copy(update={"loader_options": {**ENT, "header_row": 5}})
    with pytest.raises(ExtractError, match=r"a header at row 5 \(loader option header_row; the file has 2 rows\)"):
        load_dataset(spec, path)
    parquet = tmp_path / "referrals.parquet"
    pq.write_table(pa.table({"ref_id": [1], "note": ["a"], "prompt": ["q"], "outcome": ["A"]}), parquet)
    with pytest.raises(ExtractError, match="formats loader option header_row applies to"):
        load_dataset(spec, parquet)
