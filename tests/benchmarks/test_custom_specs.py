"""Custom benchmark YAML: validation (each problem names the field) and persistence under the home."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.benchmarks.registry import (
    SpecRegistry,
    custom_specs,
    load_custom_spec,
    register_custom_spec,
    remove_custom_spec,
    shipped_spec,
    shipped_specs,
)
from medhelm_local.errors import BadInputError, NotFoundError

BASE: dict[str, Any] = {
    "id": "wound_followup",
    "name": "Wound Follow-up",
    "description": "Does the wound need a nurse visit?",
    "subcategory": "Care Coordination and Planning",
    "loader_options": {"fields": {"context": "note", "question": "prompt"}, "label_column": "label"},
    "output_type": "choice_letter",
    "labels": ["A", "B"],
    "metric": "exact_match",
    "max_tokens": 8,
    "prompt": {"template": "{context}\n\n{question}\nAnswer A or B.\nAnswer:"},
}


def _write(tmp_path: Path, **changes: Any) -> Path:
    data = {**BASE, **changes}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_and_category_from_the_subcategory(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path))
    assert spec.category == "Administration and Workflow"
    assert (spec.access.value, spec.curation.value, spec.input_format) == ("private", "new", "private_table")


def test_alias_subcategory_is_canonicalised(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path, subcategory="Predicting Patient Risks and Outcomes"))
    assert (spec.category, spec.subcategory) == ("Clinical Decision Support", "Predicting Risks and Outcomes")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"subcategory": "Astrology"}, "field subcategory must be one of"),
        ({"category": "Clinical Note Generation"}, "field category must be 'Administration and Workflow'"),
        ({"id": "pubmedqa"}, "built-in MedHELM benchmark"),
        ({"id": "Bad Id"}, "field id"),
        ({"input_format": "telepathy"}, "field input_format must be one of"),
        ({"metric": "vibes"}, "field metric must be one of"),
        ({"max_tokens": 0}, "field max_tokens"),
        ({"prompt": {"template": "{context"}}, "field prompt.template is not a valid template"),
        ({"prompt": {"template": "{note[0]}"}}, "template fields must be plain names"),
        ({"prompt": {"template": "{question:{context}}"}}, "a field may not sit inside another's format spec"),
        ({"prompt": {"template": "{context:{question.__class__}}"}}, "a field may not sit inside another's format"),
        ({"output_type": "free_text", "labels": None, "metric": "jury",
          "judge": {"criteria": [{"name": "accuracy", "description": "Faithful to the note?"}],
                    "template": "{question} {response:{gold_response}} {criteria}"}},
         "field judge.template uses {response:{gold_response}}; a field may not sit inside"),
        ({"labels": ["A", "B"], "label_map": {"1": "C"}}, "label_map maps to labels not in labels"),
        ({"colour": "blue"}, "field colour"),
        ({"output_type": "free_text", "metric": "jury"}, "needs a judge rubric"),
        ({"output_type": "free_text", "labels": None, "metric": "jury",
          "judge": {"criteria": [{"name": "accuracy", "description": "Faithful to the note?"}],
                    "template": "<note>{context}</note> <answer>{response}</answer> {criteria}"}},
         "field judge.template uses {context}; a judge template may use only {question}"),
        ({"output_type": "free_text", "labels": None, "metric": "jury",
          "judge": {"criteria": [{"name": "accuracy", "description": "Faithful to the note?"}],
                    "template": "<note>{question}</note> <reference>{gold_response}</reference> {criteria}"}},
         "field judge.template must show the judges the model's answer as {response}"),
    ],
)
def test_invalid_custom_specs_name_the_field(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_custom_spec(_write(tmp_path, **changes))


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "custom.yaml"
    path.write_text("id: x\nname: [unclosed\n", encoding="utf-8")
    with pytest.raises(BadInputError, match="invalid YAML at line"):
        load_custom_spec(path)


def test_register_persists_under_the_home_and_joins_the_registry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert custom_specs(home) == {}
    spec = register_custom_spec(_write(tmp_path), home)
    stored = home / "benchmarks" / "wound_followup.yaml"
    assert stored.is_file() and (stored.stat().st_mode & 0o777) == 0o600
    assert SpecRegistry(home).get("wound_followup") == spec
    ids = [s.id for s in SpecRegistry(home).all()]
    assert len(ids) == 38 and ids[-1] == "wound_followup"
    assert "wound_followup" not in [s.id for s in shipped_specs()]
    with pytest.raises(NotFoundError):
        shipped_spec("wound_followup")
    register_custom_spec(_write(tmp_path, name="Wound Follow-up v2"), home)
    assert SpecRegistry(home).get("wound_followup").name == "Wound Follow-up v2"
    remove_custom_spec("wound_followup", home)
    with pytest.raises(NotFoundError):
        SpecRegistry(home).get("wound_followup")


def test_each_context_sees_its_own_homes_specs_and_nothing_is_process_wide(tmp_path: Path) -> None:
    """The registry rides on the context: a library caller needs no set-up the CLI does, and two homes in one
    process never see each other's benchmarks."""
    import medhelm_local.benchmarks.registry as registry
    from medhelm_local.context import AppContext
    from medhelm_local.home import Home

    with_custom = AppContext(home=Home(tmp_path / "a"), actor="tester")
    without = AppContext(home=Home(tmp_path / "b"), actor="tester")
    register_custom_spec(_write(tmp_path), with_custom.home.root)
    assert with_custom.specs.get("wound_followup").id == "wound_followup"
    assert len(with_custom.specs.all()) == 38 and registry.is_custom("wound_followup")
    assert with_custom.specs.category_of("wound_followup") == with_custom.specs.get("wound_followup").category
    with pytest.raises(NotFoundError):
        without.specs.get("wound_followup")
    assert len(without.specs.all()) == 37
    with pytest.raises(NotFoundError):
        shipped_spec("wound_followup")
    assert not hasattr(registry, "set_active_home") and not hasattr(registry, "_active_home")




@pytest.mark.parametrize("line", ['labels: [yes, no]\nlabel_map: {"Y": "yes", "N": "no"}',
                                  'labels: ["yes", "no"]\nlabel_map: {Yes: "yes", No: "no"}',
                                  'labels: ["A", "B"]\nlabel_map: {1: "A", 0: "B"}'])
def test_unquoted_yaml_booleans_and_numbers_say_to_quote_them(tmp_path: Path, line: str) -> None:
    """YAML reads an unquoted yes/no (or Yes, on, off) as a boolean and 1 as a number: the error says to quote them,
    not only "Input should be a valid string" at a position that names no key the user wrote."""
    base = {k: v for k, v in BASE.items() if k not in ("labels",)}
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(base) + line + "\n", encoding="utf-8")
    with pytest.raises(BadInputError) as caught:
        load_custom_spec(path)
    assert "quote" in str(caught.value) and "yes/no" in str(caught.value)


@pytest.mark.parametrize(("text", "problem"), [
    ("id: x\njudge:\n  criteria:\n    - {name: accuracy, description: Faithful to the note?}\n",
     "expected ',' or '}', but got '?'"),
    ("id: x\nloader_options:\n\tid_column: note_id\n", "found character '\\t' that cannot start any token"),
])
def test_invalid_yaml_says_what_the_parser_expected(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "custom.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInputError) as caught:
        load_custom_spec(path)
    assert "invalid YAML at line" in str(caught.value) and problem in str(caught.value)
