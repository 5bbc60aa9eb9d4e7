"""Files a hospital export or a hostile insider produces, built from the real public files: each is refused with
one ExtractError naming the file (and the row where one is known), never an internal error, never the value."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import SpecRegistry, register_custom_spec, shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders import load_dataset

MEDQA = "medqa/phrases_no_exclude_test.jsonl"
PUBMEDQA = "pubmedqa/ori_pqal.json"
SECRET = "Jane Q. Patient MRN 0042"
SAMPLES = Path(__file__).resolve().parents[2] / "medhelm_local" / "data" / "samples"


def _medqa_lines(public_data: Path) -> list[str]:
    return [line for line in (public_data / MEDQA).read_text(encoding="utf-8").split("\n") if line.strip()]


def test_a_json_integer_past_pythons_digit_limit_is_bad_input(public_data: Path, tmp_path: Path) -> None:
    lines = _medqa_lines(public_data)
    row = json.loads(lines[3])
    row["meta_info"] = 12345
    lines[3] = json.dumps(row).replace("12345", "9" * 5000)
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medqa"), path)
    assert (info.value.file, str(info.value.place)) == (str(path), "line 4")

    data = json.loads((public_data / PUBMEDQA).read_text(encoding="utf-8"))
    first = next(iter(data))
    data[first]["year"] = 12345
    path = tmp_path / "ori_pqal.json"
    path.write_text(json.dumps(data).replace("12345", "9" * 5000), encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("pubmedqa"), path)
    assert info.value.file == str(path) and "digits" in info.value.expected


def test_a_byte_order_mark_inside_a_jsonl_file_is_named(public_data: Path, tmp_path: Path) -> None:
    """Two JSONL exports joined with cat: the second one's byte-order mark starts a line, which was refused as
    "this line is not JSON", though the line's JSON is whole."""
    lines = _medqa_lines(public_data)
    path = tmp_path / "medqa.jsonl"
    path.write_bytes(("\n".join(lines[:3]) + "\n").encode() + ("\ufeff" + "\n".join(lines[3:]) + "\n").encode())
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medqa"), path)
    assert str(info.value.place) == "line 4" and "begins with a byte-order mark" in info.value.expected


