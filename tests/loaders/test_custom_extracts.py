"""Bring your own extract: one YAML file over a CSV, a DuckDB table, or an OMOP CDM database (Eunomia)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import yaml

from medhelm_local.benchmarks.registry import SpecRegistry, register_custom_spec, shipped_spec
from medhelm_local.benchmarks.sampling import sample_ids
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts import build_request

SAMPLES = Path(__file__).resolve().parents[2] / "medhelm_local" / "data" / "samples"


def _custom(tmp_path: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((SAMPLES / name).read_text(encoding="utf-8"))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_csv_extract_end_to_end(tmp_path: Path) -> None:
    home = tmp_path / "home"
    spec = register_custom_spec(SAMPLES / "followup_needed.yaml", home)
    assert (home / "benchmarks" / "followup_needed.yaml").is_file()
    spec = SpecRegistry(home).get("followup_needed")  # a later invocation reads it back from the home
    assert spec.category == "Administration and Workflow" and spec.access.value == "private"
    result = load_dataset(spec, SAMPLES / "followup_needed.csv")
    assert [i.id for i in result.instances] == ["101", "102", "103", "104", "105", "106"]
    assert [i.label for i in result.instances] == ["A", "B", "A", "B", "A", "B"]
    request = build_request(spec, result.instances[0])
    assert "community-acquired pneumonia" in request.messages[-1].content
    chosen = sample_ids([(i.id, i.label) for i in result.instances], 4, seed=7)
    assert chosen == sample_ids([(i.id, i.label) for i in result.instances], 4, seed=7)
    labels = Counter(next(i.label for i in result.instances if i.id == c) for c in chosen)
    assert labels == {"A": 2, "B": 2}


@pytest.mark.parametrize("source", ["table", "query"])
def test_duckdb_table_or_query_extract(tmp_path: Path, source: str) -> None:
    db = tmp_path / "extract.duckdb"
    con = duckdb.connect(str(db))
    con.execute("create table referrals (ref_id integer, note varchar, prompt varchar, outcome varchar)")
    con.execute("insert into referrals values (1, 'ear pain for 3 months', 'Refer to ENT?', 'A'), "
                "(2, 'mild cold', 'Refer to ENT?', 'B'), (3, 'hearing loss', 'Refer to ENT?', 'C')")
    con.close()
    options = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}
    options |= {"table": "referrals"} if source == "table" else {"query": "select * from referrals where ref_id < 3"}
    spec = shipped_spec("ent_referral").model_copy(update={"loader_options": options})
    result = load_dataset(spec, db)
    assert [(i.id, i.label) for i in result.instances][:2] == [("1", "A"), ("2", "B")]
    assert len(result.instances) == (3 if source == "table" else 2)


@pytest.mark.parametrize(("query", "kind", "words"), [
    ("select ref_idx as ref_id, note, prompt, outcome from referrals", "BinderException", "a column or function"),
    ("select ref_id, uppr(note) as note, prompt, outcome from referrals", "CatalogException",
     "a table, view or function"),
    ("select cast(note as integer) as ref_id, note, prompt, outcome from referrals", "ConversionException",
     "a value could not be converted"),
])
def test_a_query_that_fails_says_what_kind_of_mistake_without_duckdbs_message(tmp_path: Path, query: str, kind: str,
                                                                              words: str) -> None:
    """A spec query with a mistyped column was refused as "expected a valid SQL query (BinderException)": a class
    name, no word of what to look for. The kind is now said in words; DuckDB's message is still never shown (a
    conversion error quotes the value, here a note)."""
    db = tmp_path / "extract.duckdb"
    con = duckdb.connect(str(db))
    con.execute("create table referrals (ref_id integer, note varchar, prompt varchar, outcome varchar)")
    con.execute("insert into referrals values (1, 'Ada Quillonby, ear pain', 'Refer to ENT?', 'A')")
    con.close()
    options = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome",
               "query": query}
    spec = shipped_spec("ent_referral").model_copy(update={"loader_options": options})
    with pytest.raises(ExtractError) as refused:
        load_dataset(spec, db)
    message = str(refused.value)
    assert f"({kind}: {words}" in message and "run the query with DuckDB on a copy of the extract" in message
    assert "Quillonby" not in message and "ref_idx" not in message and "uppr" not in message


def test_duckdb_missing_table(tmp_path: Path) -> None:
    db = tmp_path / "extract.duckdb"
    duckdb.connect(str(db)).close()
    spec = shipped_spec("ent_referral").model_copy(update={"loader_options": {"table": "referrals"}})
    with pytest.raises(ExtractError, match="a table or view named 'referrals'") as refused:
        load_dataset(spec, db)
    # The table was named as a column: "file extract.duckdb, column 'referrals': expected a table or view named ..."
    assert refused.value.column is None and "column" not in str(refused.value)
    assert str(refused.value) == f"file {db}: expected a table or view named 'referrals' (loader option table)"


def test_omop_eunomia_end_to_end(tmp_path: Path, eunomia_db: Path) -> None:
    home = tmp_path / "home"
    register_custom_spec(SAMPLES / "omop_gi_bleed.yaml", home)
    spec = SpecRegistry(home).get("omop_gi_bleed")
    result = load_dataset(spec, eunomia_db)
    assert len(result.instances) == 2694
    assert Counter(i.label for i in result.instances) == {"no": 2215, "yes": 479}
    first = result.instances[0]
    assert first.id == "1:1982-08-12"
    assert first.meta["person_id"] == 1 and first.meta["prediction_date"] == "1982-08-12"
    lines = first.fields["timeline"].splitlines()
    assert lines[0].startswith("Patient: ") and "age 33" in lines[0]
    dates = [line.split(" | ")[0] for line in lines[1:]]
    assert dates == sorted(dates) and all(d < "1982-08-12" for d in dates)
    kinds = {line.split(" | ")[1].split(":")[0] for line in lines[1:]}
    assert {"Condition", "Drug", "Visit", "Measurement"} <= kinds
    assert "Drug: Diclofenac" not in first.fields["timeline"]  # the index dispensing is not before itself
    assert build_request(spec, first).messages[-1].content.count("yes or no") == 1
    again = load_dataset(spec, eunomia_db)
    assert [i.id for i in again.instances] == [i.id for i in result.instances]


def test_omop_timeline_keeps_the_most_recent_events(tmp_path: Path, eunomia_db: Path) -> None:
    path = _custom(tmp_path, "omop_gi_bleed.yaml", loader_options={"max_context_tokens": 120})
    spec = register_custom_spec(path, tmp_path / "home")
    full = load_dataset(SpecRegistry(tmp_path / "home").get("omop_gi_bleed").model_copy(
        update={"loader_options": {**spec.loader_options, "max_context_tokens": 100000}}), eunomia_db)
    short = load_dataset(spec, eunomia_db)
    long_one = next(i for i in full.instances if i.meta["n_events"] > 20)
    short_one = next(i for i in short.instances if i.id == long_one.id)
    assert short_one.meta["events_dropped"] > 0
    assert "earlier events omitted" in short_one.fields["timeline"]
    assert short_one.fields["timeline"].splitlines()[-1] == long_one.fields["timeline"].splitlines()[-1]
    assert len(short_one.fields["timeline"]) <= 120 * 4 + 200


def test_omop_cohort_sql_missing_column(tmp_path: Path, eunomia_db: Path) -> None:
    path = _custom(tmp_path, "omop_gi_bleed.yaml",
                   loader_options={"cohort_sql": "select person_id, 'no' as label from person"})
    spec = register_custom_spec(path, tmp_path / "home")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, eunomia_db)
    assert info.value.column == "prediction_date"


def test_omop_bad_label_names_the_row(tmp_path: Path, eunomia_db: Path) -> None:
    sql = "select person_id, date '2019-01-01' as prediction_date, 'unknown' as label from person order by 1 limit 3"
    spec = register_custom_spec(_custom(tmp_path, "omop_gi_bleed.yaml", loader_options={"cohort_sql": sql}),
                                tmp_path / "home")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, eunomia_db)
    assert (str(info.value.place), info.value.column) == ("cohort_sql row 1 (counting from 1)", "label")


def test_omop_database_without_cdm_tables(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    duckdb.connect(str(db)).close()
    spec = register_custom_spec(SAMPLES / "omop_gi_bleed.yaml", tmp_path / "home")
    with pytest.raises(ExtractError) as info:
        load_dataset(spec, db)
    assert info.value.column == "person"


def test_omop_requires_cohort_sql(tmp_path: Path, eunomia_db: Path) -> None:
    spec = register_custom_spec(SAMPLES / "omop_gi_bleed.yaml", tmp_path / "home")
    broken = spec.model_copy(update={"loader_options": {"question": "q"}})
    with pytest.raises(BadInputError, match="cohort_sql"):
        load_dataset(broken, eunomia_db)


def test_sample_files_are_copied_not_modified(tmp_path: Path) -> None:
    copy = tmp_path / "followup_needed.csv"
    shutil.copyfile(SAMPLES / "followup_needed.csv", copy)
    spec = register_custom_spec(SAMPLES / "followup_needed.yaml", tmp_path / "home")
    assert len(load_dataset(spec, copy).instances) == 6


def test_a_multiple_choice_answer_not_in_the_answer_format_names_the_loader_option(tmp_path: Path) -> None:
    """A Parquet extract whose answer column holds the option's text, read with the default answer_format
    (letter): the error names the option and its values, so the user can set answer_format: text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"note_id": [1, 2], "note": ["knee pain", "cataract"],
                             "a": ["Orthopedic", "Ophthalmology"], "b": ["Ophthalmology", "Orthopedic"],
                             "answer": ["Orthopedic", "Orthopedic"]}), tmp_path / "extract.parquet")
    mapping: dict[str, object] = {"id_column": "note_id", "fields": {"context": "note"}, "option_columns": ["a", "b"],
               "answer_column": "answer"}

    def spec_with(options: dict[str, object]) -> Path:
        data = yaml.safe_load((SAMPLES / "followup_needed.yaml").read_text(encoding="utf-8"))
        data.update(loader_options=options, prompt={"template": "{context}\n{options}\nAnswer:"})
        del data["label_map"]
        path = tmp_path / "followup_needed.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    spec = register_custom_spec(spec_with(mapping), tmp_path / "home")
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec, tmp_path / "extract.parquet")
    message = str(caught.value)
    assert "record 1 (counting from 1)" in message and "'answer'" in message and "option letters A, B" in message
    assert "answer_format" in message and "text" in message and "index1" in message
    assert "Orthopedic" not in message  # never a value of the extract
    text = register_custom_spec(spec_with({**mapping, "answer_format": "text"}), tmp_path / "home")
    assert [i.label for i in load_dataset(text, tmp_path / "extract.parquet").instances] == ["A", "B"]
