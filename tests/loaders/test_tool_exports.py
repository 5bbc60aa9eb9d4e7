"""Extracts as the hospital's tools write them (not as the loader would like them): each loads into the right
instances, or fails with one precise error naming file, row and column, never a cell's value."""

from __future__ import annotations

import re
import shutil
import zipfile
from datetime import datetime
from pathlib import Path

import duckdb
import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medhelm_local.benchmarks.registry import register_custom_spec, shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders import load_dataset

SAMPLES = Path(__file__).resolve().parents[2] / "medhelm_local" / "data" / "samples"
OPTIONS = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}


def _ent(**options: object) -> BenchmarkSpec:
    return shipped_spec("ent_referral").model_copy(update={"loader_options": {**OPTIONS, **options}})


def test_a_workbook_whose_recorded_dimension_is_stale_loads_every_row(tmp_path: Path) -> None:
    # Report tools that fill a template (or stream rows) leave the sheet's <dimension> as it was: openpyxl's
    # read-only mode stopped there, and rows 10 to 20 were dropped without a word.
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["ref_id", "note", "prompt", "outcome"])
    for n in range(1, 21):
        sheet.append([n, f"note {n}", "Refer to ENT?", "AB"[n % 2]])
    written = tmp_path / "written.xlsx"
    workbook.save(written)
    path = tmp_path / "referrals.xlsx"
    with zipfile.ZipFile(written) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                data, count = re.subn(rb'<dimension ref="[^"]*"', b'<dimension ref="A1:D10"', data)
                assert count == 1
            target.writestr(item, data)
    instances = load_dataset(_ent(), path).instances
    assert [i.id for i in instances] == [str(n) for n in range(1, 21)]
    assert instances[-1].fields == {"context": "note 20", "question": "Refer to ENT?"} and instances[-1].label == "A"


