"""Bad input around the parity mode: an old dataset, unknown views, and the field views' exact renderings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import SHIPPED, shipped_spec
from medhelm_local.errors import BadInputError, ExtractError
from medhelm_local.loaders import load_dataset
from medhelm_local.loaders.tabular import create_table_statements
from medhelm_local.runner.plan import compute_plan
from medhelm_local.store import Store
from tests.runner.helpers import make_home, register, synthetic_instances


def test_a_dataset_registered_without_the_fields_a_parity_prompt_needs_is_refused_before_any_request(
        tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", ["http://127.0.0.1:9/v1"])
    register(home, synthetic_instances(5))  # PubMedQA-shaped, as an older loader stored them: no labelled_context
    with Store.open(home) as store:
        compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0)  # the default style needs none
        with pytest.raises(BadInputError) as caught:
            compute_plan(store, SHIPPED, "fake", ["pubmedqa"], max_instances=None, seed=0, prompt_style="medhelm")
    assert "labelled_context" in str(caught.value) and "datasets register pubmedqa" in str(caught.value)
    assert caught.value.exit_code == 2


def test_an_unknown_sibling_text_view_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text(json.dumps([{"id": 1, "question": "q?", "query": "select 1"}]))
    (tmp_path / "db.sql").write_text("CREATE TABLE t\\n(\\n  a INT\\n);\\n")
    (tmp_path / "db.sqlite").write_bytes(b"")
    spec = shipped_spec("ehrsql")
    options = dict(spec.loader_options)
    options["sibling_text"] = {"schema": "*.sql", "create_tables": {"glob": "*.sql", "view": "everything"}}
    with pytest.raises(ExtractError) as caught:
        load_dataset(spec.model_copy(update={"loader_options": options}), tmp_path)
    assert "create_table_statements" in str(caught.value) and "everything" in str(caught.value)


def test_create_table_statements_is_helms_schema_extract() -> None:
    sql = ("DROP TABLE IF EXISTS patient;\n"
           "CREATE TABLE patient\n(\n    uniquepid VARCHAR(10) NOT NULL,\n    age VARCHAR(10)\n) ;\n"
           "INSERT INTO patient VALUES ('a', '1');\n"
           "  CREATE TABLE lab\n  (\n    labid INT\n  );\n")
    assert create_table_statements(sql) == (
        "CREATE TABLE patient\n(\nuniquepid VARCHAR(10) NOT NULL,\nage VARCHAR(10)\n) ;\n\n"
        "CREATE TABLE lab\n(\nlabid INT\n);")


def test_field_views_render_the_cell_as_helm_does(tmp_path: Path) -> None:
    row = {"Question": "Q?", "Knowledge": ["It's one.", 'Say "two".'], "Ground Truth": "a", "Hallucinated Answer": "b",
           "Difficulty Level": "easy", "Category of Hallucination": "x"}
    (tmp_path / "medhallu.jsonl").write_text(json.dumps(row) + "\n")
    instance = load_dataset(shipped_spec("medhallu"), tmp_path).instances[0]
    assert instance.fields["knowledge_pylist"] == str(row["Knowledge"]) == """["It's one.", 'Say "two".']"""
    assert instance.fields["knowledge"] == "It's one.\nSay \"two\"."


def test_medqa_options_lose_stray_quotes_like_helm(tmp_path: Path) -> None:
    item = {"question": "Q?", "answer_idx": "A", "meta_info": "step1",
            "options": {"A": 'Pulmonary embolism\n"', "B": "Pneumonia  ", "C": 'Say "x"', "D": "Asthma"}}
    (tmp_path / "test.jsonl").write_text(json.dumps(item) + "\n")
    instance = load_dataset(shipped_spec("medqa"), tmp_path).instances[0]
    assert instance.fields["options"] == 'A. Pulmonary embolism\nB. Pneumonia\nC. Say "x\nD. Asthma'


@pytest.mark.parametrize("key", ["template", "judge_question", "judge_gold"])
def test_a_custom_specs_parity_templates_take_plain_field_names_only(tmp_path: Path, key: str) -> None:
    from medhelm_local.benchmarks.registry import load_custom_spec

    spec = (Path(__file__).parents[2] / "medhelm_local" / "data" / "samples" / "followup_needed.yaml").read_text()
    parity = {"helm_run_spec": "x", "template": "{question}", "max_tokens": 1}
    if key != "template":
        parity.update({"judge_question": "{question}", "judge_template": "{question}"})
    parity[key] = "{question.__class__.__mro__}"
    path = tmp_path / "custom.yaml"
    path.write_text(spec + "\n" + __import__("yaml").safe_dump({"medhelm": parity}))
    with pytest.raises(BadInputError) as caught:
        load_custom_spec(path)
    assert f"medhelm.{key}" in str(caught.value) and "plain names" in str(caught.value)