def test_a_json_object_naming_a_key_twice_is_refused(public_data: Path, tmp_path: Path) -> None:
    """JSON's parser keeps a repeated key's last value without a word: a JSONL row exported with two "question"
    keys, or a PubMedQA file holding one PMID twice, registered with one of the two silently dropped (a CSV header
    naming a column twice is refused)."""
    lines = _medqa_lines(public_data)
    lines[4] = lines[4][:-1] + ', "question": ' + json.dumps(SECRET) + "}"
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medqa"), path)
    assert (info.value.file, str(info.value.place)) == (str(path), "line 5")
    assert "names one key twice" in info.value.expected and SECRET not in str(info.value)

    text = (public_data / PUBMEDQA).read_text(encoding="utf-8")
    first = next(iter(json.loads(text)))
    cut = text.rindex("}")
    path = tmp_path / "ori_pqal.json"
    path.write_text(text[:cut] + f', "{first}": ' + json.dumps({"QUESTION": SECRET}) + "\n}", encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("pubmedqa"), path)
    assert info.value.file == str(path) and "names one key twice" in info.value.expected
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("cell", ["[" * 100_000, "[" + "9" * 5000 + "]", '{"A": ' * 100_000])
def test_a_json_cell_the_parser_refuses_is_bad_input(public_data: Path, tmp_path: Path, cell: str) -> None:
    rows = [json.loads(line) for line in _medqa_lines(public_data)[:5]]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["question", "options", "answer_idx", "meta_info"])
    for position, row in enumerate(rows):
        options = cell if position == 2 else json.dumps(row["options"])
        writer.writerow([row["question"], options, row["answer_idx"], row["meta_info"]])
    path = tmp_path / "medqa.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    spec = shipped_spec("medqa")
    spec = spec.model_copy(update={"loader_options": {**spec.loader_options, "format": "csv"}})
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, path)
    assert (str(info.value.place), info.value.column) == ("row 4 (the 3rd data row)", "options")
    if not cell.startswith("["):
        return  # a list column reads text that is not a JSON array as separated values
    lists = tmp_path / "billing.csv"
    lists.write_text(f'text,target\nA note.,I50.9\nAnother note.,"{cell.replace(chr(34), chr(34) * 2)}"\n',
                     encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("mimic_iv_billing"), lists)
    assert (str(info.value.place), info.value.column) == ("row 3 (the 2nd data row)", "target")


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ud83d\\ud83d"])
def test_an_unpaired_surrogate_escape_is_bad_input_not_a_store_failure(public_data: Path, tmp_path: Path,
                                                                       escape: str) -> None:
    """json.loads reads '\\ud800' into a str the store cannot write as UTF-8: registration failed with an internal
    error (exit 1) inside the store's transaction."""
    lines = _medqa_lines(public_data)
    lines[5] = lines[5].replace('"question": "', '"question": "' + escape, 1)
    lines[6] = lines[6].replace('"question": "', '"question": "\\ud83d\\ude00 \\\\ud800 ', 1)  # a pair; a backslash
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medqa"), path)
    assert (info.value.file, str(info.value.place)) == (str(path), "line 6")

    data = (public_data / PUBMEDQA).read_text(encoding="utf-8")
    path = tmp_path / "ori_pqal.json"
    path.write_text(data.replace('"QUESTION": "', '"QUESTION": "' + escape, 1), encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("pubmedqa"), path)
    assert "unpaired surrogate" in info.value.expected

    rows = [json.loads(line) for line in _medqa_lines(public_data)[:3]]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["question", "options", "answer_idx", "meta_info"])
    for position, row in enumerate(rows):
        options = json.dumps(row["options"])
        writer.writerow([row["question"], options.replace(': "', ': "' + escape, 1) if position == 1 else options,
                         row["answer_idx"], row["meta_info"]])
    path = tmp_path / "medqa.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    spec = shipped_spec("medqa")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": {**spec.loader_options, "format": "csv"}}), path)
    assert (str(info.value.place), info.value.column) == ("row 3 (the 2nd data row)", "options")


def test_paired_surrogate_escapes_still_load(public_data: Path, tmp_path: Path) -> None:
    lines = _medqa_lines(public_data)
    lines[0] = lines[0].replace('"question": "', '"question": "\\ud83d\\ude00 \\uD83D\\uDE00 \\\\ud800 ', 1)
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    question = load_dataset(shipped_spec("medqa"), path).instances[0].fields["question"]
    assert question.startswith("\U0001f600 \U0001f600 \\ud800 ")


@pytest.mark.parametrize("values", [["false", "true"], [0, 2]])
def test_meds_boolean_value_that_is_not_boolean_is_bad_input(tmp_path: Path, values: list[object]) -> None:
    """An extract written through a CSV step has boolean_value as text: "false" was read as true (label yes)."""
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.loaders.test_native_formats import _meds_folder

    root = _meds_folder(tmp_path / "ehrshot")
    pq.write_table(pa.table({
        "subject_id": pa.array([1, 2], pa.int64()),
        "prediction_time": pa.array([datetime(2020, 12, 31), datetime(2019, 12, 31)], pa.timestamp("us")),
        "boolean_value": values,
    }), root / "labels" / "new_acutemi.parquet")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert (str(info.value.place), info.value.column) == ("record 1 (counting from 1)", "boolean_value")


def _omop_copy(eunomia_db: Path, tmp_path: Path, *statements: str) -> Path:
    import duckdb

    path = tmp_path / "cdm.duckdb"
    shutil.copyfile(eunomia_db, path)
    con = duckdb.connect(str(path))
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()
    return path


def _omop_spec(tmp_path: Path) -> BenchmarkSpec:
    home = tmp_path / "home"
    register_custom_spec(SAMPLES / "omop_gi_bleed.yaml", home)
    return SpecRegistry(home).get("omop_gi_bleed")