def test_an_excel_error_cell_in_a_column_read_is_refused(tmp_path: Path) -> None:
    """A sheet's cell holding a failed formula's error was read as its text: "#DIV/0!" or "#N/A" reached the prompt
    as the patient's note. It is refused naming its row and column; one in a column the spec does not read is not."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["ref_id", "note", "prompt", "outcome", "unused"])
    for n in range(1, 6):
        sheet.append([n, f"note {n}", "Refer to ENT?", "AB"[n % 2], "#REF!"])
    path = tmp_path / "referrals.xlsx"
    workbook.save(path)
    assert len(load_dataset(_ent(), path).instances) == 5
    sheet["B4"] = "#N/A"  # openpyxl writes an error code as an error cell, as Excel saves a failed formula's value
    workbook.save(path)
    with pytest.raises(ExtractError) as info:
        load_dataset(_ent(), path)
    assert (str(info.value.place), info.value.column) == ("row 4 (the 3rd data row)", "note")
    assert "Excel error" in info.value.expected


def test_a_list_column_s_null_items_never_reach_a_prompt_as_none(tmp_path: Path) -> None:
    """A Parquet list column's null item was rendered as the text "None": a note of [line, null, line] read
    "line\nNone\nline", and a list of nulls alone passed as a note reading "None"."""
    def write(notes: list[list[str | None]]) -> Path:
        path = tmp_path / "referrals.parquet"
        pq.write_table(pa.table({"ref_id": list(range(1, len(notes) + 1)), "note": pa.array(notes),
                                 "prompt": ["Refer to ENT?"] * len(notes), "outcome": ["A"] * len(notes)}), path)
        return path

    instances = load_dataset(_ent(), write([["otalgia", None, "hearing loss"], ["vertigo"]])).instances
    assert [i.fields["context"] for i in instances] == ["otalgia\nhearing loss", "vertigo"]
    with pytest.raises(ExtractError) as info:
        load_dataset(_ent(), write([["vertigo"], [None]]))
    assert (str(info.value.place), info.value.column) == ("record 2 (counting from 1)", "note")


def test_a_duckdb_table_with_a_time_zone_column_loads(tmp_path: Path) -> None:
    # Any TIMESTAMPTZ column (a note's signing time) made the whole table unreadable: DuckDB's Python conversion
    # needs pytz, and the error blamed the query. HUGEINT ids stay exact in meta.
    db = tmp_path / "referrals.duckdb"
    con = duckdb.connect(str(db))
    con.execute("create table referrals (ref_id hugeint, note varchar, prompt varchar, outcome varchar, "
                "signed_at timestamptz, mrn hugeint)")
    con.execute("insert into referrals values (1, 'ear pain', 'Refer to ENT?', 'A', '2024-03-01 12:00:00+00', "
                "123456789012345678901), (2, 'mild cold', 'Refer to ENT?', 'B', null, 2)")
    con.close()
    spec = _ent(table="referrals", meta={"signed_at": "signed_at", "mrn": "mrn"},
                types={"signed_at": "date"})
    first, second = load_dataset(spec, db).instances
    assert (first.id, first.label, first.fields["context"]) == ("1", "A", "ear pain")
    assert first.meta == {"signed_at": "2024-03-01", "mrn": 123456789012345678901}
    assert second.meta == {"signed_at": None, "mrn": 2}


def test_an_omop_cdm_with_time_zone_event_dates_loads(tmp_path: Path, eunomia_db: Path) -> None:
    db = tmp_path / "cdm.duckdb"
    shutil.copyfile(eunomia_db, db)
    con = duckdb.connect(str(db))
    con.execute("alter table condition_occurrence alter condition_start_date type timestamptz")
    con.close()
    spec = register_custom_spec(SAMPLES / "omop_gi_bleed.yaml", tmp_path / "home")
    expected = load_dataset(spec, eunomia_db).instances
    instances = load_dataset(spec, db).instances
    assert [(i.id, i.label, i.fields) for i in instances] == [(i.id, i.label, i.fields) for i in expected]
    assert "| Condition: " in instances[0].fields["timeline"]


def _meds(root: Path) -> Path:
    """A MEDS v0.3 folder as MEDS ETLs write it: event shards per split (only the notes shard has text_value),
    codes.parquet with parent_codes, static events with a null time, labels in several part files."""
    for folder in ("data/held_out", "data/train", "metadata", "labels/new_acutemi"):
        (root / folder).mkdir(parents=True)

    def events(subjects: list[int], times: list[datetime | None], codes: list[str], text: list[str | None] | None
               ) -> pa.Table:
        columns = {"subject_id": pa.array(subjects, pa.int64()), "time": pa.array(times, pa.timestamp("us")),
                   "code": codes, "numeric_value": pa.array([None] * len(codes), pa.float32())}
        return pa.table(columns if text is None else {**columns, "text_value": pa.array(text, pa.large_string())})

    pq.write_table(events([1, 1, 2], [None, datetime(2020, 1, 1), datetime(2019, 5, 5)],
                          ["GENDER/F", "SNOMED/38341003", "SNOMED/44054006"], None), root / "data/held_out/0.parquet")
    pq.write_table(events([1, 2], [datetime(2020, 6, 1), datetime(2019, 6, 6)], ["NOTE", "NOTE"],
                          ["chest pain", "follow-up"]), root / "data/held_out/1.parquet")
    pq.write_table(events([3], [datetime(2018, 1, 1)], ["SNOMED/1"], None), root / "data/train/0.parquet")
    pq.write_table(pa.table({"code": ["SNOMED/38341003"], "description": ["Hypertension"],
                             "parent_codes": [["SNOMED/1"]]}), root / "metadata/codes.parquet")
    splits = {"subject_id": pa.array([1, 2, 3], pa.int64()), "split": ["held_out", "held_out", "train"]}
    pq.write_table(pa.table(splits), root / "metadata/subject_splits.parquet")

    def labels(subjects: list[int], times: list[datetime | None], values: list[bool]) -> pa.Table:
        return pa.table({"subject_id": pa.array(subjects, pa.int64()),
                         "prediction_time": pa.array(times, pa.timestamp("us")), "boolean_value": values})

    pq.write_table(labels([1], [datetime(2020, 12, 31)], [True]), root / "labels/new_acutemi/0.parquet")
    pq.write_table(labels([3, 2], [datetime(2019, 1, 1), datetime(2019, 12, 31)], [True, False]),
                   root / "labels/new_acutemi/1.parquet")
    return root


def test_meds_shards_with_and_without_text_value_load(tmp_path: Path) -> None:
    # DuckDB read the shards by position and refused them (blaming the label file's types): text_value is optional
    # in MEDS, and a shard of codes alone has none.
    instances = load_dataset(shipped_spec("ehrshot"), _meds(tmp_path / "meds")).instances
    by_id = {i.id: i for i in instances}
    assert set(by_id) == {"new_acutemi:1:2020-12-31T00:00", "new_acutemi:2:2019-12-31T00:00"}
    first = by_id["new_acutemi:1:2020-12-31T00:00"]
    assert first.label == "yes" and first.meta["subject_id"] == 1
    assert first.fields["timeline"].splitlines()[1:] == [
        "Static: GENDER/F", "2020-01-01 00:00 | Hypertension (SNOMED/38341003)", "2020-06-01 00:00 | NOTE = chest pain"]


def test_a_meds_label_error_names_its_own_file_and_row(tmp_path: Path) -> None:
    # Rows were numbered after the split filter dropped subject 3 (file row 0), across all part files, and blamed
    # on the first part file.
    root = _meds(tmp_path / "meds")
    (root / "data/held_out/1.parquet").unlink()  # every shard without text_value, as the loader read them before
    part = root / "labels/new_acutemi/1.parquet"
    pq.write_table(pa.table({"subject_id": pa.array([3, 3, 2], pa.int64()),
                             "prediction_time": pa.array([datetime(2019, 1, 1), datetime(2019, 2, 1), None],
                                                         pa.timestamp("us")),
                             "boolean_value": [True, True, False]}), part)
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert (Path(info.value.file), str(info.value.place)) == (part, "record 3 (counting from 1)")
    assert "prediction_time" in info.value.expected


@pytest.mark.parametrize(("name", "separator"), [("referrals.csv", ","), ("referrals.tsv", "\t")])
def test_a_utf16_export_with_its_byte_order_mark_loads(tmp_path: Path, name: str, separator: str) -> None:
    # SQL Server's and Excel's "Unicode" exports: UTF-16 LE with a BOM, CRLF, a note with a line break, empty
    # trailing columns. They were refused as "UTF-8 text (invalid byte at line 1, offset 0)".
    rows = [["ref_id", "note", "prompt", "outcome", "", ""],
            ["1", '"Otalgia, 3 months.\r\nPlan: ENT"', "Refer?", "A", "", ""],
            ["2", "Résumé: cold", "Refer?", "B", "", ""]]
    path = tmp_path / name
    path.write_bytes("".join(separator.join(r) + "\r\n" for r in rows).encode("utf-16"))
    assert path.read_bytes()[:2] == b"\xff\xfe"
    instances = load_dataset(_ent(), path).instances
    assert [(i.id, i.label, i.fields["context"]) for i in instances] == [
        ("1", "A", "Otalgia, 3 months.\r\nPlan: ENT"), ("2", "B", "Résumé: cold")]


def test_an_excel_unicode_text_export_names_the_format_option_and_loads_with_it(tmp_path: Path) -> None:
    """Excel's "Save as Unicode Text" writes tab-separated UTF-16 as `.txt`: it was refused with the list of file
    endings only ("expected a file ending in one of .arrow, .csv, ..."), leaving the user to rename the extract;
    the spec's loader option `format` reads it as it is, and the error now says so."""
    rows = [["ref_id", "note", "prompt", "outcome"], ["1", "Otalgia", "Refer?", "A"], ["2", "Cold", "Refer?", "B"]]
    path = tmp_path / "referrals.txt"
    path.write_bytes("".join("\t".join(r) + "\r\n" for r in rows).encode("utf-16"))
    with pytest.raises(ExtractError) as info:
        load_dataset(_ent(), path)
    assert "or the format named with loader option format (csv, tsv, " in info.value.expected
    assert "Excel's \"Unicode Text\" .txt is tsv" in info.value.expected
    assert [(i.id, i.label) for i in load_dataset(_ent(format="tsv"), path).instances] == [("1", "A"), ("2", "B")]


