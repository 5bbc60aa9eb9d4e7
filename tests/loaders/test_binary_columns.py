"""Binary columns (a DuckDB BLOB, a Parquet binary column): text stored as bytes is read as UTF-8, the policy the
Parquet reader already had for Hive's and Spark's string columns; bytes that are not UTF-8 are refused where the
spec reads them, naming file, record, column and type, never the bytes. A DuckDB BLOB note reached the prompt as
"b'...'" and was registered."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import ExtractError
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts import build_request
from tests.conftest import Cli

SECRET = "Jane Q. Patient MRN 0042"
SCAN = b"\xff\xd8\xff\xe0 JFIF"  # the start of a JPEG: not UTF-8
MAPPING = {"id_column": "note_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}


def _notes_extract(eunomia_db: Path, tmp_path: Path, note_sql: str) -> Path:
    """A copy of the Eunomia OMOP CDM with a notes table as a site's ETL leaves it: the note text in a BLOB
    column (loaded from Hive Parquet with DuckDB's read_parquet), a scanned page in another."""
    db = tmp_path / "cdm_notes.duckdb"
    shutil.copyfile(eunomia_db, db)
    con = duckdb.connect(str(db))
    con.execute(f"""
        create table condition_notes as
        select c.condition_occurrence_id as note_id, {note_sql} as note, 'Refer to ENT?' as prompt,
               'A' as outcome, ?::blob as scan
        from condition_occurrence c join concept k on k.concept_id = c.condition_concept_id
        order by c.condition_occurrence_id limit 5""", [SCAN])
    con.close()
    return db


def _spec() -> BenchmarkSpec:
    return shipped_spec("ent_referral").model_copy(update={"loader_options": {**MAPPING, "table": "condition_notes"}})


def test_a_blob_note_of_utf8_text_reaches_the_prompt_as_text(eunomia_db: Path, tmp_path: Path) -> None:
    db = _notes_extract(eunomia_db, tmp_path, "encode(k.concept_name || ' (été)')")
    names = [r[0] for r in duckdb.connect(str(db), read_only=True).execute(
        "select k.concept_name from condition_occurrence c join concept k on k.concept_id = c.condition_concept_id "
        "order by c.condition_occurrence_id limit 5").fetchall()]
    instances = load_dataset(_spec(), db).instances
    assert [i.fields["context"] for i in instances] == [f"{name} (été)" for name in names]
    prompt = build_request(_spec(), instances[0]).messages[-1].content
    assert f"{names[0]} (été)" in prompt and "b'" not in prompt
    # The scan column holds bytes that are not text, but the spec does not read it.


def test_a_blob_note_that_is_not_utf8_is_refused_naming_its_type(eunomia_db: Path, tmp_path: Path,
                                                                  home_cli: Cli) -> None:
    first = "(select min(condition_occurrence_id) from condition_occurrence)"
    latin1 = f"'{SECRET} \\xE9t\\xE9'::blob"  # cp1252 bytes after the first row
    db = _notes_extract(eunomia_db, tmp_path, f"case when c.condition_occurrence_id = {first} then "
                                              f"cast(k.concept_name as blob) else {latin1} end")
    with pytest.raises(ExtractError) as info:
        load_dataset(_spec(), db)
    assert str(info.value) == (f"file {db}, record 2 (counting from 1), column 'note': expected text (the column is "
                               "of type BLOB, and the bytes of this cell are not UTF-8 text)")
    spec_file = tmp_path / "notes.yaml"
    spec_file.write_text(_spec().model_copy(update={"id": "cdm_notes"}).model_dump_json(), encoding="utf-8")
    result = home_cli("datasets", "register", "--spec", str(spec_file), "cdm_notes", str(db))
    assert result.code == 2 and "column 'note': expected text (the column is of type BLOB" in result.stderr
    assert SECRET not in result.stderr and "\\xe9" not in result.stderr.lower()
    assert home_cli("datasets", "list", "--json").json() == []


def test_a_parquet_binary_column_the_spec_does_not_read_no_longer_blocks(tmp_path: Path) -> None:
    # Any binary column that was not UTF-8 refused the whole file, read or not ("UTF-8 text in a binary column").
    path = tmp_path / "referrals.parquet"
    pq.write_table(pa.table({"note_id": [1, 2], "note": pa.array([b"Otalgia.", b"Hoarse."], pa.binary()),
                             "prompt": ["Refer?", "Refer?"], "outcome": ["A", "B"],
                             "scan": pa.array([SCAN, None], pa.binary())}), path)
    spec = shipped_spec("ent_referral").model_copy(update={"loader_options": MAPPING})
    assert [i.fields["context"] for i in load_dataset(spec, path).instances] == ["Otalgia.", "Hoarse."]
    uses_scan = spec.model_copy(update={"loader_options": {**MAPPING, "meta": {"scan": "scan"}}})
    with pytest.raises(ExtractError) as info:
        load_dataset(uses_scan, path)
    assert (str(info.value.place), info.value.column) == ("record 1 (counting from 1)", "scan")
    assert info.value.expected.startswith("text (the column is of type binary,")


def test_a_meds_text_value_written_as_binary_reads_as_text(tmp_path: Path) -> None:
    # A MEDS note event whose text_value column was written as binary reached the timeline as "NOTE = b'chest pain'".
    from tests.loaders.test_tool_exports import _meds

    root = _meds(tmp_path / "meds")
    notes = root / "data/held_out/1.parquet"
    table = pq.read_table(notes)
    index = table.schema.get_field_index("text_value")
    pq.write_table(table.set_column(index, "text_value", table.column(index).cast(pa.binary())), notes)
    instances = {i.id: i for i in load_dataset(shipped_spec("ehrshot"), root).instances}
    assert instances["new_acutemi:1:2020-12-31T00:00"].fields["timeline"].splitlines()[-1] == (
        "2020-06-01 00:00 | NOTE = chest pain")

    pq.write_table(table.set_column(index, "text_value", pa.array([b"follow-up", SCAN], pa.binary())), notes)
    with pytest.raises(ExtractError) as info:
        load_dataset(shipped_spec("ehrshot"), root)
    assert (info.value.file, str(info.value.place), info.value.column) == (
        str(notes), "record 2 (counting from 1)", "text_value")
    assert info.value.expected.startswith("text (the column is of type binary,")


def test_an_optional_field_on_a_binary_column_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """``optional_fields`` may name a column a file lacks, so it was not checked with the columns the spec
    requires: a scanned page there reached the prompt as "b'\\xff\\xd8...'". Where the column is there, it is
    refused like any column the spec reads."""
    path = tmp_path / "notes.parquet"
    pq.write_table(pa.table({"note_id": [1, 2], "note": ["Ear pain.", "Mild cold."], "prompt": ["Refer?", "Refer?"],
                             "outcome": ["A", "B"], "scan": pa.array([b"page", SCAN], pa.binary())}), path)
    spec = shipped_spec("ent_referral").model_copy(
        update={"loader_options": {**MAPPING, "optional_fields": {"attachment": "scan"}}})
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec, path)
    assert (caught.value.column, str(caught.value.place)) == ("scan", "record 2 (counting from 1)")
    assert "not UTF-8" in str(caught.value)
    absent = spec.model_copy(update={"loader_options": {**MAPPING, "optional_fields": {"attachment": "letter"}}})
    assert [i.fields["attachment"] for i in load_dataset(absent, path).instances] == ["", ""]