@pytest.mark.parametrize("change", [
    # a CDM loaded from CSV files as text, with the hospital's day-first dates
    "alter table condition_occurrence alter condition_start_date type varchar "
    "using strftime(condition_start_date, '%d/%m/%Y')",
    "alter table visit_occurrence alter visit_start_date type integer "
    "using cast(strftime(visit_start_date, '%Y%m%d') as integer)",
    "alter table drug_exposure rename drug_exposure_start_date to start_date",
])
def test_omop_event_date_column_of_another_type_is_bad_input(eunomia_db: Path, tmp_path: Path, change: str) -> None:
    path = _omop_copy(eunomia_db, tmp_path, change)
    with pytest.raises(ExtractError) as info:
        load_dataset(_omop_spec(tmp_path), path)
    assert info.value.file == str(path) and info.value.column in (
        "condition_start_date", "visit_start_date", "drug_exposure_start_date")


@pytest.mark.parametrize(("table", "column"), [
    ("person", "year_of_birth"),
    ("concept", "concept_name"),
    ("drug_exposure", "drug_concept_id"),
    ("measurement", "unit_source_value"),
])
def test_an_omop_column_the_loader_reads_missing_is_named(eunomia_db: Path, tmp_path: Path, table: str,
                                                          column: str) -> None:
    """A CDM without one of the columns the loader reads failed mid-read: `internal error (BinderException)`, exit 1
    (person.year_of_birth), or "a cohort_sql query that runs" for a column the cohort query never names."""
    path = _omop_copy(eunomia_db, tmp_path, f"alter table {table} drop column {column}")
    with pytest.raises(ExtractError) as info:
        load_dataset(_omop_spec(tmp_path), path)
    assert info.value.file == str(path) and info.value.column == column
    assert f"in the OMOP CDM table {table!r}" in str(info.value)


@pytest.mark.parametrize(("table", "column"), [("condition_occurrence", "person_id"), ("concept", "concept_id")])
def test_an_omop_id_column_loaded_as_text_is_named(eunomia_db: Path, tmp_path: Path, table: str, column: str) -> None:
    """A CDM loaded from CSV with an id column as text failed in the join: "expected OMOP CDM tables ... whose
    columns have the CDM's types (ConversionException)", naming neither the table nor the column."""
    path = _omop_copy(eunomia_db, tmp_path, f"alter table {table} alter {column} type varchar",
                      f"update {table} set {column} = '{SECRET}' where {column} = (select min({column}) from {table})")
    with pytest.raises(ExtractError) as info:
        load_dataset(_omop_spec(tmp_path), path)
    assert info.value.column == column and f"of the OMOP CDM table {table!r} of an integer type" in str(info.value)
    assert SECRET not in str(info.value)


def test_omop_ids_of_a_decimal_type_with_no_fraction_load(eunomia_db: Path, tmp_path: Path) -> None:
    path = _omop_copy(eunomia_db, tmp_path, "alter table person alter person_id type decimal(18, 0)")
    assert load_dataset(_omop_spec(tmp_path), path).instances


def test_omop_year_of_birth_that_is_not_a_year_is_bad_input(eunomia_db: Path, tmp_path: Path) -> None:
    path = _omop_copy(eunomia_db, tmp_path, "alter table person alter year_of_birth type varchar",
                      f"update person set year_of_birth = '{SECRET}' where person_id = 1")
    spec = _omop_spec(tmp_path)
    options = {**spec.loader_options, "cohort_sql": "select person_id, date '2010-01-01' as prediction_date, "
                                                    "'no' as label from person where person_id <= 3"}
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": options}), path)
    assert info.value.column == "year_of_birth" and SECRET not in str(info.value)