def test_utf16_that_is_damaged_is_named_as_utf16(tmp_path: Path) -> None:
    path = tmp_path / "referrals.csv"
    path.write_bytes("ref_id,note,prompt,outcome\r\n1,a,b,A\r\n".encode("utf-16") + b"\x00\xd8")  # a lone surrogate
    with pytest.raises(ExtractError) as info:
        load_dataset(_ent(), path)
    assert info.value.expected.startswith("UTF-16 text")


def test_a_sql_server_null_never_reaches_a_prompt_as_text(tmp_path: Path) -> None:
    # SQL Server and Clarity exports write an empty cell as NULL. null_values applied to meta only: a note cell
    # holding NULL went into the prompt as the text "NULL". A required field is now refused (row and column
    # named), an optional one is empty, as a blank cell is.
    path = tmp_path / "referrals.csv"
    path.write_text("ref_id,note,prompt,outcome,history\r\n1,Otalgia for 3 weeks.,Refer to ENT?,A,NULL\r\n"
                    "2,NULL,Refer to ENT?,B,Prior tonsillectomy.\r\n", encoding="utf-8")
    spec = _ent(null_values=["NULL"], optional_fields={"history": "history"})
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec, path)
    assert "row 3 (the 2nd data row)" in str(caught.value) and "'note'" in str(caught.value)
    assert "not one of null_values" in str(caught.value)
    path.write_text(path.read_text(encoding="utf-8").replace("2,NULL,", "2,Hoarse voice.,"), encoding="utf-8")
    first, second = load_dataset(spec, path).instances
    assert first.fields["history"] == "" and second.fields["history"] == "Prior tonsillectomy."
    assert load_dataset(_ent(optional_fields={"history": "history"}), path).instances[0].fields["history"] == "NULL"