@pytest.mark.parametrize(("prediction", "column"), [
    ("null", "prediction_date"),
    ("date 'infinity'", "prediction_date"),
    ("date '-infinity'", "prediction_date"),
])
def test_omop_cohort_row_without_a_prediction_date_is_named(eunomia_db: Path, tmp_path: Path, prediction: str,
                                                             column: str) -> None:
    """A cohort row whose prediction date is null or infinite loaded as "prediction date None" (id `<person>:None`)
    or 9999-12-31, every event of the patient before it; several such rows were refused as "unique instance
    ids", naming neither the row nor the column."""
    spec = _omop_spec(tmp_path)
    cohort = (f"select person_id, case when person_id = 3 then {prediction} else date '2010-01-01' end "
              "as prediction_date, 'no' as label from person where person_id <= 5")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec.model_copy(update={"loader_options": {**spec.loader_options, "cohort_sql": cohort}}),
                     eunomia_db)
    assert info.value.column == column and str(info.value.place).startswith("cohort_sql row ")


def test_integer_ids_past_2_to_the_53_keep_every_digit(public_data: Path, tmp_path: Path) -> None:
    """An int-typed id was read through a float: 9007199254740993 became ...992, so two patients' ids collided (a
    "duplicate id" error for a file without one) and a single id changed silently."""
    source = (public_data / "medcalc_bench" / "test_data.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(source, newline="")))
    column = rows[0].index("Row Number")
    rows[1][column], rows[2][column], rows[3][column] = "9007199254740993", "9007199254740992", "12345678901234567891"
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    path = tmp_path / "test_data.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    ids = [i.id for i in load_dataset(shipped_spec("medcalc_bench"), path).instances[:3]]
    assert ids == ["9007199254740993", "9007199254740992", "12345678901234567891"]


@pytest.mark.parametrize("kind", ["xlsx", "feather", "duckdb"])
def test_a_duplicated_column_name_is_refused_in_every_format(public_data: Path, tmp_path: Path, kind: str) -> None:
    """CSV refuses two columns of one name; a workbook, a Feather file or a DuckDB query kept the last one's value,
    silently (an export with two "Ground Truth" columns, the second a reviewer's)."""
    lines = (public_data / "medhallu" / "medhallu_pqa_labeled.jsonl").read_text(encoding="utf-8").split("\n")
    rows = [json.loads(line) for line in lines[:20] if line.strip()]
    names = [*rows[0], "Ground Truth"]
    values = [[*(row[n] for n in rows[0]), "no"] for row in rows]
    spec = shipped_spec("medhallu")
    spec = spec.model_copy(update={"loader_options": {**spec.loader_options, "format": kind}})
    path = tmp_path / f"medhallu.{kind}"
    if kind == "xlsx":
        from openpyxl import Workbook

        book = Workbook()
        book.active.append(names)
        for row in values:
            book.active.append([json.dumps(v) if isinstance(v, list) else v for v in row])
        book.save(path)
    elif kind == "feather":
        import pyarrow as pa
        import pyarrow.feather as feather

        columns = [pa.array([row[i] for row in values]) for i in range(len(names))]
        feather.write_feather(pa.Table.from_arrays(columns, names=names), path)
    else:
        import duckdb

        con = duckdb.connect(str(path))
        con.execute("create table medhallu as select * from read_json_auto(?)", [str(public_data / "medhallu" /
                                                                                    "medhallu_pqa_labeled.jsonl")])
        con.close()
        spec = spec.model_copy(update={"loader_options": {
            **spec.loader_options, "query": 'select *, "Hallucinated Answer" as "Ground Truth" from medhallu'}})
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, path)
    assert "unique column names" in info.value.expected and info.value.file == str(path)


def test_parquet_strings_written_as_binary_are_read_as_utf8_text(public_data: Path, tmp_path: Path) -> None:
    """Hive, Impala and older Spark write strings as Parquet binary: the question reached the prompt as "b'...'",
    and a cell of bytes that are not UTF-8 failed inside the store with an internal error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = (public_data / "medhallu" / "medhallu_pqa_labeled.jsonl").read_text(encoding="utf-8").split("\n")
    table = pa.Table.from_pylist([json.loads(line) for line in lines if line.strip()])
    binary = table.schema.get_field_index("Question"), table.schema.get_field_index("Difficulty Level")
    for index in binary:
        table = table.set_column(index, table.schema.field(index).name, table.column(index).cast(pa.binary()))
    path = tmp_path / "medhallu.parquet"
    pq.write_table(table, path)
    instances = load_dataset(shipped_spec("medhallu"), path).instances
    first = json.loads(lines[0])
    assert instances[0].fields["question"] == first["Question"]
    assert instances[0].meta["difficulty"] == first["Difficulty Level"]

    cells = table.column(binary[1]).to_pylist()
    cells[7] = SECRET.encode("cp1252") + b"\xe9"
    table = table.set_column(binary[1], "Difficulty Level", pa.array(cells, pa.binary()))
    pq.write_table(table, path)
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medhallu"), path)
    assert (str(info.value.place), info.value.column) == ("record 8 (counting from 1)", "Difficulty Level")
    assert SECRET not in str(info.value)


def test_a_damaged_meds_event_file_is_named_not_the_label_file(tmp_path: Path) -> None:
    """A MEDS event file damaged past its footer (its schema still reads) was reported against the task's label
    file, which was fine: the site looked for the fault in the wrong file."""
    from tests.loaders.test_native_formats import _meds_folder

    root = _meds_folder(tmp_path / "meds")
    events = root / "data" / "0.parquet"
    damaged = bytearray(events.read_bytes())
    damaged[40:200] = b"\xff" * 160  # column pages; the footer (schema) is intact
    events.write_bytes(bytes(damaged))
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert info.value.file == str(events)


@pytest.mark.parametrize(("file", "column", "cells"), [
    ("data/0.parquet", "subject_id", ["1", "1", "1", "1", "2", "2", SECRET]),
    ("data/0.parquet", "code", [1, 2, 3, 4, 5, 6, 7]),
    ("data/0.parquet", "numeric_value", [None, None, SECRET, None, None, "8.1", None]),
    ("labels/new_acutemi.parquet", "subject_id", ["1", "2", SECRET]),
])
def test_a_meds_column_of_another_type_names_its_file_and_column(tmp_path: Path, file: str, column: str,
                                                                  cells: list[object]) -> None:
    """An event file with subject_id as text was refused naming the label file and no column ("label and event
    columns of the MEDS types ... (ConversionException)"); a numeric_value written as text reached the prompt."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.loaders.test_native_formats import _meds_folder

    root = _meds_folder(tmp_path / "meds")
    table = pq.read_table(root / file)
    pq.write_table(table.set_column(table.column_names.index(column), column, pa.array(cells)), root / file)
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert (info.value.file, info.value.column) == (str(root / file), column)
    assert SECRET not in str(info.value)


def test_meds_times_with_a_time_zone_are_refused_saying_what_is_expected(tmp_path: Path) -> None:
    """A label file written with time-zone-aware prediction times was refused naming only DuckDB's exception."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.loaders.test_native_formats import _meds_folder

    root = _meds_folder(tmp_path / "meds")
    labels = root / "labels" / "new_acutemi.parquet"
    table = pq.read_table(labels)
    pq.write_table(table.set_column(1, "prediction_time", table.column(1).cast(pa.timestamp("us", tz="UTC"))),
                   labels)
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert info.value.file == str(labels) and "timestamps without a time zone" in str(info.value)


def test_options_keyed_by_one_letter_in_both_cases_are_refused(public_data: Path, tmp_path: Path) -> None:
    """MedQA options {"A": ..., "a": ..., "B": ...} were read as A and B: one of the two A options was dropped
    silently, and the prompt showed the other."""
    lines = _medqa_lines(public_data)
    row = json.loads(lines[2])
    row["options"] = {"A": row["options"]["A"], "a": "Another first option", **{k: v for k, v in
                                                                              row["options"].items() if k != "A"}}
    lines[2] = json.dumps(row)
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("medqa"), path)
    assert (str(info.value.place), info.value.column) == ("line 3", "options")