def test_meds_prediction_times_with_seconds_keep_them(tmp_path: Path) -> None:
    # Times were cut to the minute: two predictions of one subject within a minute had one id (refused as
    # "unique instance ids"), and a prediction at 12:30:45 read "12:30" above the events of 12:30:30 it includes.
    root = _meds(tmp_path / "meds")
    pq.write_table(pa.table({"subject_id": pa.array([1, 1, 1, 1], pa.int64()),
                             "prediction_time": pa.array([datetime(2020, 6, 1, 12, 30, 45),
                                                          datetime(2020, 6, 1, 12, 30, 15),
                                                          datetime(2020, 6, 1, 12, 30, 45, 250000),
                                                          datetime(2020, 6, 1, 12, 30, 45, 250001)],
                                                         pa.timestamp("us")),
                             "boolean_value": [True, False, True, False]}), root / "labels/new_acutemi/0.parquet")
    pq.write_table(pa.table({"subject_id": pa.array([1], pa.int64()),
                             "time": pa.array([datetime(2020, 6, 1, 12, 30, 30)], pa.timestamp("us")),
                             "code": ["LOINC/2160-0"], "numeric_value": pa.array([1.4], pa.float32())}),
                   root / "data/held_out/2.parquet")
    instances = {i.id: i for i in load_dataset(shipped_spec("ehrshot"), root).instances}
    assert set(instances) == {"new_acutemi:1:2020-06-01T12:30:45", "new_acutemi:1:2020-06-01T12:30:15",
                              "new_acutemi:1:2020-06-01T12:30:45.250", "new_acutemi:1:2020-06-01T12:30:45.250001",
                              "new_acutemi:2:2019-12-31T00:00"}
    later, earlier = instances["new_acutemi:1:2020-06-01T12:30:45"], instances["new_acutemi:1:2020-06-01T12:30:15"]
    assert later.meta["prediction_time"] == "2020-06-01 12:30:45"
    assert later.fields["timeline"].splitlines()[0] == "Prediction time: 2020-06-01 12:30:45"
    assert later.fields["timeline"].splitlines()[-1] == "2020-06-01 12:30:30 | LOINC/2160-0 = 1.4"
    assert "LOINC/2160-0" not in earlier.fields["timeline"]
